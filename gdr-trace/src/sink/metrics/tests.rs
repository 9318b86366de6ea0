use super::*;
use crate::{correlate::Registration, events::Context};

/// A metrics sink keeping the `top` largest identities, with no identity source on disk.
fn sink(shared: &Arc<Shared>, top: usize) -> MetricsSink {
    MetricsSink::new(shared.clone(), top, Posture::default(), vec![], Resolver::new("/nonexistent".as_ref()))
}

fn t(count: u64, bytes: u64) -> Totals {
    Totals { count, bytes }
}

fn value(own: &[(u32, String, Totals)], key: u32) -> Option<Totals> {
    own.iter().find(|(k, _, _)| *k == key).map(|x| x.2)
}

#[test]
fn top_n_keeps_counters_monotonic_and_series_bounded() {
    let mut top: TopN<u32> = TopN::new(2, 4);
    for k in 1..=3 {
        top.add(&k, "host\trxe0", t(1, 100 * k as u64));
    }
    top.rerank();
    let (own, other) = top.series();
    assert_eq!(own.len(), 2, "{own:?}");
    assert_eq!((value(&own, 3), value(&own, 2), value(&own, 1)), (Some(t(1, 300)), Some(t(1, 200)), None));
    assert_eq!(other["host\trxe0"], t(1, 100), "key 1 is summed under other");
    // Key 1 overtakes key 2: it starts its own series at 0, key 2's goes to other.
    top.add(&1, "host\trxe0", t(1, 1000));
    top.rerank();
    let (own, other2) = top.series();
    assert_eq!(value(&own, 1), Some(t(1, 1000)), "what it did under other stays there");
    assert_eq!(value(&own, 2), None);
    assert_eq!(other2["host\trxe0"], t(2, 300), "other never goes down: {other:?} -> {other2:?}");
    // Many more keys: at most max_keys are remembered, the rest fold into other for good.
    for k in 10..50 {
        top.add(&k, "gpu-peermem\tmlx5_0", t(1, 1));
    }
    top.rerank();
    let (own, other3) = top.series();
    // The top two by bytes keep their series; forty one-byte newcomers do not displace them.
    assert_eq!(
        own,
        [(1, "host\trxe0".to_string(), t(1, 1000)), (3, "host\trxe0".to_string(), t(1, 300))],
        "{own:?}"
    );
    assert_eq!(top.remembered(), 4);
    let sum = |m: &BTreeMap<String, Totals>, s: &str| m.get(s).copied().unwrap_or_default();
    assert_eq!(sum(&other3, "gpu-peermem\tmlx5_0").count, 40);
    assert_eq!(sum(&other3, "host\trxe0"), t(2, 300), "other unchanged by newcomers of another label");
}

#[test]
fn render_is_openmetrics_with_bounded_labels() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 1);
    let mut agg = Aggregator::new();
    for (id, pid, comm, len, v) in
        [(1, 10, "trainer", 2 << 20, Verdict::GpuPeermem), (2, 20, "ib_write_bw", 4096, Verdict::Host)]
    {
        let reg = Registration {
            id,
            ctx: Context { pid, tid: pid, comm: comm.into(), ..Default::default() },
            length: len,
            access: 3,
            device: Some("mlx5_0".into()),
            ..Default::default()
        };
        agg.registered(&reg, v);
        m.emit(&Output::Registered { reg: &reg, verdict: v });
    }
    m.emit(&Output::Summary {
        agg: &agg,
        lost: &Lost { ringbuf_full: 3, ..Default::default() },
        last: false,
    });
    let body = shared.body.lock().unwrap().clone();
    for want in [
        "gdr_trace_registrations_total{comm=\"trainer\",container=\"\",pod=\"\",verdict=\"gpu-peermem\",device=\"mlx5_0\"} 1",
        "gdr_trace_registered_bytes_total{comm=\"trainer\",container=\"\",pod=\"\",verdict=\"gpu-peermem\",device=\"mlx5_0\"} 2097152",
        "gdr_trace_registrations_total{comm=\"other\",container=\"\",pod=\"\",verdict=\"host\",device=\"mlx5_0\"} 1",
        "gdr_trace_live_pinned_bytes{comm=\"trainer\",container=\"\",pod=\"\",verdict=\"gpu-peermem\"} 2097152",
        "gdr_trace_lost_events_total{reason=\"ringbuf_full\"} 3",
        "gdr_trace_findings{id=\"gpu-remote-write\",severity=\"medium\"} 1",
        "gdr_trace_other_processes 1",
        "# EOF",
    ] {
        assert!(body.contains(want), "missing {want} in\n{body}");
    }
    assert!(!body.contains("ib_write_bw"), "top 1: the small process is under other\n{body}");
    assert!(shared.health.lock().unwrap().last_update.is_some());
}

