use super::*;
use crate::events::Context;

fn reg(id: u64, pid: u32, len: u64, failed: bool) -> Registration {
    Registration {
        id,
        ctx: Context { pid, tid: pid, comm: format!("p{pid}"), ts_ns: id, ..Default::default() },
        addr: 0x1000 * id,
        length: len,
        access: 1,
        failed,
        kernel_pinned: !failed,
        ..Default::default()
    }
}

fn release(id: u64) -> Release {
    Release { ctx: reg(id, 1, 0, false).ctx, registration: Some(id), ..Default::default() }
}

#[test]
fn process_verdicts() {
    assert_eq!(process_verdict(0, 0, true), ProcessVerdict::NoRdma);
    assert_eq!(process_verdict(0, 4096, true), ProcessVerdict::HostStaged);
    assert_eq!(process_verdict(0, 4096, false), ProcessVerdict::Host);
    assert_eq!(process_verdict(1 << 30, 1 << 16, true), ProcessVerdict::Gdr, "NCCL's small host MRs");
    assert_eq!(process_verdict(1 << 20, 1 << 20, true), ProcessVerdict::Mixed);

    let mut a = Aggregator::new();
    a.registered(&reg(1, 7, 4096, false), Verdict::Host);
    assert_eq!(a.summaries().next().unwrap().process_verdict, ProcessVerdict::Host);
    a.set_uses_gpu(7, true);
    assert_eq!(a.summaries().next().unwrap().process_verdict, ProcessVerdict::HostStaged);
    a.registered(&reg(2, 7, 1 << 30, false), Verdict::GpuPeermem);
    assert_eq!(a.summaries().next().unwrap().process_verdict, ProcessVerdict::Gdr);
    a.registered(&reg(3, 7, 64, false), Verdict::Probe);
    let p = a.summaries().next().unwrap();
    assert_eq!(
        (p.failed, p.registrations, p.bytes_registered),
        (0, 3, 4096 + (1 << 30)),
        "a probe is no failure"
    );
}

#[test]
fn a_process_that_registered_memory_is_never_no_rdma() {
    for (v, want) in [
        (Verdict::Unknown, ProcessVerdict::Unknown),
        (Verdict::DmabufOther, ProcessVerdict::Other),
        (Verdict::Odp, ProcessVerdict::Other),
        (Verdict::Probe, ProcessVerdict::NoRdma),
    ] {
        let mut a = Aggregator::new();
        a.registered(&reg(1, 7, 1 << 20, false), v);
        a.set_uses_gpu(7, true);
        assert_eq!(a.summaries().next().unwrap().process_verdict, want, "{v:?}");
    }
    let mut a = Aggregator::new();
    a.registered(&reg(1, 7, 1 << 20, true), Verdict::Failed);
    assert_eq!(a.summaries().next().unwrap().process_verdict, ProcessVerdict::NoRdma, "failed only");
}

#[test]
fn a_cuda_pinned_host_mr_is_evidence_of_host_staging() {
    let mut a = Aggregator::new();
    let mut r = reg(1, 9, 4 << 20, false);
    r.host_alloc = Some(crate::p2p::HostAlloc::CuMemHostAlloc);
    r.host_origin = Some(crate::p2p::HostMrOrigin::of(r.host_alloc, false));
    a.registered(&r, Verdict::Host);
    let mut plain = reg(2, 9, 4096, false);
    plain.host_origin = Some(crate::p2p::HostMrOrigin::OTHER);
    a.registered(&plain, Verdict::Host);
    let p = a.summaries().next().unwrap();
    assert_eq!(p.uses_gpu, None, "/proc said nothing");
    assert_eq!(p.process_verdict, ProcessVerdict::HostStaged);
    assert_eq!(p.staging_mrs.len(), 1);
    assert_eq!((p.staging_mrs[0].id, p.staging_mrs[0].length), (1, 4 << 20));
    let v = serde_json::to_value(p).unwrap();
    assert_eq!(v["staging_mrs"][0]["host_alloc"], "cuMemHostAlloc");
    assert_eq!(
        (v["staging_mrs"][0]["origin"].as_str(), v["staging_mrs"][0]["evidence"].as_str()),
        (Some("cuda-pinned"), Some("call seen"))
    );
}

