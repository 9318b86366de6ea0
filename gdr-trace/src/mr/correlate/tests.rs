use super::*;
use crate::events::Context;

fn rec(kind: MrKind, source: &str, tid: u32, ts: u64, addr: u64, len: u64, handle: u64) -> MrRecord {
    let ctx = Context { pid: 10, tid, comm: "w".into(), uid: 0, cgroup_id: 1, ts_ns: ts };
    MrRecord { access: 1, device: Some("rxe0".into()), ..MrRecord::at(kind, source, ctx, addr, len, handle) }
}

fn regs(out: &[Joined]) -> Vec<&Registration> {
    out.iter().filter_map(|j| if let Joined::Registered(r) = j { Some(r) } else { None }).collect()
}

#[test]
fn kernel_and_nested_user_records_make_one_registration() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 100, 0x1000, 4096, 0xaa), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, 110, 0x1000, 4096, 0xbb), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 120, 0x1000, 4096, 0xbb), &mut out);
    assert!(out.is_empty(), "nothing closes inside the window");
    c.flush(&mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].sources, ["fexit:ib_umem_get", "uprobe:ibv_reg_mr_iova2", "uprobe:ibv_reg_mr"]);
    assert!(r[0].kernel_pinned);
    assert_eq!((r[0].umem, r[0].mr), (Some(0xaa), Some(0xbb)));
}

#[test]
fn identical_back_to_back_registrations_stay_two() {
    let mut c = Correlator::new();
    let mut out = vec![];
    for i in 0..2u64 {
        c.push(rec(MrKind::Register, "kprobe:ib_umem_get", 5, 100 + i, 0x1000, 4096, 0xa0 + i), &mut out);
        c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 101 + i, 0x1000, 4096, 0xb0 + i), &mut out);
    }
    c.flush(&mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 2);
    assert_ne!(r[0].id, r[1].id);
}

#[test]
fn user_only_registrations_are_split_by_repeated_source() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 1, 0x1000, 4096, 0xb1), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 2, 0x1000, 4096, 0xb2), &mut out);
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 2);
}

#[test]
fn threads_do_not_mix_and_tick_closes_old_items() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1_000, 0x1000, 4096, 0xa1), &mut out);
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 6, 2_000, 0x1000, 4096, 0xa2), &mut out);
    c.tick(1_000 + WINDOW_NS, &mut out);
    assert_eq!(regs(&out).len(), 1, "only the older item closed");
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 2);
}

