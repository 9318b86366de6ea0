//! What `watch` shows first. The registration verdicts lead; storage follows with one
//! line per process, a per-file table only for cuFile / nvidia-fs users (or every process with
//! `--files`); `--compact` is one line per process and no line per event.

use gdr_trace_common::storage::FileIoStats;

use super::{
    text::{TextSink, View},
    Lost, Output, Sink,
};
use crate::{
    events::Context,
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::Registration,
    storage::{
        aggregate::{report, StorageReport},
        state::{tests::snap_file, SnapFile, Snapshot, StorageState},
    },
    term::{with_style, Style},
};

/// Process 10 registered 2 MiB of host memory; 10 and 20 read two files each, 30 read one
/// through cuFile.
fn tick() -> (Registration, Aggregator, StorageReport) {
    let ctx = Context { pid: 10, tid: 10, comm: "trainer".into(), ..Default::default() };
    let reg =
        Registration { id: 1, ctx, length: 2 << 20, device: Some("mlx5_0".into()), ..Default::default() };
    let mut agg = Aggregator::new();
    agg.registered(&reg, Verdict::Host);
    let mut s = StorageState::new();
    let files = [(10, 3), (10, 4), (20, 3), (20, 4), (30, 3)]
        .into_iter()
        .map(|(pid, fd)| {
            let mut stats = FileIoStats::zeroed();
            (stats.reads, stats.bytes_read) = (4, 1 << 20);
            let path = Some(format!("/data/p{pid}/f{fd}.bin"));
            SnapFile { path, ..snap_file(pid, fd, (pid * 10 + fd).into(), 0, stats) }
        })
        .collect();
    s.snapshot(Snapshot { files, ..Default::default() });
    let mut r = report(&s);
    r.procs.iter_mut().find(|p| p.pid == 30).expect("process 30").cufile_calls = 2;
    (reg, agg, r)
}

fn run(view: View) -> String {
    let (reg, agg, r) = tick();
    let mut out = Vec::new();
    with_style(Style::terminal(80), || {
        let mut sink = TextSink::new(&mut out).view(view);
        sink.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
        // The pipeline's order: storage first, then the registrations.
        sink.emit(&Output::StorageSummary { report: &r, last: true });
        sink.emit(&Output::Summary { agg: &agg, lost: &Lost::default(), last: true });
    });
    String::from_utf8(out).unwrap()
}

#[test]
fn the_registration_verdicts_lead_and_storage_is_a_line_per_process() {
    let text = run(View::default());
    let summary = text.find("-- summary --").expect("the registration summary");
    let storage = text.find("-- storage summary --").expect("the storage section");
    assert!(summary < storage, "registrations first:\n{text}");
    assert!(text[summary..storage].contains("trainer") && text[summary..storage].contains("host"), "{text}");
    // Processes 10 and 20: a line each, no table; 30 used cuFile: its files are listed.
    for pid in [10, 20] {
        let line = text[storage..].lines().find(|l| l.starts_with(&format!("PID {pid} "))).expect("its line");
        assert!(line.ends_with("page-cache 2.0 MiB (8 calls); 2 files"), "{line}");
        assert!(!text.contains(&format!("/data/p{pid}/")), "no file of {pid} without --files:\n{text}");
    }
    assert!(text.contains("/data/p30/f3.bin"), "a cuFile user's files:\n{text}");
    assert!(text.contains("(each file: --files)"), "{text}");
    // An 80-column terminal: nothing wider, no figure split (the nine-column table would).
    assert!(text[summary..].lines().all(|l| l.chars().count() <= 80), "{text}");
    assert!(
        text.contains("PID 10 (trainer): host, GPU use unknown, 1 MRs (0 failed), 2.0 MiB registered"),
        "{text}"
    );
    assert!(text.contains("  host: 1 MR(s), 2.0 MiB, 2.0 MiB live"), "{text}");
}

#[test]
fn files_lists_every_process_files() {
    let text = run(View { files: true, compact: false });
    for pid in [10, 20, 30] {
        assert!(text.contains(&format!("/data/p{pid}/f3.bin")), "{pid}:\n{text}");
    }
    assert!(!text.contains("(each file: --files)"), "{text}");
}

