//! State for exited processes is dropped: thousands of short-lived processes leave a bounded
//! residue in the pipeline and the metrics sink, and their totals stay counted.

use std::sync::Arc;

use super::*;
use crate::{
    audit::{identity::Resolver, Posture},
    events::{
        storage::{Counters, FileClosed, FileOpened, Identity, StorageEvent},
        Context, MrKind, MrRecord,
    },
    sink::metrics::{MetricsSink, Shared},
};

fn sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn per_pid_state_of_exited_processes_is_dropped_and_their_totals_stay() {
    const N: u32 = 5_000;
    let dir = std::env::temp_dir().join(format!("gdr-prune-pipe-{}", std::process::id()));
    let shared = Arc::new(Shared::default());
    let resolver = Resolver::with_roots(&dir.join("proc"), &dir.join("cgroup"), &dir.join("passwd"));
    let mut m = MetricsSink::new(shared.clone(), 5, Posture::default(), vec![], resolver);
    let mut p = Pipeline::new().with_gpu_use(Box::new(|_| Some(false)));
    let feed = |p: &mut Pipeline, m: &mut MetricsSink, ev: Event| {
        m.raw(&ev);
        p.push(ev, m);
    };
    let id = Identity { dev: 8, ino: 77, f_flags: 0, mode: 0o100644 };
    let mut now = 1_000_000_000u64;
    for i in 0..N {
        let pid = 100_000 + i;
        let ctx = Context { pid, tid: pid, comm: format!("job{}", i % 7), uid: 0, cgroup_id: 0, ts_ns: now };
        // One in ten registers memory; every one reads a file.
        if i % 10 == 0 {
            let reg =
                MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx.clone(), 0x1000, 4096, pid as u64);
            feed(&mut p, &mut m, Event::Mr(reg));
        }
        let open =
            FileOpened { ctx: ctx.clone(), fd: 3, dirfd: -100, path: "/data/x".into(), open_flags: 0, id };
        feed(&mut p, &mut m, Event::Storage(StorageEvent::Opened(open)));
        let counters = Counters { reads: 1, bytes_read: 4096, ..Default::default() };
        let close = FileClosed { ctx: ctx.clone(), fd: 3, id, counters };
        feed(&mut p, &mut m, Event::Storage(StorageEvent::Closed(close)));
        feed(&mut p, &mut m, Event::Exit(Context { ts_ns: now + 1, ..ctx }));
        now += 1_000_000;
        p.tick(now, &mut m);
        if i % 500 == 499 {
            p.summary_tick(crate::counters::Counters::default(), &Lost::default(), false, &mut m);
        }
    }
    // Past the linger: a tick, the summary tick that reports the last ones final, a tick.
    now += 2 * EXIT_LINGER_NS;
    p.tick(now, &mut m);
    p.summary_tick(crate::counters::Counters::default(), &Lost::default(), false, &mut m);
    p.tick(now + 1, &mut m);
    let [procs, exited, storage, storage_kept, exits, gpu_use] = p.held();
    let kept = crate::archive::MAX_ARCHIVED;
    assert_eq!((procs, exited), (kept, kept), "bounded final summaries, no running process");
    assert_eq!((storage, exits), (0, 0), "nothing held per exited pid");
    assert!(gpu_use <= 2 * kept, "GPU use only of the processes kept: {gpu_use}");
    assert_eq!(storage_kept, crate::archive::MAX_ARCHIVED, "bounded final storage reports");
    // The metrics sink forgot every pid; the auditor keeps the facts of the newest exited
    // processes whose registrations are a finding's evidence (a node's findings name them).
    let kept = crate::audit::MAX_EXITED;
    assert!(kept < (N / 10) as usize, "the bound is reached");
    assert_eq!(m.held(), (0, 0, kept), "the metrics sink forgot every pid");
    // What they did stays counted: every registration, every byte read, every process.
    p.summary_tick(crate::counters::Counters::default(), &Lost::default(), false, &mut m);
    let body = shared.body.lock().unwrap().clone();
    assert_eq!(sum(&body, "gdr_trace_registrations_total"), f64::from(N / 10), "{body}");
    assert_eq!(sum(&body, "gdr_trace_storage_bytes_total"), f64::from(N) * 4096.0, "{body}");
    assert_eq!(sum(&body, "gdr_trace_storage_calls_total"), f64::from(N), "{body}");
    assert_eq!(sum(&body, "gdr_trace_processes"), f64::from(N / 10), "{body}");
}

