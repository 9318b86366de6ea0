use std::io::Cursor;

use super::*;
use crate::audit::identity::Resolver;
use crate::{
    audit::Posture,
    events::{Context, MrKind, MrRecord},
    sink::Lost,
    sink::{json::JsonSink, Output},
    storage::{aggregate::StorageReport, state::Snapshot},
};

fn rec(kind: MrKind, source: &str, pid: u32, ts: u64, addr: u64, len: u64, handle: u64) -> MrRecord {
    let ctx = Context { pid, tid: pid, comm: format!("w{pid}"), uid: 1000, cgroup_id: 1, ts_ns: ts };
    MrRecord { access: 7, device: Some("rxe0".into()), ..MrRecord::at(kind, source, ctx, addr, len, handle) }
}

/// Two processes: host registrations seen by kernel and user hooks, one released (with the
/// bytes its work requests moved).
fn stream() -> Vec<MrRecord> {
    let ms = 1_000_000;
    let moved = gdr_trace_common::mr::bytes::ByteCount { bytes_out: 3 << 16, bytes_in: 7, ops: 4, tenant: 0 };
    vec![
        rec(MrKind::Register, "fexit:ib_umem_get", 10, ms, 0x1000, 4096, 0xa1),
        MrRecord {
            lkey: 0x51,
            ..rec(MrKind::Register, "uprobe:ibv_reg_mr", 10, ms + 10, 0x1000, 4096, 0xb1)
        },
        rec(MrKind::Register, "fexit:ib_umem_get", 20, 2 * ms, 0x8000, 1 << 20, 0xa2),
        rec(MrKind::Register, "uprobe:ibv_reg_mr", 20, 2 * ms + 10, 0x8000, 1 << 20, 0xb2),
        rec(MrKind::Release, "fentry:ib_umem_release", 10, 300 * ms, 0, 0, 0xa1),
        MrRecord {
            lkey: 0x51,
            wr_bytes: Some(moved),
            ..rec(MrKind::Release, "uprobe:ibv_dereg_mr", 10, 300 * ms + 10, 0, 0, 0xb1)
        },
    ]
}

fn header() -> Header {
    Header {
        host: "node-1".into(),
        kernel: serde_json::json!({ "kernel": "6.1.0" }),
        hooks: serde_json::json!([]),
        started_unix_ms: 1,
        ..Default::default()
    }
}

/// A recording file so far: its header line.
fn with_header() -> Vec<u8> {
    let mut file = Vec::new();
    serde_json::to_writer(&mut file, &Item::Header(header())).unwrap();
    file.push(b'\n');
    file
}

/// A sink writing the rest of a recording into `file` (no /proc: facts stay unknown).
fn recording_sink(file: &mut Vec<u8>) -> RecordingSink<&mut Vec<u8>> {
    RecordingSink::new(file, None, Posture::default(), vec![], Resolver::new("/nonexistent".as_ref()))
}

/// A recording written by `RecordingSink` from the stream, with the live summaries it printed.
fn record() -> (Vec<u8>, Vec<String>) {
    let mut file = with_header();
    let mut live_out = Vec::new();
    {
        let mut rs = recording_sink(&mut file);
        let mut js = JsonSink::new(&mut live_out).files(true);
        // Live GPU use: process 10 has a GPU open, 20 is unknown (gone before it was looked at).
        let mut pipeline = Pipeline::new().with_gpu_use(Box::new(|pid| (pid == 10).then_some(true)));
        for r in stream() {
            let mut fan = crate::sink::FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
            // As the live loop does: the clock ticks, then records come off the ring.
            fan.tick(r.ctx.ts_ns);
            pipeline.tick(r.ctx.ts_ns, &mut fan);
            let ev = Event::Mr(r);
            fan.raw(&ev);
            pipeline.push(ev, &mut fan);
        }
        let mut fan = crate::sink::FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
        pipeline.finish(&mut fan);
        pipeline.refresh_gpu_use();
        let lost = Lost::of(gdr_trace_common::lost::RINGBUF_FULL, 2);
        fan.emit(&Output::Summary { agg: pipeline.aggregator(), lost: &lost, last: true });
        assert!(rs.error.is_none());
    }
    (file, summaries(&live_out))
}

fn summaries(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.contains("\"event\":\"summary\"") || l.contains("\"event\":\"lost\""))
        .map(str::to_string)
        .collect()
}

fn report(file: &[u8]) -> (Vec<String>, Replayed) {
    let (h, reader) = Reader::open(Cursor::new(file)).expect("header");
    assert_eq!(h.host, "node-1");
    let mut out = Vec::new();
    let r = {
        let mut js = JsonSink::new(&mut out).files(true);
        replay(reader, &mut js, |_, _| {})
    };
    (summaries(&out), r)
}

