//! GPU registrations made through libibverbs, as recorded in the VM on the simulated NIC
//! (tests/vm_gpu/verbs.rs): the kernel's records of the call, then libibverbs' return, on one
//! thread. Each must be one registration, and its release one release.

use super::*;
use crate::{events::Context, mr::classify::classify, mr::classify::Verdict};

const GPU_VA: u64 = 0x7f00_0020_0000;

fn rec(kind: MrKind, source: &str, ts: u64, addr: u64, len: u64, handle: u64) -> MrRecord {
    let ctx = Context { pid: 10, tid: 5, comm: "w".into(), uid: 0, cgroup_id: 1, ts_ns: ts };
    MrRecord {
        access: 7,
        device: Some("efa_sim0".into()),
        ..MrRecord::at(kind, source, ctx, addr, len, handle)
    }
}

fn evidence(hook: &str, ts: u64, ret: i64) -> MrRecord {
    let mut e = rec(MrKind::GpuEvidence, &format!("kprobe:{hook}"), ts, GPU_VA, 1 << 21, 0);
    e.ret = ret;
    e.aux = 1;
    e
}

fn releases(out: &[Joined]) -> Vec<&Release> {
    out.iter().filter_map(|j| if let Joined::Released(r) = j { Some(r) } else { None }).collect()
}

fn registrations(out: &[Joined]) -> Vec<&Registration> {
    out.iter().filter_map(|j| if let Joined::Registered(r) = j { Some(r) } else { None }).collect()
}

/// ibv_dereg_mr: the kernel's ib_umem_release (inside dereg_mr), then libibverbs' return.
fn dereg(c: &mut Correlator, out: &mut Vec<Joined>, ts: u64, addr: u64, len: u64, umem: u64) {
    c.push(rec(MrKind::Release, "fentry:ib_umem_release", ts, 0, len, umem), out);
    c.push(rec(MrKind::Release, "uprobe:ibv_dereg_mr", ts + 1, addr, len, 0xbb), out);
    c.flush(out);
}

#[test]
fn ibv_reg_mr_on_gpu_memory_is_one_peer_registration_and_one_release() {
    let mut c = Correlator::new().with_peermem(Some(PeermemMode::Persistent));
    let mut out = vec![];
    // ib_uverbs -> reg_user_mr -> ib_umem_get_peer: nv_mem_acquire's trial pin, the claim,
    // the persistent pin, get_pages, ib_peer_umem_get; ib_umem_get_peer; libibverbs returns.
    for (i, (hook, ret)) in [
        ("nvidia_p2p_get_pages", 0),
        ("nvidia_p2p_put_pages", 0),
        ("nv_mem_acquire", 1),
        ("nvidia_p2p_get_pages_persistent", 0),
        ("nv_mem_get_pages_nc", 0),
        ("ib_peer_umem_get", 0),
    ]
    .into_iter()
    .enumerate()
    {
        c.push(evidence(hook, 1 + i as u64, ret), &mut out);
    }
    c.push(rec(MrKind::Register, "kprobe:ib_umem_get_peer", 10, GPU_VA, 1 << 21, 0xaa), &mut out);
    c.push(rec(MrKind::Register, "uprobe:ibv_reg_mr_iova2", 11, GPU_VA, 1 << 21, 0xbb), &mut out);
    c.flush(&mut out);
    let r = registrations(&out);
    assert_eq!(r.len(), 1, "{out:#?}");
    let r = r[0].clone();
    assert_eq!((r.umem, r.mr, r.iova), (Some(0xaa), Some(0xbb), GPU_VA));
    // The kernel's record opens it and brings the evidence; libibverbs' return joins last.
    assert_eq!(r.sources.len(), 8, "{:?}", r.sources);
    assert_eq!(r.sources.first().map(|s| s.to_string()).as_deref(), Some("kprobe:ib_umem_get_peer"));
    assert_eq!(r.sources.last().map(|s| s.to_string()).as_deref(), Some("uprobe:ibv_reg_mr_iova2"));
    assert!(r.sources.iter().any(|x| x == "kprobe:nv_mem_get_pages_nc"), "{:?}", r.sources);
    assert_eq!(r.peer.client.as_deref(), Some("nv_mem"));
    assert_eq!(classify(&r), Verdict::GpuPeermem);

    // dereg_mr: ib_peer_umem_release gives the pages back (evidence of no registration), then
    // the real ib_umem_release and libibverbs' return.
    out.clear();
    c.push(evidence("nvidia_p2p_put_pages_persistent", 20, 0), &mut out);
    dereg(&mut c, &mut out, 21, GPU_VA, 1 << 21, 0xaa);
    let rel = releases(&out);
    assert_eq!(rel.len(), 1, "{out:#?}");
    assert_eq!((rel[0].registration, rel[0].addr, rel[0].length), (Some(r.id), GPU_VA, 1 << 21));
    assert_eq!(rel[0].sources, ["fentry:ib_umem_release", "uprobe:ibv_dereg_mr"]);
    assert!(registrations(&out).is_empty() && c.by_umem.is_empty() && c.by_mr.is_empty());
}