#[test]
fn releases_join_their_registration_by_handle() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1, 0x1000, 8192, 0xaa), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 2, 0x1000, 8192, 0xbb), &mut out);
    // Dereg: the kernel release (length from the kernel's table), then the userspace return.
    c.push(rec(MrKind::Release, "fentry:ib_umem_release", 5, 10, 0, 8192, 0xaa), &mut out);
    c.push(rec(MrKind::Release, "uprobe:ibv_dereg_mr", 5, 11, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    let rels: Vec<&Release> =
        out.iter().filter_map(|j| if let Joined::Released(r) = j { Some(r) } else { None }).collect();
    assert_eq!(rels.len(), 1);
    let reg_id = regs(&out)[0].id;
    assert_eq!(rels[0].registration, Some(reg_id));
    assert_eq!((rels[0].addr, rels[0].length), (0x1000, 8192));
    assert_eq!(rels[0].sources, ["fentry:ib_umem_release", "uprobe:ibv_dereg_mr"]);
}

#[test]
fn a_dereg_returning_after_the_window_is_not_a_second_release() {
    // Unpinning a large MR (UCX's 36 MiB pools on rxe under TCG: 110 ms) outlasts the window:
    // the kernel's record is reported alone, and libibverbs' late return is the same release.
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1, 0x1000, 8192, 0xaa), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, 2, 0x1000, 8192, 0xbb), &mut out);
    c.push(rec(MrKind::Release, "fentry:ib_umem_release", 5, 10, 0, 8192, 0xaa), &mut out);
    c.tick(10 + WINDOW_NS, &mut out);
    let late = 20 + WINDOW_NS;
    c.push(rec(MrKind::Release, "uprobe:ibv_dereg_mr", 5, late, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    let rels: Vec<&Release> =
        out.iter().filter_map(|j| if let Joined::Released(r) = j { Some(r) } else { None }).collect();
    assert_eq!(rels.len(), 1, "{rels:#?}");
    assert_eq!(rels[0].registration, Some(regs(&out)[0].id));
    assert_eq!(rels[0].sources, ["fentry:ib_umem_release"]);
    // The same handle, registered again, is released again.
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, late + 1, 0x1000, 8192, 0xac), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, late + 2, 0x1000, 8192, 0xbb), &mut out);
    c.push(rec(MrKind::Release, "fentry:ib_umem_release", 5, late + 3, 0, 8192, 0xac), &mut out);
    c.push(rec(MrKind::Release, "uprobe:ibv_dereg_mr", 5, late + 4, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    let n = out.iter().filter(|j| matches!(j, Joined::Released(_))).count();
    assert_eq!(n, 2);
    assert!(c.reported.is_empty(), "{:?}", c.reported);
}

#[test]
fn a_reg_returning_after_the_window_is_not_a_second_registration() {
    // 16 processes registering at once in the VM: ibv_reg_mr returned more than the window
    // after ib_umem_get, and the soak counted 518 registrations for 500 made.
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1, 0x1000, 8192, 0xaa), &mut out);
    c.tick(1 + WINDOW_NS, &mut out);
    let late = 2 + WINDOW_NS;
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, late, 0x1000, 8192, 0xbb), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, late + 1, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 1, "{out:#?}");
    assert_eq!(regs(&out)[0].sources, ["fexit:ib_umem_get"]);
    // Its release joins it, by either handle, once.
    c.push(rec(MrKind::Release, "fentry:ib_umem_release", 5, late + 10, 0, 8192, 0xaa), &mut out);
    c.push(rec(MrKind::Release, "uprobe:ibv_dereg_mr", 5, late + 11, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    let rels: Vec<&Release> =
        out.iter().filter_map(|j| if let Joined::Released(r) = j { Some(r) } else { None }).collect();
    assert_eq!(rels.len(), 1, "{rels:#?}");
    assert_eq!(rels[0].registration, Some(regs(&out)[0].id));
    assert_eq!(rels[0].sources, ["fentry:ib_umem_release", "uprobe:ibv_dereg_mr"]);
    // The thread's next registration, user-side only (another buffer), is a registration.
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, late + 20, 0x9000, 4096, 0xcc), &mut out);
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 2);
    c.forget_process(10);
    assert!(c.late.is_empty(), "{:?}", c.late);
}

#[test]
fn an_outer_reg_returning_after_the_window_is_not_a_second_registration() {
    // Seen in the VM, 300 processes 16 at a time: ib_umem_get and the nested ibv_reg_mr_iova2
    // joined in time, the outer ibv_reg_mr returned 55-200 ms later and was counted again.
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1, 0x1000, 8192, 0xaa), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, 2, 0x1000, 8192, 0xbb), &mut out);
    c.tick(2 + WINDOW_NS, &mut out);
    let late = 3 + WINDOW_NS;
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, late, 0x1000, 8192, 0xbb), &mut out);
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 1, "{out:#?}");
    assert_eq!(regs(&out)[0].sources, ["fexit:ib_umem_get", "uprobe:ibv_reg_mr_iova2"]);
    // A second late return of the same nested call is not taken in: it is another call.
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 5, late + 1, 0x1000, 8192, 0xcc), &mut out);
    c.flush(&mut out);
    assert_eq!(regs(&out).len(), 2, "{out:#?}");
}

#[test]
fn failed_kernel_call_carries_errno() {
    let mut c = Correlator::new();
    let mut out = vec![];
    let mut k = rec(MrKind::Register, "kprobe:ib_umem_get", 5, 1, 0x1000, 4096, 0);
    k.failed = true;
    k.errno = Some(14);
    let mut u = rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 2, 0x1000, 4096, 0);
    u.failed = true;
    c.push(k, &mut out);
    c.push(u, &mut out);
    c.flush(&mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 1);
    assert!(r[0].failed && !r[0].kernel_pinned);
    assert_eq!(r[0].errno, Some(14));
}

fn evidence(hook: &str, tid: u32, ts: u64, ret: i64, data: u64, inside: bool) -> MrRecord {
    let mut e = rec(MrKind::GpuEvidence, &format!("kprobe:{hook}"), tid, ts, 0x7f00_0000_0000, 1 << 20, data);
    e.ret = ret;
    e.failed = ret < 0;
    e.aux = i64::from(inside);
    e
}