#[test]
fn replay_gives_the_live_summary() {
    let (file, live) = record();
    let text = String::from_utf8(file.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("{\"event\":\"header\""), "{}", lines[0]);
    assert!(lines[1].starts_with("{\"event\":\"process\""), "facts before the first record: {}", lines[1]);
    assert!(lines[2].starts_with("{\"event\":\"record\""), "{}", lines[2]);
    assert!(lines.last().unwrap().starts_with("{\"event\":\"end\""));
    let (replayed, r) = report(&file);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.records, 6);
    assert_eq!(r.end.unwrap().lost.get(gdr_trace_common::lost::RINGBUF_FULL), 2);
    assert_eq!(live.len(), 3, "two processes and the lost line: {live:?}");
    assert_eq!(replayed, live);
    assert!(live[0].contains("\"uses_gpu\":true") && live[0].contains("host-staged"), "{}", live[0]);
    // The bytes the released MR's work requests moved, replayed from its release record.
    let want = "\"bytes_by_verdict\":{\"host\":{\"in\":7,\"ops\":4,\"out\":196608}}";
    assert!(live[0].contains(want), "{}", live[0]);
    assert!(live[1].contains("\"uses_gpu\":null"), "{}", live[1]);
}

#[test]
fn corrupt_line_is_named_and_what_came_before_is_reported() {
    let (file, _) = record();
    let text = String::from_utf8(file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Spoil the second process's user record.
    let i = lines.iter().position(|l| l.contains("uprobe:ibv_reg_mr") && l.contains("\"pid\":20")).unwrap();
    lines[i] = lines[i].replace("\"kind\":\"register\"", "\"kind\":\"bogus\"");
    let (sums, r) = report((lines.join("\n") + "\n").as_bytes());
    let err = r.error.expect("an error");
    assert!(matches!(err, RecordingError::Corrupt { line, .. } if line == i + 1), "{err}");
    assert!(err.to_string().starts_with(&format!("line {}: corrupt record", i + 1)), "{err}");
    assert!(text.contains("{\"event\":\"tick\",\"now_ns\":"), "ticks are recorded while records are young");
    assert_eq!(sums.len(), 3, "processes 10 and 20 (kernel record only) still summarised: {sums:?}");
    assert!(sums[0].contains("\"pid\":10"));

    let mut garbage = lines.clone();
    garbage[3] = "{not json".into();
    let (_, r) = report((garbage.join("\n") + "\n").as_bytes());
    assert!(matches!(r.error, Some(RecordingError::Corrupt { line: 4, .. })));
}

#[test]
fn truncated_and_unended_files() {
    let (file, _) = record();
    // Cut in the middle of the last record line before `end`.
    let text = String::from_utf8(file).unwrap();
    let end_at = text.rfind("{\"event\":\"end\"").unwrap();
    let cut = &text[..end_at - 20];
    let n = cut.lines().count();
    let (sums, r) = report(cut.as_bytes());
    let err = r.error.unwrap();
    assert!(matches!(err, RecordingError::Truncated { line } if line == n), "{err}");
    assert!(err.to_string().contains("truncated record"));
    // Every record before the cut is summarised: both registrations, pid 10's release.
    let got: Vec<(u64, u64, u64, u64)> = sums
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == "summary")
        .map(|v| {
            let n = |k: &str| v[k].as_u64().unwrap();
            (n("pid"), n("registrations"), n("releases"), n("live_bytes"))
        })
        .collect();
    assert_eq!(got, [(10, 1, 1, 0), (20, 1, 0, 1 << 20)], "{sums:#?}");
    // Cut at a line boundary: every line reads, the end record is missing.
    let whole = &text[..end_at];
    let (_, r) = report(whole.as_bytes());
    let err = r.error.unwrap();
    assert!(matches!(err, RecordingError::NoEnd { line } if line == whole.lines().count()), "{err}");
}

#[test]
fn bad_headers() {
    let e = Reader::open(Cursor::new(b"".to_vec())).err().unwrap();
    assert!(matches!(e, RecordingError::Empty));
    let e = Reader::open(Cursor::new(b"{\"event\":\"hooks\"}\n".to_vec())).err().unwrap();
    assert!(e.to_string().starts_with("line 1: not a gdr-trace recording"), "{e}");
    let mut h = serde_json::to_value(Item::Header(header())).unwrap();
    h["format"] = "gdr-trace.recording/9".into();
    let e = Reader::open(Cursor::new(format!("{h}\n").into_bytes())).err().unwrap();
    assert!(e.to_string().contains("format \"gdr-trace.recording/9\" is not supported"), "{e}");
}

