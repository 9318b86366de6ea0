//! Library copies: every copy of a hooked library that a traced process maps is
//! found and hooked once, wherever it lives (a wheel-like directory, a `dlopen` after tracing
//! started, another mount namespace with its own tmpfs and cgroup), and let go when the last
//! process mapping it exits. Host tests (uprobes work here). Run as root, one at a time.

#[path = "libs/container.rs"]
mod container;
#[path = "libs/gds_reasons.rs"]
mod gds_reasons;
#[path = "libs/util.rs"]
mod util;

use gdr_trace_tests::Tracer;
use serde_json::Value;
use util::*;

#[path = "storage_util.rs"]
#[allow(unused)]
mod storage_util;
use storage_util::{by, s, scratch, storage_workload, u, LIBCUFILE};

/// A library `dlopen`ed after `attach` began is hooked before its first call (the workload
/// holds until the tracer says the copy is attached: a handshake, no sleep): the kernel's mmap
/// watch says which process to look at.
#[test]
fn a_library_dlopened_after_attach_is_hooked_in_time() {
    let dir = scratch();
    let lib = wheel_copy(dir.path());
    let f = dir.path().join("late.bin").display().to_string();
    let steps = [s(&["dlopen", &lib]), s(&["hold"]), s(&["cufile-read", &f, "64K", "0"])];
    let mut w = storage_workload(&[s(&["create", &f, "256K"])], &steps, &[("GDR_CUFILE_LATE", "1")]);
    let pid = w.pid();
    let mut t = Tracer::spawn(
        &["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"].map(String::from),
    );
    w.go();
    let (_, mut recs) = w.hold_until_traced(&mut t, copy_is(&lib, "attached"));
    let _ = w.finish();
    recs.extend(t.finish());
    assert_eq!(t.attached("sys_exit_mmap").as_deref(), Some("tracepoint"), "{}", t.hooks);
    let reads: Vec<&Value> = by(&recs, "gds_io").into_iter().filter(|g| g["op"] == "cuFileRead").collect();
    assert_eq!(reads.len(), 1, "the cuFileRead after the late dlopen: {:#?}", by(&recs, "library_copy"));
    assert_eq!(u(&reads[0]["pid"]), pid as u64);
    let copies = copies_of(&recs, &lib, "attached");
    assert_eq!(copies.len(), 1, "hooked once: {copies:#?}");
    let hooked = copies[0]["hooked"].to_string();
    assert!(hooked.contains("\"cuFileRead\"") && hooked.contains("\"cuFileDriverOpen\""), "{hooked}");
    assert_eq!(copies[0]["own_mnt_ns"], true);
}

/// `watch`: two processes map the same new copy: one hook, both processes' calls, and the copy
/// is let go when the last of them exits. Where the kernel makes uprobe_multi links (its own
/// symbol table says so) the copy is hooked through them.
#[test]
fn watch_hooks_a_copy_once_for_two_processes_and_lets_it_go() {
    let via = if gdr_trace_tests::kernel_has_uprobe_multi() { "uprobe_multi" } else { "perf_event" };
    two_processes_one_copy(&[], via);
}

/// The same with `--no-uprobe-multi`: a perf-event uprobe per offset, and the same calls seen.
#[test]
fn a_copy_hooked_with_perf_event_uprobes_sees_the_same_calls() {
    two_processes_one_copy(&["--no-uprobe-multi"], "perf_event");
}