#[test]
fn compact_is_one_line_per_process_and_no_event_lines() {
    let text = run(View { files: false, compact: true });
    assert!(!text.contains("REG pid"), "no event lines:\n{text}");
    assert!(!text.contains("-- storage"), "storage is a column:\n{text}");
    let rows: Vec<&str> =
        text.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    assert_eq!(rows.len(), 3, "one line per process:\n{text}");
    let row = |pid: &str| *rows.iter().find(|r| r.split_whitespace().next() == Some(pid)).unwrap();
    let w: Vec<&str> = row("10").split_whitespace().collect();
    // Registered 2 MiB, no work request seen (MOVED "-"), 2 MiB read through the page cache.
    assert_eq!(
        w,
        ["10", "trainer", "host", "?", "1", "2.0", "MiB", "-", "2.0", "MiB", "page-cache"],
        "{text}"
    );
    assert!(row("20").contains("no-rdma") && row("20").ends_with("2.0 MiB page-cache"), "{text}");
    assert!(text.lines().next().is_some_and(|l| l.starts_with("-- summary --")), "{text}");
    let head = text.lines().nth(1).unwrap_or_default();
    assert!(head.contains("PID") && head.contains("MOVED") && head.contains("STORAGE"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "80 columns:\n{text}");
}

#[test]
fn compact_says_a_gds_user_uses_a_gpu() {
    // Its nvidia-fs bytes went to GPU memory: "yes", not "?" (the process is often gone).
    let (_, agg, mut r) = tick();
    let p30 = r.procs.iter_mut().find(|p| p.pid == 30).unwrap();
    let bytes = crate::storage::report::VerdictBytes { bytes: 1 << 20, calls: 2 };
    p30.bytes_by_verdict.insert(crate::storage::classify::StorageVerdict::GdsNvfs, bytes);
    let text = render(&agg, &r, View { files: false, compact: true }, &[]);
    let gpu = |pid: &str| {
        let row = text.lines().find(|l| l.split_whitespace().next() == Some(pid)).unwrap();
        row.split_whitespace().nth(3).unwrap().to_string()
    };
    assert_eq!((gpu("30"), gpu("20")), ("yes".to_string(), "?".to_string()), "{text}");
}

/// Process 10 with 1.5 MiB moved by its work requests through its host MR.
fn with_bytes() -> (Aggregator, StorageReport) {
    let (_, mut agg, r) = tick();
    let mut ledger = crate::mr::bytes::Ledger::default();
    ledger.registered(10, (0, 0x51), 1, "host");
    let counts = gdr_trace_common::mr::bytes::ByteCount {
        bytes_out: 1 << 20,
        bytes_in: 512 << 10,
        ops: 24,
        tenant: 0,
    };
    ledger.reading(&[(gdr_trace_common::mr::bytes::ByteKey { tgid: 10, lkey: 0x51, dev: 0 }, counts)]);
    agg.set_bytes(&ledger);
    (agg, r)
}

fn render(agg: &Aggregator, r: &StorageReport, view: View, hooks: &[crate::facts::HookStatus]) -> String {
    let mut out = Vec::new();
    with_style(Style::terminal(80), || {
        let mut sink = TextSink::new(&mut out).view(view);
        sink.traced(hooks);
        sink.emit(&Output::StorageSummary { report: r, last: true });
        sink.emit(&Output::Summary { agg, lost: &Lost::default(), last: true });
    });
    String::from_utf8(out).unwrap()
}

#[test]
fn bytes_moved_show_at_80_columns_and_in_the_compact_view() {
    let (agg, r) = with_bytes();
    let text = render(&agg, &r, View::default(), &[]);
    assert!(text.contains("  moved by work requests, host: out 1.0 MiB, in 512.0 KiB, 24 ops"), "{text}");
    let text = render(&agg, &r, View { files: false, compact: true }, &[]);
    let row = text.lines().find(|l| l.split_whitespace().next() == Some("10")).expect("process 10");
    assert!(row.contains(" 1.5 MiB "), "MOVED: out + in:\n{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "80 columns:\n{text}");
}

/// A hook row as the loader reports it: attached, or not with its first reason.
fn hook(name: &'static str, side: &'static str, attached: bool, reason: &str) -> crate::facts::HookStatus {
    crate::facts::HookStatus {
        hook: name,
        side,
        location: None,
        attached: attached.then(|| "tracepoint".to_string()),
        reasons: vec![reason.to_string()],
    }
}

#[test]
fn registrations_and_storage_not_traced_are_never_none_seen() {
    let storage_off = format!("{} (--no-storage; doctor and audit don't use them)", crate::facts::LEFT_OUT);
    // --no-uprobes on a kernel without kprobes or fentry: nothing sees a registration.
    let off = [
        hook("ib_umem_get", "kernel", false, "not in /proc/kallsyms"),
        hook("ibv_reg_mr", "user", false, crate::facts::UPROBES_DISABLED),
        hook("read, pread64, readv, preadv, preadv2", "kernel", false, &storage_off),
    ];
    assert!(!crate::sink::metrics::rdma_traced(&off));
    let empty = (Aggregator::new(), StorageReport::default());
    let text = render(&empty.0, &empty.1, View::default(), &off);
    assert!(
        text.contains("-- summary: memory registrations not traced (no RDMA hook attached) --"),
        "{text}"
    );
    assert!(text.contains("-- storage: not traced (storage hooks left out) --"), "{text}");
    assert!(!text.contains("seen"), "{text}");
    // The compact view: a process that only read files is not "no-rdma" when none could be seen.
    let (_, _, r) = tick();
    let text = render(&Aggregator::new(), &r, View { files: false, compact: true }, &off[..2]);
    let row = text.lines().find(|l| l.split_whitespace().next() == Some("20")).expect("process 20");
    assert!(row.contains("not traced") && !row.contains("no-rdma"), "{text}");
    // libibverbs not found at start: the follower hooks each copy a process maps, so traced.
    let later =
        [hook("ibv_reg_mr", "user", false, "libibverbs.so.1 not found (not mapped by the process, ...)")];
    assert!(crate::sink::metrics::rdma_traced(&later));
    let text = render(&empty.0, &empty.1, View::default(), &later);
    assert!(text.contains("-- summary: no memory registrations seen --"), "{text}");
}

#[test]
fn a_recorded_hook_row_reads_back_as_live_wrote_it() {
    let row = hook("ibv_reg_mr", "user", false, crate::facts::UPROBES_DISABLED);
    let unknown = serde_json::json!({ "hook": "no_such_hook" });
    let header = crate::recording::Header {
        hooks: serde_json::json!([serde_json::to_value(&row).unwrap(), unknown]),
        ..Default::default()
    };
    let back = header.hook_statuses();
    assert_eq!(back.len(), 1, "a row this build has no hook of is left out: {back:?}");
    let b = &back[0];
    assert_eq!((b.hook, b.side, &b.attached, &b.reasons), (row.hook, row.side, &row.attached, &row.reasons));
}

/// A process's claims (registrations only libibverbs saw) are a line of their own in the text
/// summary, in none of its totals.
#[test]
fn claims_are_a_line_apart_in_the_summary() {
    let (_, _, r) = tick();
    let ctx = Context { pid: 10, tid: 10, comm: "trainer".into(), ..Default::default() };
    let claim = Registration {
        id: 2,
        ctx,
        length: 1 << 40,
        sources: vec![crate::events::Source::parse("uprobe:ibv_reg_mr")],
        ..Default::default()
    };
    let mut agg = Aggregator::new().with_claims_apart(true);
    agg.registered(&claim, Verdict::GpuPeermem);
    let text = render(&agg, &r, View::default(), &[]);
    assert!(text.contains("unverified (libibverbs only, no kernel pin): 1, 1.0 TiB, 1.0 TiB live"), "{text}");
    assert!(!text.contains("gpu-peermem"), "{text}");
}