/// The records of one peer registration in the order nvidia-peermem (open-gpu-kernel-modules
/// 560+) and MLNX_OFED's ib_core return them: acquire's trial pin and unpin, acquire, the
/// client's pin, its get_pages, ib_peer_umem_get; then ib_umem_get_peer.
fn peer_registration(c: &mut Correlator, out: &mut Vec<Joined>, pages: &str, pin: &str, data: u64) {
    c.push(evidence("nvidia_p2p_get_pages", 5, 1, 0, 0xc0de, true), out);
    c.push(evidence("nvidia_p2p_put_pages", 5, 2, 0, 0, true), out);
    c.push(evidence("nv_mem_acquire", 5, 3, 1, 0, true), out);
    c.push(evidence(pin, 5, 4, 0, data, true), out);
    c.push(evidence(pages, 5, 5, 0, 0, true), out);
    c.push(evidence("ib_peer_umem_get", 5, 6, 0, 0, true), out);
    assert!(out.is_empty());
    let k = rec(MrKind::Register, "kprobe:ib_umem_get_peer", 5, 7, 0x7f00_0000_0000, 1 << 20, 0xaa);
    c.push(k, out);
    c.flush(out);
}

#[test]
fn legacy_nv_mem_registration_is_gpu_backed_and_its_free_callback_names_it() {
    let mut c = Correlator::new().with_peermem(Some(PeermemMode::Legacy));
    let mut out = vec![];
    peer_registration(&mut c, &mut out, "nv_mem_get_pages", "nvidia_p2p_get_pages", 0xdada);
    let r: Vec<Registration> = regs(&out).into_iter().cloned().collect();
    assert_eq!(r.len(), 1);
    assert!(r[0].peer.entered && r[0].peer.claimed && r[0].peer.gpu_pages);
    assert_eq!(r[0].peer.client.as_deref(), Some("nv_mem"), "nv_mem_get_pages: the invalidatable client");
    assert_eq!(r[0].peer.trial_pins, 1);
    assert_eq!(r[0].peer.p2p_data, [0xdada], "the trial's data (0xc0de) is not the registration's");
    assert!(r[0].sources.iter().any(|s| s == "kprobe:nv_mem_acquire"), "{:?}", r[0].sources);
    assert_eq!(crate::mr::classify::classify(&r[0]), crate::mr::classify::Verdict::GpuPeermem);

    // The free callback with that data names the registration.
    let f = rec(MrKind::GpuFreed, "kprobe:nv_get_p2p_free_callback", 5, 10, 0, 0, 0xdada);
    c.push(f, &mut out);
    match out.last() {
        Some(Joined::GpuFreed(g)) => assert_eq!(g.registration, Some(r[0].id)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_persistent_client_is_named_by_the_mode() {
    for (mode, want) in [
        (Some(PeermemMode::Persistent), Some("nv_mem")),
        (Some(PeermemMode::Legacy), Some("nv_mem_nc")),
        (None, None),
    ] {
        let mut c = Correlator::new().with_peermem(mode);
        let mut out = vec![];
        peer_registration(&mut c, &mut out, "nv_mem_get_pages_nc", "nvidia_p2p_get_pages_persistent", 0);
        let r = regs(&out);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].peer.client.as_deref(), want, "{mode:?}");
        assert!(r[0].peer.claimed && r[0].peer.gpu_pages, "{mode:?}");
        assert_eq!(r[0].peer.trial_pins, 1);
        assert!(r[0].peer.p2p_data.is_empty(), "persistent pins have no free callback");
        assert_eq!(crate::mr::classify::classify(r[0]), crate::mr::classify::Verdict::GpuPeermem, "{mode:?}");
    }
}

#[test]
fn the_trial_pin_alone_is_not_gpu_pages() {
    // acquire said "mine", its trial pin was given back, then the real pin failed (and so did
    // the registration's own pin through get_pages): no GPU pages held.
    let mut c = Correlator::new().with_peermem(Some(PeermemMode::Persistent));
    let mut out = vec![];
    c.push(evidence("nvidia_p2p_get_pages", 5, 1, 0, 0xc0de, true), &mut out);
    c.push(evidence("nvidia_p2p_put_pages", 5, 2, 0, 0, true), &mut out);
    c.push(evidence("nv_mem_acquire", 5, 3, 1, 0, true), &mut out);
    c.push(evidence("ib_peer_umem_get", 5, 4, 0, 0, true), &mut out);
    let k = rec(MrKind::Register, "kprobe:ib_umem_get_peer", 5, 5, 0x7f00_0000_0000, 1 << 20, 0xaa);
    c.push(k, &mut out);
    c.flush(&mut out);
    let r = regs(&out);
    assert!(r[0].peer.claimed);
    assert!(!r[0].peer.gpu_pages, "{:?}", r[0].peer);
    assert_eq!((r[0].peer.trial_pins, r[0].peer.client.as_deref()), (1, None));
    assert_ne!(crate::mr::classify::classify(r[0]), crate::mr::classify::Verdict::GpuPeermem);
}

#[test]
fn p2p_pins_outside_a_registration_are_gds_or_other() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(evidence("nvidia_p2p_get_pages_persistent", 9, 1, 0, 0, false), &mut out);
    c.push(evidence("nvidia_p2p_put_pages_persistent", 9, 2, 0, 0, false), &mut out);
    assert_eq!(out.len(), 1, "puts are not pins: {out:?}");
    assert!(matches!(&out[0], Joined::GpuPin(p) if p.ret == 0 && p.length == 1 << 20));
}