/// A process first seen doing file I/O as the shell that execs it: its series carry the comm of
/// its records (an exec keeps the pid and start time, and changes the comm).
#[test]
fn a_process_named_after_exec_not_by_the_shell_it_was() {
    use crate::events::{
        storage::{FileOpened, Identity, StorageEvent},
        Event,
    };
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    let ctx = |comm: &str| Context { pid: 4242, tid: 4242, comm: comm.into(), ..Default::default() };
    let open = FileOpened {
        ctx: ctx("sh"),
        fd: 3,
        dirfd: -100,
        path: "/etc/ld.so.cache".into(),
        open_flags: 0,
        id: Identity::default(),
    };
    m.raw(&Event::Storage(StorageEvent::Opened(open)));
    let reg = Registration {
        id: 1,
        ctx: ctx("gdrsim-workload"),
        length: 4096,
        device: Some("rxe0".into()),
        ..Default::default()
    };
    let rec = crate::events::MrRecord::at(
        crate::events::MrKind::Register,
        "fexit:ib_umem_get",
        ctx("gdrsim-workload"),
        0x1000,
        4096,
        1,
    );
    m.raw(&Event::Mr(rec));
    m.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
    m.emit(&Output::Summary { agg: &Aggregator::new(), lost: &Lost::default(), last: false });
    let body = shared.body.lock().unwrap().clone();
    assert!(body.contains("gdr_trace_registrations_total{comm=\"gdrsim-workload\""), "{body}");
    assert!(!body.contains("comm=\"sh\""), "{body}");
}

/// Every reason a record can be lost for is a `lost_events` series with its count (the list
/// once left out `storage_map_full`: storage I/O not counted went unseen in Prometheus), and
/// the series add up to the total `watch` prints.
#[test]
fn every_lost_reason_is_a_series() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    let lost = Lost {
        ringbuf_full: 11,
        stash_full: 12,
        stash_miss: 13,
        storage_map_full: 14,
        tracked_full: 15,
        undecodable: 16,
        delivered: Some(1000),
    };
    m.emit(&Output::Summary { agg: &Aggregator::new(), lost: &lost, last: false });
    let body = shared.body.lock().unwrap().clone();
    let mut sum = 0;
    for (reason, n) in [
        ("ringbuf_full", 11),
        ("stash_full", 12),
        ("stash_miss", 13),
        ("storage_map_full", 14),
        ("tracked_full", 15),
        ("undecodable", 16),
    ] {
        let want = format!("gdr_trace_lost_events_total{{reason=\"{reason}\"}} {n}");
        assert!(body.contains(&want), "missing {want} in\n{body}");
        sum += n;
    }
    assert_eq!(sum, lost.total());
    assert_eq!(
        body.matches("gdr_trace_lost_events_total{").count(),
        6,
        "no other reason, delivered is none:\n{body}"
    );
}

fn status(hook: &'static str, attached: Option<&str>, reasons: &[&str]) -> HookStatus {
    HookStatus {
        hook,
        side: "kernel",
        location: None,
        attached: attached.map(String::from),
        reasons: reasons.iter().map(|r| r.to_string()).collect(),
        optional: true,
    }
}

fn kernel() -> KernelFacts {
    KernelFacts {
        kernel: "6.1.0".into(),
        vmlinux_btf: true,
        ib_device_name_off: None,
        dmabuf_exporter_readable: false,
        kprobe_unavailable: None,
        fentry_unavailable: None,
        storage_offsets_unknown: vec![],
        peermem: None,
    }
}

#[test]
fn storage_not_traced_has_no_storage_series_and_families_say_what_is_on() {
    let left_out = format!("{} (--no-storage; doctor and audit don't use them)", crate::facts::LEFT_OUT);
    let hooks = vec![
        status("ib_umem_get", None, &["symbol ib_umem_get not in /proc/kallsyms"]),
        status("ibv_reg_mr", Some("uprobe+uretprobe"), &[]),
        status("openat, openat2", None, &[&left_out]),
        status("mm_filemap_add_to_page_cache", None, &[&left_out]),
    ];
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 4);
    m.start(&kernel(), &hooks);
    let body = m.render(&Aggregator::new(), &Lost::default());
    assert!(!body.contains("gdr_trace_storage"), "storage off: no storage series\n{body}");
    assert!(!body.contains("gdr_trace_page_cache"), "{body}");
    for (family, on) in [("rdma", 1), ("gpu", 0), ("p2p", 0), ("storage", 0)] {
        let line = format!("gdr_trace_hook_family_enabled{{family=\"{family}\"}} {on}");
        assert!(body.contains(&line), "{line}\n{body}");
    }
    // Every scrape lists the hooks in the same (sorted) order.
    let hooks_lines: Vec<&str> = body.lines().filter(|l| l.starts_with("gdr_trace_hook_attached{")).collect();
    let mut sorted = hooks_lines.clone();
    sorted.sort_unstable();
    assert_eq!(hooks_lines.len(), 4);
    assert_eq!(hooks_lines, sorted);
    // No kernel registration hook: /healthz warns, and says why.
    let h = shared.health.lock().unwrap().clone();
    assert_eq!((h.verdict_hooks, h.verdict_hooks_total), (0, 1));
    let said = crate::cmd::serve::healthy(&h, std::time::Duration::from_secs(60)).unwrap();
    assert!(said.starts_with("warn: no kernel registration hook attached (0/1)"), "{said}");

    // With storage traced, its series are there.
    let hooks =
        vec![status("ib_umem_get", Some("fexit"), &[]), status("openat, openat2", Some("fexit"), &[])];
    let mut m = sink(&shared, 4);
    m.start(&kernel(), &hooks);
    let body = m.render(&Aggregator::new(), &Lost::default());
    assert!(body.contains("gdr_trace_hook_family_enabled{family=\"storage\"} 1"), "{body}");
    assert!(body.contains("# TYPE gdr_trace_storage_bytes counter"), "{body}");
    let h = shared.health.lock().unwrap().clone();
    assert!(crate::cmd::serve::healthy(&h, std::time::Duration::from_secs(60)).unwrap().starts_with("ok: "));
}
