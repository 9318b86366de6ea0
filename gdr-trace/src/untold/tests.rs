use super::*;

fn st(hook: &'static str, attached: bool) -> HookStatus {
    let kernel = crate::hooks::by_function(hook).expect(hook).is_kernel();
    HookStatus {
        hook,
        side: if kernel { "kernel" } else { "user" },
        location: None,
        attached: attached.then(|| "kprobe+kretprobe".into()),
        reasons: vec!["symbol not in /proc/kallsyms".into()],
    }
}

fn found(mut h: HookStatus, why: &str) -> HookStatus {
    h.location = Some("ib_uverbs".into());
    h.reasons = vec![why.into()];
    h
}

/// A kernel that takes neither kprobes nor fentry (this build host's).
fn blind_kernel() -> KernelFacts {
    KernelFacts {
        kprobe_unavailable: Some("no kprobe PMU".into()),
        fentry_unavailable: Some("BPF_PROG_LOAD: Operation not permitted".into()),
        ..Default::default()
    }
}

fn facts_of(u: &[Untold]) -> Vec<&str> {
    u.iter().map(|u| u.fact).collect()
}

#[test]
fn a_kernel_without_kprobes_or_fentry_cannot_tell_memory_type_though_libibverbs_is_hooked() {
    let hooks = [st("ibv_reg_mr", true), st("ib_umem_get", false), st("nvidia_p2p_get_pages", false)];
    let u = untold(&blind_kernel(), &hooks);
    assert_eq!(facts_of(&u), ["memory_type", "gpu_pins"], "{u:#?}");
    let line = &u[0].says;
    assert_eq!(
        line,
        "memory type of registrations (host or GPU) cannot be told here: no kernel registration hook attached \
         (this kernel takes neither kprobes nor fentry)"
    );
    assert!(is_told(&blind_kernel(), &hooks, "registrations"));
    assert!(!is_told(&blind_kernel(), &hooks, "memory_type"));
}

#[test]
fn a_missing_module_is_absent_unless_what_it_would_tell_is_seen_without_it() {
    let k = KernelFacts::default();
    // Neither libibverbs nor ib_umem_get, nor nvidia.ko: no RDMA here, nothing to tell.
    let hooks = [st("ibv_reg_mr", false), st("ib_umem_get", false), st("nvidia_p2p_get_pages", false)];
    assert!(untold(&k, &hooks).is_empty());
    let s = states(&k, &hooks);
    assert!(
        s.iter().all(|(_, s)| !matches!(s, State::Untold(_))),
        "{:?}",
        s.iter().map(|x| &x.1).collect::<Vec<_>>()
    );
    // libibverbs hooked, ib_umem_get not in this kernel (yet): registrations are seen, untyped.
    let hooks = [st("ibv_reg_mr", true), st("ib_umem_get", false)];
    let u = untold(&k, &hooks);
    assert_eq!(facts_of(&u), ["memory_type"]);
    assert!(u[0].says.ends_with("(ib_umem_get: symbol not in /proc/kallsyms)"), "{}", u[0].says);
    // Found but refused: untold, with the reason it gave.
    let hooks = [st("ibv_reg_mr", false), found(st("ib_umem_get", false), "kprobe: EINVAL")];
    let u = untold(&k, &hooks);
    assert_eq!(facts_of(&u), ["registrations"], "the type's line rides on the registrations'");
    assert!(u[0].says.ends_with("(ib_umem_get: kprobe: EINVAL)"), "{}", u[0].says);
    // nvidia-fs not on this host: absent even on a kernel that could hook nothing.
    let mut nvfs = st("nvfs_ioctl", false);
    nvfs.reasons = vec![format!("no nvidia-fs here: {NOTHING_TO_WATCH}")];
    assert!(untold(&blind_kernel(), &[nvfs]).is_empty());
}

#[test]
fn queue_purpose_is_said_only_where_pins_are_seen() {
    let k = KernelFacts::default();
    let pins = [st("ib_umem_get", true), st("uverbs create_cq", false)];
    let u = untold(&k, &pins);
    assert_eq!(facts_of(&u), ["queue_purpose"]);
    assert!(u[0].says.contains("queue memory of unknown purpose") && u[0].says.contains("uverbs verb hook"));
    assert!(untold(&k, &[st("ib_umem_get", true), st("uverbs create_cq", true)]).is_empty());
    // No pin seen at all: the missing verb hooks add nothing to say.
    let u = untold(
        &blind_kernel(),
        &[st("ibv_reg_mr", true), st("ib_umem_get", false), st("uverbs create_cq", false)],
    );
    assert_eq!(facts_of(&u), ["memory_type"]);
}

#[test]
fn left_out_on_purpose_is_not_untold_but_no_uprobes_is() {
    let mut cufile = st("cuFileRead", false);
    cufile.reasons = vec![format!("{} (--no-storage)", crate::facts::LEFT_OUT)];
    let mut copy = st("cuMemcpyPeer", false);
    copy.reasons = vec![UPROBES_DISABLED.into()];
    let u = untold(&KernelFacts::default(), &[cufile, copy]);
    assert_eq!(facts_of(&u), ["peer_copies"]);
    assert!(u[0].says.ends_with("(uprobes disabled (--no-uprobes))"), "{}", u[0].says);
}

#[test]
fn byte_hooks_placed_later_are_told() {
    let mut post = st("post_send", false);
    post.reasons = vec![crate::loader::provider::DEFERRED.into()];
    assert!(is_told(&blind_kernel(), &[post], "bytes_per_mr"));
    assert!(is_told(&blind_kernel(), &[], "memory_type"), "a replay without statuses");
}

/// Registrations only libibverbs saw are claims where a kernel hook would have seen a real one
/// (it attached), or where no RDMA core is here; on a blind kernel they are all there is.
#[test]
fn claims_are_kept_apart_only_where_a_kernel_hook_could_corroborate() {
    let told = [st("ibv_reg_mr", true), st("ib_umem_get", true)];
    assert!(claims_apart(&KernelFacts::default(), &told));
    let absent = [st("ibv_reg_mr", true), st("ib_umem_get", false)];
    assert!(!claims_apart(&blind_kernel(), &absent), "blind: every registration is uprobe-only");
    let nothing = [st("ibv_reg_mr", false), st("ib_umem_get", false)];
    assert!(claims_apart(&KernelFacts::default(), &nothing), "no RDMA core: nothing real to register");
}