#[test]
fn nested_dmabuf_getters_are_one_registration_with_exporter_and_gpu_va() {
    let mut c = Correlator::new();
    let mut out = vec![];
    let mut export =
        rec(MrKind::GpuExport, "uprobe:cuMemGetHandleForAddressRange", 5, 1, 0x7000_0000, 1 << 21, 0);
    export.aux = 7;
    export.from_kernel = false;
    c.push(export, &mut out);
    for hook in ["ib_umem_dmabuf_get", "ib_umem_dmabuf_get_pinned"] {
        let mut k = rec(MrKind::Register, &format!("fexit:{hook}"), 5, 2, 0, 1 << 21, 0xbeef);
        k.aux = 7;
        k.label = Some("nv_dmabuf".into());
        c.push(k, &mut out);
    }
    c.flush(&mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 1, "same umem: one registration");
    assert_eq!(
        (r[0].dmabuf_fd, r[0].exporter.as_deref(), r[0].gpu_va),
        (Some(7), Some("nv_dmabuf"), Some(0x7000_0000))
    );
    assert_eq!(crate::mr::classify::classify(r[0]), crate::mr::classify::Verdict::GpuDmabuf);
}

#[test]
fn items_close_on_event_time_not_on_when_records_are_read() {
    let mut c = Correlator::new();
    let mut out = vec![];
    // Thread 5's kernel record, then its userspace record read late (a slow reader): no tick
    // came in between that could close it, so the two still join.
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1_000, 0x1000, 4096, 0xa1), &mut out);
    c.push(
        rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 1_000 + WINDOW_NS - 1, 0x1000, 4096, 0xb1),
        &mut out,
    );
    assert!(out.is_empty(), "{out:?}");
    // Another thread's record stamped a window later closes thread 5's item: event time passed.
    c.push(
        rec(MrKind::Register, "fexit:ib_umem_get", 6, 1_000 + 2 * WINDOW_NS, 0x2000, 4096, 0xa2),
        &mut out,
    );
    let r = regs(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert_eq!((r[0].ctx.tid, r[0].umem, r[0].mr), (5, Some(0xa1), Some(0xb1)));
    // An earlier-stamped record read late (another CPU's reservation) neither moves the clock
    // back nor is closed before its own thread's next record can join it.
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 7, 1_500, 0x3000, 4096, 0xa3), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr", 7, 1_600, 0x3000, 4096, 0xb3), &mut out);
    assert_eq!(regs(&out).len(), 1, "{out:?}");
    c.flush(&mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 3);
    assert!(r.iter().any(|r| r.ctx.tid == 7 && r.mr == Some(0xb3) && r.umem == Some(0xa3)), "{r:?}");
}

#[test]
fn a_tick_inside_the_window_closes_nothing() {
    let mut c = Correlator::new();
    let mut out = vec![];
    c.push(rec(MrKind::Register, "fexit:ib_umem_get", 5, 1_000, 0x1000, 4096, 0xa1), &mut out);
    c.tick(1_000 + WINDOW_NS - 1, &mut out);
    assert!(out.is_empty());
    c.push(
        rec(MrKind::Register, "uprobe:ibv_reg_mr", 5, 1_000 + WINDOW_NS - 1, 0x1000, 4096, 0xb1),
        &mut out,
    );
    c.tick(2_000 + 2 * WINDOW_NS, &mut out);
    let r = regs(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].sources, ["fexit:ib_umem_get", "uprobe:ibv_reg_mr"]);
}
