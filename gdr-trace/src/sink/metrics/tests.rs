use super::*;
use crate::{events::Context, mr::correlate::Registration};

/// What a registration a kernel hook saw carries (not only a claim: `unverified`).
pub(super) fn kernel_seen() -> Vec<crate::events::Source> {
    vec![crate::events::Source::parse("fexit:ib_umem_get")]
}

/// A metrics sink keeping the `top` largest identities, with no identity source on disk, on a
/// machine whose kernel lists the RDMA devices mlx5_0 and rxe0.
pub(super) fn sink(shared: &Arc<Shared>, top: usize) -> MetricsSink {
    MetricsSink::new(shared.clone(), top, Posture::default(), vec![], Resolver::new("/nonexistent".as_ref()))
        .with_devices(budget::Devices::fixed(&["mlx5_0", "rxe0"]))
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
            sources: kernel_seen(),
            ..Default::default()
        };
        agg.registered(&reg, v);
        m.emit(&Output::Registered { reg: &reg, verdict: v });
    }
    m.emit(&Output::Summary {
        agg: &agg,
        lost: &Lost::of(gdr_trace_common::lost::RINGBUF_FULL, 3),
        last: false,
    });
    let body = shared.body.lock().unwrap().clone();
    for want in [
        "gdr_trace_registrations_total{comm=\"trainer\",container=\"\",pod=\"\",uid=\"0\",verdict=\"gpu-peermem\",device=\"mlx5_0\"} 1",
        "gdr_trace_registered_bytes_total{comm=\"trainer\",container=\"\",pod=\"\",uid=\"0\",verdict=\"gpu-peermem\",device=\"mlx5_0\"} 2097152",
        "gdr_trace_registrations_total{comm=\"other\",container=\"\",pod=\"\",uid=\"\",verdict=\"host\",device=\"mlx5_0\"} 1",
        "gdr_trace_live_pinned_bytes{comm=\"trainer\",container=\"\",pod=\"\",uid=\"0\",verdict=\"gpu-peermem\"} 2097152",
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
        sources: kernel_seen(),
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

pub(super) fn register(
    m: &mut MetricsSink,
    id: u64,
    pid: u32,
    uid: u32,
    comm: &str,
    device: &str,
    length: u64,
) {
    let reg = Registration {
        id,
        ctx: Context { pid, tid: pid, comm: comm.into(), uid, ..Default::default() },
        length,
        device: Some(device.into()),
        sources: kernel_seen(),
        ..Default::default()
    };
    m.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
}

pub(super) fn snapshot(m: &mut MetricsSink, shared: &Shared) -> String {
    m.emit(&Output::Summary { agg: &Aggregator::new(), lost: &Lost::default(), last: false });
    shared.body.lock().unwrap().clone()
}

/// One process registering with 200,000 made-up device names (from its
/// own memory) gets no series of its own per name, memory and `/metrics` stay bounded, another
/// tenant's series are untouched, and the identity's series go once its process exits.
#[test]
fn made_up_device_names_and_a_flooding_tenant_leave_metrics_bounded() {
    const N: u64 = 200_000;
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    register(&mut m, 1, 10, 1000, "trainer", "mlx5_0", 1 << 30);
    for i in 0..N {
        // Distinct comms too (prctl PR_SET_NAME is free): each is a new process identity.
        register(&mut m, 2 + i, 20, 65534, &format!("f{}", i % 500), &format!("fake{i}"), 4096);
    }
    let body = snapshot(&mut m, &shared);
    assert!(!body.contains("fake"), "a made-up device became a label");
    assert!(body.contains("device=\"unverified\""), "{body:.2000}");
    let series = body.lines().filter(|l| l.starts_with("gdr_trace_registrations_total{")).count();
    assert!(series <= 5 + 3, "{series} registration series:\n{body:.4000}");
    assert!(body.len() < 16 * 1024, "/metrics is {} bytes", body.len());
    // The first 64 identities (f0..f63, one series each: the device is unverified) are its own.
    let over = N - budget::SERIES_PER_UID as u64 * (N / 500);
    assert!(
        body.contains(&format!("gdr_trace_over_budget_registrations_total{{uid=\"65534\"}} {over}")),
        "{body}"
    );
    assert!(
        body.contains("gdr_trace_registrations_total{comm=\"trainer\",container=\"\",pod=\"\",uid=\"1000\",verdict=\"host\",device=\"mlx5_0\"} 1"),
        "the other tenant keeps its series: {body}"
    );
    assert!(m.budget.owned() <= 2 * budget::SERIES_PER_UID);
    // The flooding identities' series are gone a snapshot after their process exits.
    assert!(body.contains("comm=\"f0\""), "{body}");
    m.keys.insert(20, ProcKey { comm: "f0".into(), uid: "65534".into(), ..Default::default() });
    m.emit(&Output::Exited { pid: 20 });
    let _ = snapshot(&mut m, &shared);
    let body = snapshot(&mut m, &shared);
    assert!(!body.contains("comm=\"f0\""), "{body}");
}

/// Label values pass escaped per the exposition format (`\\`, `"`, newline)
/// and with no raw ESC, BEL or CR.
#[test]
fn label_values_carry_no_raw_control_characters() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    register(&mut m, 1, 10, 0, "a\"b\\c\nd\u{1b}]0;x\u{7}\re", "rxe0", 4096);
    let body = snapshot(&mut m, &shared);
    let want = r#"gdr_trace_registrations_total{comm="a\"b\\c\\nd\\x1b]0;x\\x07\\re","#;
    assert!(body.lines().any(|l| l.starts_with(want)), "no {want} in\n{body}");
    assert!(!body.chars().any(|c| c.is_control() && c != '\n'), "{body:?}");
}