#[test]
fn a_process_is_kept_until_its_late_records_are_in() {
    let mut p = Pipeline::new();
    let mut sink = crate::sink::FanOut(vec![]);
    let ctx = Context { pid: 42, tid: 42, comm: "w".into(), uid: 0, cgroup_id: 0, ts_ns: 10 };
    let reg = MrRecord::at(MrKind::Register, "uprobe:ibv_reg_mr", ctx.clone(), 0x1000, 4096, 1);
    p.push(Event::Mr(reg), &mut sink);
    p.push(Event::Exit(Context { ts_ns: 20, ..ctx }), &mut sink);
    p.tick(20 + EXIT_LINGER_NS / 2, &mut sink);
    assert_eq!(p.held()[..2], [1, 0], "within the linger the process stays running");
    assert_eq!(p.aggregator().summaries().count(), 1);
    p.tick(20 + EXIT_LINGER_NS, &mut sink);
    assert_eq!(p.held()[..2], [1, 1], "then its summary is final");
    assert_eq!(p.aggregator().summaries().map(|s| s.pid).collect::<Vec<_>>(), [42]);
}

#[test]
fn a_final_summary_keeps_what_was_learnt_of_gpu_use() {
    let mut p = Pipeline::new().with_gpu_use(Box::new(|_| Some(true)));
    let mut sink = crate::sink::FanOut(vec![]);
    let ctx = Context { pid: 151, tid: 151, comm: "w".into(), uid: 0, cgroup_id: 0, ts_ns: 10 };
    let reg = MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx.clone(), 0x1000, 4096, 1);
    p.push(Event::Mr(reg), &mut sink);
    p.tick(100_000_000, &mut sink);
    p.summary_tick(crate::counters::Counters::default(), &Lost::default(), false, &mut sink);
    assert_eq!(p.aggregator().summaries().next().unwrap().uses_gpu, Some(true));
    p.push(Event::Exit(Context { ts_ns: 200_000_000, ..ctx }), &mut sink);
    for t in 3..30 {
        p.tick(t * 100_000_000, &mut sink);
    }
    p.summary_tick(crate::counters::Counters::default(), &Lost::default(), true, &mut sink);
    assert_eq!(p.held()[..2], [1, 1]);
    assert_eq!(p.aggregator().summaries().next().unwrap().uses_gpu, Some(true));
}

#[test]
fn a_process_that_pins_gpu_pages_uses_a_gpu_though_proc_cannot_say() {
    // A short GDS job is gone before /proc is read: its GPU pin is the proof ("GPU? ?" before).
    let mut p = Pipeline::new().with_gpu_use(Box::new(|_| None));
    let mut sink = crate::sink::FanOut(vec![]);
    let ctx = Context { pid: 152, tid: 152, comm: "gds".into(), uid: 0, cgroup_id: 0, ts_ns: 10 };
    let mut pin =
        MrRecord::at(MrKind::GpuEvidence, "kretprobe:nvidia_p2p_get_pages", ctx, 0x7000_0000, 1 << 16, 0);
    pin.aux = 0;
    p.push(Event::Mr(pin), &mut sink);
    p.tick(100_000_000, &mut sink);
    p.summary_tick(crate::counters::Counters::default(), &Lost::default(), true, &mut sink);
    let s = p.aggregator().summaries().find(|s| s.pid == 152).expect("the pinning process");
    assert_eq!(s.uses_gpu, Some(true));
}

/// At its exit a process's page-fill entries are asked for once (the live layer takes them out
/// of the kernel map at once), and those it hands back in the next snapshot count as final.
#[test]
fn an_exited_process_fill_entries_are_asked_for_once() {
    use crate::storage::snapshot::SnapFill;
    let mut p = Pipeline::new();
    let mut sink = crate::sink::FanOut(vec![]);
    let ctx = Context { pid: 42, tid: 42, comm: "r".into(), uid: 0, cgroup_id: 0, ts_ns: 1 };
    for ino in [7u64, 8] {
        let id = Identity { dev: 8, ino, f_flags: 0, mode: 0o100644 };
        let open =
            FileOpened { ctx: ctx.clone(), fd: 3, dirfd: -100, path: format!("/d/{ino}"), open_flags: 0, id };
        p.push(Event::Storage(StorageEvent::Opened(open)), &mut sink);
        let counters = Counters { reads: 1, bytes_read: 4096, ..Default::default() };
        p.push(
            Event::Storage(StorageEvent::Closed(FileClosed { ctx: ctx.clone(), fd: 3, id, counters })),
            &mut sink,
        );
    }
    assert!(p.exited_fill_keys().is_empty(), "nothing asked of a running process");
    p.push(Event::Exit(Context { ts_ns: 2, ..ctx }), &mut sink);
    let mut keys = p.exited_fill_keys();
    keys.sort();
    assert_eq!(keys, vec![(42, 8, 7), (42, 8, 8)]);
    assert!(p.exited_fill_keys().is_empty(), "asked once");
    let fills =
        keys.iter().map(|k| SnapFill { pid: 42, dev: 8, ino: k.2, pages: 1, read_pages: 1, path: None });
    let snap =
        crate::storage::state::Snapshot { fills: fills.collect(), gone: vec![42], ..Default::default() };
    p.counters(crate::counters::Counters { storage: snap, ..Default::default() });
    let r = crate::storage::aggregate::report(p.storage_state());
    assert_eq!((r.procs[0].pages_filled, r.procs[0].exited), (2, true));
}