#[test]
fn pinned_memory_from_before_the_trace_is_staging_by_the_kernel_map() {
    let mut a = Aggregator::new();
    let mut r = reg(1, 9, 1 << 20, false);
    r.host_origin = Some(crate::p2p::HostMrOrigin::of(None, true));
    a.registered(&r, Verdict::Host);
    let p = a.summaries().next().unwrap();
    assert_eq!(p.process_verdict, ProcessVerdict::HostStaged, "no CUDA call seen, no /proc answer");
    let v = serde_json::to_value(p).unwrap();
    let m = &v["staging_mrs"][0];
    assert!(m.get("host_alloc").is_none(), "no call was seen: {m}");
    assert_eq!((m["origin"].as_str(), m["evidence"].as_str()), (Some("cuda-pinned"), Some("kernel map")));
}

#[test]
fn totals_and_live_bytes() {
    let mut a = Aggregator::new();
    a.registered(&reg(1, 100, 4096, false), Verdict::Host);
    a.registered(&reg(2, 100, 1 << 20, false), Verdict::Host);
    a.registered(&reg(3, 100, 64, true), Verdict::Failed);
    a.registered(&reg(4, 200, 8192, false), Verdict::Host);
    let p: Vec<_> = a.summaries().cloned().collect();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].registrations, 3);
    assert_eq!(p[0].failed, 1);
    assert_eq!(p[0].bytes_registered, 4096 + (1 << 20));
    assert_eq!(p[0].live_bytes, 4096 + (1 << 20));
    assert_eq!(p[0].by_verdict[&Verdict::Failed].count, 1);
    assert_eq!(p[0].by_verdict[&Verdict::Failed].bytes, 0);

    assert_eq!(a.released(&release(2)), Some((100, Verdict::Host)));
    assert_eq!(a.released(&release(2)), None, "a registration is released once");
    let p: Vec<_> = a.summaries().cloned().collect();
    assert_eq!(p[0].live_bytes, 4096);
    assert_eq!(p[0].by_verdict[&Verdict::Host].live_bytes, 4096);
    assert_eq!(p[0].releases, 1);
    assert_eq!(p[1].live_bytes, 8192);
}

#[test]
fn staged_bytes_are_the_copies_through_pinned_memory_per_process_and_per_staging_mr() {
    use crate::p2p::{staged::StagedDir, HostMrOrigin, StagedBytes, StagedCopies};
    let mut a = Aggregator::new();
    let mut r = reg(1, 9, 1 << 20, false);
    r.addr = 0x10_0000;
    r.host_origin = Some(HostMrOrigin::of(None, true));
    a.registered(&r, Verdict::Host);
    let c = |dir, host, bytes| StagedCopies { pid: 9, dir, host, calls: 1, bytes };
    let in_mr = c(StagedDir::Dtoh, 0x10_0000, 3 << 20);
    let back = c(StagedDir::Htod, 0x10_8000, 1 << 19);
    // Pinned memory the process has (a call or the kernel's map told), but no MR of it.
    let pinned_elsewhere = c(StagedDir::Dtoh, 0x90_0000, 4096);
    // Pageable memory: the driver copies it through its own buffers, not a staging buffer here.
    let pageable = c(StagedDir::Dtoh, 0xa0_0000, 777);
    let all = [in_mr, back, pinned_elsewhere, pageable];
    a.staged(9, &[pinned_elsewhere], &all);
    a.staged(10, &all, &all);
    let p = a.summaries().next().unwrap();
    assert_eq!(p.staged_bytes, StagedBytes { dtoh: (3 << 20) + 4096, htod: 1 << 19 });
    let m = &p.staging_mrs[0];
    assert_eq!((m.staged_bytes_dtoh, m.staged_bytes_htod), (3 << 20, 1 << 19));
    assert_eq!(a.summaries().count(), 1, "a process with no registration gets no summary from copies");
    let v = serde_json::to_value(p).unwrap();
    assert_eq!(v["staged_bytes"], serde_json::json!({"dtoh": (3u64 << 20) + 4096, "htod": 1u64 << 19}));
    assert_eq!(v["staging_mrs"][0]["staged_bytes_dtoh"], 3u64 << 20);
}