#[test]
fn storage_summaries_are_recorded_and_replayed_where_live_showed_them() {
    use crate::storage::{
        aggregate::report as storage_report,
        state::{SnapFile, Snapshot, StorageState},
    };
    use gdr_trace_common::storage::{FileIo, FileIoStats};
    let mut state = StorageState::new();
    let mut stats = FileIoStats::zeroed();
    (stats.reads, stats.bytes_read, stats.read_hist[3]) = (256, 1 << 20, 256);
    let io = FileIo { ino: 7, dev: 8 << 20, f_flags: 0, mode: 0o100644, counted: 1, stats, tenant: 0 };
    state.snapshot(Snapshot {
        files: vec![SnapFile { pid: 10, fd: 3, io, path: Some("/data/shard.bin".into()) }],
        ..Default::default()
    });
    let storage = storage_report(&state);

    let mut file = with_header();
    let mut live = Vec::new();
    {
        let mut rs = recording_sink(&mut file);
        let mut js = JsonSink::new(&mut live).files(true);
        let mut fan = crate::sink::FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
        fan.emit(&Output::StorageSummary { report: &StorageReport::default(), last: false });
        fan.emit(&Output::StorageSummary { report: &storage, last: false });
        fan.emit(&Output::Note("process 10 and its traced children exited; trace ends"));
        fan.emit(&Output::StorageSummary { report: &storage, last: true });
        let agg = Pipeline::new();
        fan.emit(&Output::Summary { agg: agg.aggregator(), lost: &Lost::default(), last: true });
    }
    let text = String::from_utf8(file.clone()).unwrap();
    assert_eq!(
        text.matches("\"event\":\"storage_summary\"").count(),
        2,
        "empty interim reports are not written: {text}"
    );
    let mut out = Vec::new();
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let r = replay(reader, &mut JsonSink::new(&mut out).files(true), |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    let storage_lines = |b: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(b)
            .lines()
            .filter(|l| l.contains("_summary\"") && !l.contains("\"event\":\"summary\""))
            .map(str::to_string)
            .collect()
    };
    let (live, replayed) = (storage_lines(&live), storage_lines(&out));
    assert_eq!(live.len(), 4, "file_io_summary + storage_summary, interim and final: {live:#?}");
    assert_eq!(replayed, live);
    assert!(replayed[2].contains("\"path\":\"/data/shard.bin\"") && replayed[2].contains("\"final\":true"));
}

/// A process that exits is dropped live after the linger; replay drops it at the same point of
/// the stream (the recording keeps the ticks around an exit), so the summaries are the same.
#[test]
fn replay_drops_exited_processes_where_live_did() {
    let ms = 1_000_000;
    let mut file = with_header();
    let mut live_out = Vec::new();
    {
        let mut rs = recording_sink(&mut file);
        let mut js = JsonSink::new(&mut live_out).files(true);
        // GPU use is learnt at a summary (not at the first record) while the process runs.
        let calls = std::cell::Cell::new(0);
        let mut pipeline = Pipeline::new().with_gpu_use(Box::new(move |pid| {
            calls.set(calls.get() + 1);
            (pid == 10 && calls.get() > 1).then_some(true)
        }));
        let mut fan = crate::sink::FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
        let at = |pipeline: &mut Pipeline, fan: &mut crate::sink::FanOut, now: u64, ev: Option<Event>| {
            fan.tick(now);
            pipeline.tick(now, fan);
            if let Some(ev) = ev {
                fan.raw(&ev);
                pipeline.push(ev, fan);
            }
        };
        let s = stream();
        for r in s[..4].iter().cloned() {
            let ts = r.ctx.ts_ns;
            at(&mut pipeline, &mut fan, ts, Some(Event::Mr(r)));
        }
        pipeline.summary_tick(Snapshot::default(), &Lost::default(), false, &mut fan);
        let exit = Context { pid: 10, tid: 10, comm: "w10".into(), uid: 1000, cgroup_id: 1, ts_ns: 400 * ms };
        at(&mut pipeline, &mut fan, 400 * ms, Some(Event::Exit(exit)));
        for t in (500..3000).step_by(100) {
            at(&mut pipeline, &mut fan, t * ms, None);
        }
        assert_eq!(pipeline.held()[..2], [2, 1], "process 10 exited, its final summary kept");
        pipeline.finish(&mut fan);
        pipeline.summary_tick(Snapshot::default(), &Lost::default(), true, &mut fan);
        assert!(rs.error.is_none());
    }
    let live = summaries(&live_out);
    let (replayed, r) = report(&file);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(live[0].contains("\"pid\":10"), "{live:?}");
    assert_eq!(replayed, live);
}
