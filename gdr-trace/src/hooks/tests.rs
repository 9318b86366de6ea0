use std::collections::BTreeMap;

use aya_obj::ProgramSection;

use super::*;

#[test]
fn every_hook_id_has_one_row() {
    for id in HookId::ALL {
        assert_eq!(HOOKS.iter().filter(|h| h.id == *id).count(), 1, "{id:?}");
    }
}

fn kind(section: &ProgramSection) -> Option<ProgramKind> {
    Some(match section {
        ProgramSection::FEntry { .. } => ProgramKind::Fentry,
        ProgramSection::FExit { .. } => ProgramKind::Fexit,
        ProgramSection::KProbe => ProgramKind::Kprobe,
        ProgramSection::KRetProbe => ProgramKind::Kretprobe,
        ProgramSection::UProbe { .. } => ProgramKind::Uprobe,
        ProgramSection::URetProbe { .. } => ProgramKind::Uretprobe,
        ProgramSection::TracePoint => ProgramKind::Tracepoint,
        _ => return None,
    })
}

/// The table and the built eBPF object (embedded by build.rs) name the same programs, with the
/// same kinds: a row can't name a program that isn't there, and no program goes unlisted.
#[test]
fn the_table_and_the_ebpf_object_agree() {
    let obj = aya_obj::Object::parse(crate::loader::EBPF_OBJECT).expect("the embedded eBPF object parses");
    let in_object: BTreeMap<&str, Option<ProgramKind>> =
        obj.programs.iter().map(|(name, p)| (name.as_str(), kind(&p.section))).collect();
    let mut in_table: BTreeMap<&str, ProgramKind> = BTreeMap::new();
    for hook in HOOKS {
        for (prog, k) in hook.programs.each() {
            assert!(in_table.insert(prog, k).is_none(), "{prog} is named by two rows ({})", hook.function);
            match in_object.get(prog) {
                None => panic!("row {} names {prog}, which the eBPF object lacks", hook.function),
                Some(got) => {
                    assert_eq!(*got, Some(k), "{prog} (row {}) has another kind in the object", hook.function)
                }
            }
        }
    }
    // The one program in no row: uprobe_multi's dispatcher, which runs the rows' programs.
    let dispatcher = crate::loader::uprobe_multi::DISPATCHER;
    assert_eq!(
        in_object.get(dispatcher),
        Some(&Some(ProgramKind::Uprobe)),
        "the dispatcher is in the object"
    );
    let unlisted: Vec<&&str> =
        in_object.keys().filter(|p| !in_table.contains_key(**p) && **p != dispatcher).collect();
    assert!(unlisted.is_empty(), "programs in the eBPF object but in no row of the hook table: {unlisted:?}");
    assert!(in_table.len() > 40, "the table names only {} programs", in_table.len());
}

#[test]
fn roles_and_paths_say_what_the_rows_are() {
    assert!(HOOKS.iter().filter(|h| h.path == Path::Tracer).all(|h| matches!(
        h.role,
        Role::ForkTracker | Role::ExitUntracker | Role::LibraryMapper | Role::CapabilityProbe
    )));
    assert_eq!(HOOKS.iter().filter(|h| h.role == Role::LibraryMapper).count(), 2, "enter and exit of mmap");
    for role in [Role::ForkTracker, Role::ExitUntracker, Role::CapabilityProbe, Role::PeerRegister] {
        assert_eq!(HOOKS.iter().filter(|h| h.role == role).count(), 1, "{role:?}");
    }
    assert!(HOOKS.iter().filter(|h| h.role == Role::DmabufRegister).all(|h| h.path == Path::Gpu));
    // ib_umem_get and the names later kernels pin through (hooks/kernels_tests.rs).
    assert!(HOOKS
        .iter()
        .filter(|h| h.role == Role::UmemPinned)
        .all(|h| h.function.starts_with("ib_umem_get")));
}

/// The rows the loader lists for itself (`facts::TRACER_ROWS`, out of every hook total) are
/// the tracer's rows by those names, and no hook that observes shares a name with them.
#[test]
fn the_tracer_rows_kept_out_of_hook_totals_are_the_tracers() {
    assert_eq!(by_role(Role::ForkTracker).function, crate::facts::TRACER_ROWS[0]);
    let mapper: Vec<&str> =
        HOOKS.iter().filter(|h| h.role == Role::LibraryMapper).map(|h| h.function).collect();
    assert!(mapper.contains(&crate::facts::TRACER_ROWS[1]), "{mapper:?}");
    for name in crate::facts::TRACER_ROWS {
        assert!(HOOKS.iter().filter(|h| h.function == name).all(|h| h.path == Path::Tracer), "{name}");
    }
}