#[test]
fn ibv_reg_dmabuf_mr_is_one_dmabuf_registration_and_one_release() {
    // 6.1 runs ib_umem_dmabuf_get inside ib_umem_dmabuf_get_pinned; on 6.12 it is inlined.
    for inner in [true, false] {
        let mut c = Correlator::new();
        let mut out = vec![];
        let (fd, offset, len) = (7, 0x1_0000, (1 << 21) - 0x1_0000);
        let mut export =
            rec(MrKind::GpuExport, "uprobe:cuMemGetHandleForAddressRange", 1, GPU_VA, 1 << 21, 0);
        export.aux = fd;
        c.push(export, &mut out);
        let getters: &[&str] = if inner {
            &["ib_umem_dmabuf_get", "ib_umem_dmabuf_get_pinned"]
        } else {
            &["ib_umem_dmabuf_get_pinned"]
        };
        for (i, hook) in getters.iter().enumerate() {
            let mut k = rec(MrKind::Register, &format!("fexit:{hook}"), 2 + i as u64, offset, len, 0xbeef);
            k.aux = fd;
            k.label = Some("nv_dmabuf".into());
            c.push(k, &mut out);
        }
        // ibv_reg_dmabuf_mr(pd, offset, len, iova = GPU VA + offset, fd, access) returns.
        let mut u = rec(MrKind::Register, "uprobe:ibv_reg_dmabuf_mr", 5, offset, len, 0xbb);
        u.aux = fd;
        u.iova = GPU_VA + offset;
        c.push(u, &mut out);
        c.flush(&mut out);
        let r = registrations(&out);
        assert_eq!(r.len(), 1, "inner {inner}: {out:#?}");
        let r = r[0].clone();
        assert_eq!(r.sources.len(), getters.len() + 1, "{:?}", r.sources);
        assert_eq!(r.sources.last().map(|s| s.to_string()).as_deref(), Some("uprobe:ibv_reg_dmabuf_mr"));
        assert_eq!((r.umem, r.mr, r.iova), (Some(0xbeef), Some(0xbb), GPU_VA + offset));
        assert_eq!(
            (r.dmabuf_fd, r.exporter.as_deref(), r.gpu_va),
            (Some(fd), Some("nv_dmabuf"), Some(GPU_VA))
        );
        assert_eq!(classify(&r), Verdict::GpuDmabuf);

        out.clear();
        dereg(&mut c, &mut out, 20, offset, len, 0xbeef);
        let rel = releases(&out);
        assert_eq!(rel.len(), 1, "{out:#?}");
        assert_eq!((rel[0].registration, rel[0].addr, rel[0].length), (Some(r.id), offset, len));
        assert_eq!(rel[0].sources, ["fentry:ib_umem_release", "uprobe:ibv_dereg_mr"]);
    }
}