/// A real mlx5 node's queues: one CQ (ring and doorbell page in host memory), a QP ring pinned through the
/// OFED peer path, and one real MR. Only the MR is a registration; the queue pins come out as
/// queue memory, with their releases, and count in no MR summary.
#[test]
fn queue_pins_beside_one_real_mr_are_never_registrations() {
    use crate::events::purpose::{Purpose, Verb};
    let mut out = Vec::new();
    {
        let mut sink = crate::sink::json::JsonSink::new(&mut out);
        let mut p = Pipeline::new().with_io_mapping_visible(true);
        let ctx = |ts| Context { pid: 9, tid: 9, comm: "nccl".into(), uid: 0, cgroup_id: 0, ts_ns: ts };
        let in_verb = |v, doorbell| Purpose { verb: Some(v), doorbell };
        let pins = [
            (in_verb(Verb::CreateCq, false), "kprobe:ib_umem_get", 0x10_000u64, 65536u64, 1u64),
            (in_verb(Verb::CreateCq, true), "kprobe:ib_umem_get", 0x20_000, 4096, 2),
            (in_verb(Verb::CreateQp, false), "kprobe:ib_umem_get_peer", 0x30_000, 131072, 3),
        ];
        let mut ts = 10;
        for (purpose, src, addr, len, umem) in pins {
            let r = MrRecord::at(MrKind::Register, src, ctx(ts), addr, len, umem).with_purpose(purpose);
            p.push(Event::Mr(r), &mut sink);
            ts += WINDOW;
        }
        // The real MR: the kernel's pin in reg_mr and libibverbs' call.
        let k = MrRecord::at(MrKind::Register, "kprobe:ib_umem_get", ctx(ts), 0x40_000, 4096, 4);
        p.push(Event::Mr(k), &mut sink);
        let u = MrRecord::at(MrKind::Register, "uprobe:ibv_reg_mr", ctx(ts + 1), 0x40_000, 4096, 0xabc);
        p.push(Event::Mr(u), &mut sink);
        ts += WINDOW;
        // The CQ destroyed: its ring's release.
        let rel = MrRecord::at(MrKind::Release, "kprobe:ib_umem_release", ctx(ts), 0, 65536, 1)
            .with_purpose(in_verb(Verb::CreateCq, false));
        p.push(Event::Mr(rel), &mut sink);
        p.tick(ts + WINDOW, &mut sink);
        p.finish(&mut sink);
        p.summary_tick(crate::counters::Counters::default(), &Lost::default(), true, &mut sink);
        assert_eq!(p.aggregator().summaries().map(|s| s.registrations).sum::<u64>(), 1);
    }
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |e: &str| lines.iter().filter(|v| v["event"] == e).collect::<Vec<_>>();
    let regs = of("mr_register");
    assert_eq!(regs.len(), 1, "{lines:#?}");
    assert_eq!((&regs[0]["addr"], &regs[0]["verdict"]), (&0x40_000.into(), &"host".into()));
    let kinds: Vec<&serde_json::Value> = of("queue_pin").iter().map(|v| &v["kind"]).collect();
    assert_eq!(kinds, ["cq", "doorbell", "qp"], "{lines:#?}");
    assert!(of("mr_release").is_empty(), "{lines:#?}");
    let rel = of("queue_release");
    assert_eq!(
        (&rel[0]["kind"], &rel[0]["length"], &rel[0]["owner"]),
        (&"cq".into(), &65536.into(), &9.into())
    );
    let sum = of("summary");
    assert_eq!(
        (&sum[0]["registrations"], &sum[0]["bytes_registered"]),
        (&1.into(), &4096.into()),
        "{sum:#?}"
    );
    let q = of("queue_summary");
    assert_eq!(q.len(), 1, "{lines:#?}");
    assert_eq!(q[0]["gin"]["mode"], "host-queues", "{:#}", q[0]);
}

const WINDOW: u64 = crate::mr::correlate::WINDOW_NS + 1;