fn status(hook: &'static str, attached: Option<&str>, reasons: &[&str]) -> HookStatus {
    HookStatus {
        hook,
        side: "kernel",
        location: None,
        attached: attached.map(String::from),
        reasons: reasons.iter().map(|r| r.to_string()).collect(),
    }
}

fn kernel() -> KernelFacts {
    KernelFacts { kernel: "6.1.0".into(), vmlinux_btf: true, ..Default::default() }
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
    // Nor storage's loss reasons, nor GPU counters without their hooks: not traced, never 0.
    assert!(
        !body.contains("reason=\"storage_map_full\"") && !body.contains("reason=\"nvfs_async_miss\""),
        "{body}"
    );
    assert!(body.contains("reason=\"ringbuf_full\""), "{body}");
    assert!(
        !body.contains("gdr_trace_gpu_pins_outside_rdma") && !body.contains("gdr_trace_gpu_freed"),
        "{body}"
    );
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
    let said = crate::cmd::serve::healthy(&h, std::time::Duration::from_secs(60)).unwrap();
    assert!(
        said.starts_with("warn: memory type of registrations (host or GPU) cannot be told here: no kernel registration hook attached (ib_umem_get: symbol ib_umem_get not in /proc/kallsyms)"),
        "{said}"
    );
    assert!(body.contains("gdr_trace_fact_told{family=\"rdma\",fact=\"memory_type\"} 0"), "{body}");
    assert!(body.contains("gdr_trace_fact_told{family=\"rdma\",fact=\"registrations\"} 1"), "{body}");

    // With storage traced, its series are there.
    let hooks = vec![
        status("ib_umem_get", Some("fexit"), &[]),
        status("openat, openat2", Some("fexit"), &[]),
        status("nvidia_p2p_get_pages", Some("kprobe+kretprobe"), &[]),
        status("nv_get_p2p_free_callback", Some("kprobe"), &[]),
    ];
    let mut m = sink(&shared, 4);
    m.start(&kernel(), &hooks);
    let body = m.render(&Aggregator::new(), &Lost::default());
    assert!(body.contains("gdr_trace_hook_family_enabled{family=\"storage\"} 1"), "{body}");
    assert!(body.contains("reason=\"storage_map_full\"} 0"), "{body}");
    assert!(body.contains("gdr_trace_gpu_pins_outside_rdma_total 0"), "{body}");
    assert!(body.contains("gdr_trace_gpu_freed_under_registration_total 0"), "{body}");
    assert!(body.contains("# TYPE gdr_trace_storage_bytes counter"), "{body}");
    let h = shared.health.lock().unwrap().clone();
    assert!(crate::cmd::serve::healthy(&h, std::time::Duration::from_secs(60)).unwrap().starts_with("ok: "));
}