fn two_processes_one_copy(extra: &[&str], via: &str) {
    let dir = scratch();
    let lib = wheel_copy(dir.path());
    let f = dir.path().join("two.bin").display().to_string();
    let args: Vec<String> = ["watch", "--json", "--duration", "600", "--interval", "0"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    let mut t = Tracer::spawn(&args);
    let steps = [s(&["dlopen", &lib]), s(&["hold"]), s(&["cufile-read", &f, "64K", "0"])];
    let env = [("GDR_CUFILE_LATE", "1")];
    let mut a = storage_workload(&[s(&["create", &f, "256K"])], &steps, &env);
    let mut b = storage_workload(&[], &steps, &env);
    a.go();
    b.go();
    // Both have mapped the copy once each holds; the calls come after the tracer hooked it.
    let (_, mut recs) = a.hold_until_traced(&mut t, copy_is(&lib, "attached"));
    assert!(b.until_hold().1, "the second workload ended before it held");
    b.go();
    let _ = (a.finish(), b.finish());
    recs.extend(t.until("the copy let go", copy_is(&lib, "detached")));
    recs.extend(t.terminate());
    for p in [a.pid(), b.pid()] {
        let n = by(&recs, "gds_io")
            .iter()
            .filter(|g| g["op"] == "cuFileRead" && u(&g["pid"]) == p as u64)
            .count();
        assert_eq!(n, 1, "pid {p}'s cuFileRead: {:#?}", copies_of(&recs, &lib, "attached"));
    }
    let attached = copies_of(&recs, &lib, "attached");
    assert_eq!(attached.len(), 1, "one copy, one hook: {attached:#?}");
    assert_eq!(attached[0]["via"], via, "{attached:#?}");
    let gone = copies_of(&recs, &lib, "detached");
    assert_eq!(gone.len(), 1, "let go after the last process exited: {:#?}", by(&recs, "library_copy"));
    assert_eq!((u(&gone[0]["processes"]), &gone[0]["inode"]), (0, &attached[0]["inode"]));
}

/// A file named like the library without its functions: a stated reason, no hook, no crash.
#[test]
fn a_copy_without_the_symbols_is_a_stated_reason_in_probes() {
    let dir = scratch();
    let fake = dir.path().join("fake/libcufile.so.0");
    std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
    std::fs::copy(any_system_library(), &fake).unwrap();
    let fake = fake.display().to_string();
    let mut w = storage_workload(&[s(&["map", &fake])], &[], &[("GDR_CUFILE_LATE", "1")]);
    let v = gdr_trace_tests::probes_json(&["--pid", &w.pid().to_string()]);
    w.go();
    let _ = w.finish();
    let mine: Vec<&Value> =
        v["libraries"].as_array().expect("libraries").iter().filter(|c| c["path"] == fake.as_str()).collect();
    assert_eq!(mine.len(), 1, "{v:#}");
    assert_eq!(mine[0]["state"], "failed", "{}", mine[0]);
    assert!(
        mine[0]["reasons"].to_string().contains("none of the hooked libcufile.so.0 functions"),
        "{}",
        mine[0]
    );
    assert_eq!(u(&mine[0]["processes"]), 1);
    // The test library itself, mapped by no one here, is not listed.
    assert!(!v["libraries"].to_string().contains(LIBCUFILE), "{v:#}");
}

/// `attach PID` follows the tree: a child forked after attach that dlopens its own copy is
/// hooked, and its calls are seen.
#[test]
fn attach_follows_a_child_that_dlopens_a_copy() {
    let dir = scratch();
    let lib = wheel_copy(dir.path());
    let f = dir.path().join("child.bin");
    std::fs::write(&f, vec![7u8; 256 << 10]).unwrap();
    let f = f.display().to_string();
    let wl = storage_util::workload_bin().display().to_string();
    let steps = [s(&["dlopen", &lib]), s(&["hold"]), s(&["cufile-read", &f, "64K", "0"])];
    // The shell waits for "go", then forks the workload as its child (not exec: another pid),
    // which reads its own "go" lines from the same pipe (the shell's `read` takes one line).
    let script = format!("read _; GDR_CUFILE_LATE=1 {wl} go {}; true", steps.join(" "));
    let mut w = gdr_trace_tests::Workload::start({
        let mut c = std::process::Command::new("sh");
        c.args(["-c", &script]);
        c
    });
    let parent = w.pid();
    let mut t = Tracer::spawn(
        &["attach", &parent.to_string(), "--json", "--duration", "120", "--interval", "0"].map(String::from),
    );
    w.go(); // the shell
    w.go(); // its child, once ready
    let (mut truth, mut recs) = w.hold_until_traced(&mut t, copy_is(&lib, "attached"));
    truth.extend(w.finish());
    recs.extend(t.finish());
    let child = truth.iter().find_map(|r| r["pid"].as_u64()).expect("the child's own records");
    assert_ne!(child, parent as u64);
    let reads: Vec<&Value> = by(&recs, "gds_io")
        .into_iter()
        .filter(|g| g["op"] == "cuFileRead" && u(&g["pid"]) == child)
        .collect();
    assert_eq!(reads.len(), 1, "the child's cuFileRead: {:#?}", by(&recs, "library_copy"));
    let copies = copies_of(&recs, &lib, "attached");
    assert_eq!(copies.len(), 1, "{copies:#?}");
    assert_eq!(copies[0]["pids"], serde_json::json!([child]), "{}", copies[0]);
}