#[test]
fn a_host_mrs_origin_is_kept_for_its_release_record_and_goes_with_it() {
    let mut a = Aggregator::new();
    let mut r = reg(1, 9, 4096, false);
    r.host_origin = Some(crate::p2p::HostMrOrigin::of(None, true));
    a.registered(&r, Verdict::Host);
    a.registered(&reg(2, 9, 4096, false), Verdict::GpuPeermem);
    assert_eq!(a.origin_of(Some(1)), r.host_origin);
    assert_eq!(a.origin_of(Some(2)), None, "not a host MR");
    assert_eq!(a.origin_of(None), None);
    assert!(a.released(&release(1)).is_some());
    assert_eq!(a.origin_of(Some(1)), None, "released");
}

#[test]
fn bytes_moved_by_processes_dropped_past_the_archive_stay_in_the_node_total() {
    let mut agg = Aggregator::new();
    let n = MAX_ARCHIVED as u32 + 3;
    for pid in 1..=n {
        agg.registered(&reg(u64::from(pid), pid, 4096, false), Verdict::Host);
        let moved = crate::mr::bytes::Moved { out: 10, inn: 1, ops: 2 };
        agg.process(pid, "w").bytes_by_verdict.insert("host".into(), moved);
        agg.exited(pid);
    }
    assert_eq!(agg.held().1, MAX_ARCHIVED, "some summaries were dropped");
    let total = agg.bytes_total()["host"];
    assert_eq!((total.out, total.inn, total.ops), (10 * u64::from(n), u64::from(n), 2 * u64::from(n)));
}

/// With a kernel registration hook in place, a registration only libibverbs' uprobe saw is a
/// claim (a fake provider's 1 TiB): counted apart, in no total, byte count or verdict, and its
/// release takes it from the live claims; one the kernel saw too counts as ever.
#[test]
fn a_registration_no_kernel_hook_saw_is_a_claim_kept_apart() {
    use crate::events::Source;
    let claim = |id, len| Registration {
        sources: vec![Source::parse("uprobe:ibv_reg_mr")],
        ..reg(id, 7, len, false)
    };
    let seen = Registration {
        sources: vec![Source::parse("fexit:ib_umem_get"), Source::parse("uprobe:ibv_reg_mr")],
        ..reg(3, 7, 4096, false)
    };
    let mut a = Aggregator::new().with_claims_apart(true);
    a.registered(&claim(1, 1 << 40), Verdict::GpuPeermem);
    a.registered(&claim(2, 1 << 20), Verdict::Host);
    a.registered(&seen, Verdict::Host);
    let p = a.summaries().next().unwrap();
    assert_eq!((p.registrations, p.bytes_registered, p.live_bytes), (1, 4096, 4096), "{p:#?}");
    assert!(!p.by_verdict.contains_key(&Verdict::GpuPeermem), "{p:#?}");
    assert_eq!(p.process_verdict, ProcessVerdict::Host);
    assert_eq!(
        p.unverified,
        VerdictTotals { count: 2, bytes: (1 << 40) + (1 << 20), live_bytes: (1 << 40) + (1 << 20) }
    );
    assert_eq!(a.released(&release(1)), None, "a claim's release names no verdict");
    let p = a.summaries().next().unwrap();
    assert_eq!((p.unverified.live_bytes, p.releases, p.live_bytes), (1 << 20, 0, 4096));
    // A failed call and on-demand paging are never seen by a kernel hook: counted as ever.
    a.registered(&claim(4, 64), Verdict::Failed);
    a.registered(&claim(5, 1 << 20), Verdict::Odp);
    let p = a.summaries().next().unwrap();
    assert_eq!((p.failed, p.unverified.count, p.by_verdict[&Verdict::Odp].bytes), (1, 2, 1 << 20));

    // Where no kernel hook could see any (a blind kernel), every registration counts as ever.
    let mut a = Aggregator::new();
    a.registered(&claim(1, 1 << 20), Verdict::Unknown);
    let p = a.summaries().next().unwrap();
    assert_eq!((p.bytes_registered, p.unverified.count), (1 << 20, 0));
}