/// A device name the kernel's own record gave (`ib_device.name`, read by a kernel hook) is the
/// label even when /sys/class/infiniband does not list it (a driver's device outside ib_core's
/// class, as the simulated NIC's); the same name from the caller's memory alone is unverified.
#[test]
fn a_device_named_by_the_kernel_is_its_label_one_named_by_the_caller_is_checked() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    for (pid, from_kernel) in [(10, true), (11, false)] {
        let reg = Registration {
            id: u64::from(pid),
            ctx: Context { pid, tid: pid, comm: format!("p{pid}"), ..Default::default() },
            length: 4096,
            device: Some("mlx5_sim0".into()),
            device_from_kernel: from_kernel,
            sources: kernel_seen(),
            ..Default::default()
        };
        m.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
    }
    let body = snapshot(&mut m, &shared);
    let line = |comm: &str| {
        body.lines()
            .find(|l| {
                l.starts_with("gdr_trace_registrations_total{") && l.contains(&format!("comm=\"{comm}\""))
            })
            .unwrap_or_else(|| panic!("no series of {comm}:\n{body}"))
            .to_string()
    };
    assert!(line("p10").contains("device=\"mlx5_sim0\""), "{}", line("p10"));
    assert!(line("p11").contains("device=\"unverified\""), "{}", line("p11"));
}

#[test]
fn bytes_not_traced_has_no_byte_series_and_the_bytes_family_is_off() {
    let left_out = format!("{} (--no-bytes)", crate::facts::BYTES_LEFT_OUT);
    let hooks = vec![
        status("ibv_reg_mr", Some("uprobe+uretprobe"), &[]),
        status("post_send", None, &[&left_out]),
        status("poll_cq", None, &[&left_out]),
    ];
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 4);
    m.start(&kernel(), &hooks);
    let body = m.render(&Aggregator::new(), &Lost::default());
    assert!(!body.contains("gdr_trace_rdma_bytes"), "bytes off: no byte series\n{body}");
    assert!(body.contains("gdr_trace_hook_family_enabled{family=\"bytes\"} 0"), "{body}");
    assert!(!crate::facts::storage_left_out(&hooks), "--no-bytes is not --no-storage");
    assert_eq!(crate::facts::HookCount::statuses(&hooks).left_out, 2);

    // Traced (the rows wait for a provider): the family is on and the host series exist at 0.
    let deferred = crate::loader::provider::DEFERRED;
    let hooks =
        vec![status("ibv_reg_mr", Some("uprobe+uretprobe"), &[]), status("post_send", None, &[deferred])];
    let mut m = sink(&shared, 4);
    m.start(&kernel(), &hooks);
    let body = m.render(&Aggregator::new(), &Lost::default());
    assert!(body.contains("gdr_trace_hook_family_enabled{family=\"bytes\"} 1"), "{body}");
    assert!(body.contains("gdr_trace_rdma_bytes_total{verdict=\"host\",direction=\"out\"} 0"), "{body}");
}

/// A comm is whatever a process chose; its uid is not: a tenant naming its job like another
/// user's gets series of its own, never added to (or taken for) the other's.
#[test]
fn two_users_with_one_comm_get_a_series_each() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 5);
    register(&mut m, 1, 10, 1000, "trainer", "mlx5_0", 1 << 20);
    register(&mut m, 2, 11, 65534, "trainer", "mlx5_0", 1 << 30);
    let body = snapshot(&mut m, &shared);
    let series = |uid: &str| {
        format!("gdr_trace_registered_bytes_total{{comm=\"trainer\",container=\"\",pod=\"\",uid=\"{uid}\",verdict=\"host\",device=\"mlx5_0\"}}")
    };
    assert!(body.contains(&format!("{} {}", series("1000"), 1 << 20)), "{body}");
    assert!(body.contains(&format!("{} {}", series("65534"), 1 << 30)), "{body}");
}

/// Coalitions: five uids, each with 100 identities of 1 GiB, cannot push a sixth user's 4 KiB
/// job into `other` under `--top 20` (every uid's largest ranks before any uid's second).
#[test]
fn a_coalition_of_uids_cannot_hide_another_users_job() {
    let shared = Arc::new(Shared::default());
    let mut m = sink(&shared, 20);
    register(&mut m, 1, 10, 1001, "victim", "mlx5_0", 4096);
    for i in 0..500u64 {
        register(&mut m, 2 + i, 100 + i as u32, 65530 + (i % 5) as u32, &format!("c{i}"), "mlx5_0", 1 << 30);
    }
    let body = snapshot(&mut m, &shared);
    assert!(
        body.contains("{comm=\"victim\",container=\"\",pod=\"\",uid=\"1001\",verdict=\"host\""),
        "{body:.3000}"
    );
}
