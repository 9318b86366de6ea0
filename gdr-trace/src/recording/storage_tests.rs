//! Recordings carry storage events and the kernel's counters; `report` replays them through
//! the same pipeline, so its summaries are the live ones, byte for byte.

use std::io::Cursor;

use gdr_trace_common::storage::{GdsOp, GdsTally};

use super::*;
use crate::{
    audit::{identity::Resolver, Posture},
    events::MrRecord,
    events::{
        storage::{FileClosed, StorageEvent},
        Context, MrKind,
    },
    sink::Lost,
    sink::{json::JsonSink, FanOut},
    storage::state::tests::{ctx, gds, opened, snap_file, stats},
    storage::state::Snapshot,
};

/// Where the live line's process pinned host memory (an address like a real one).
const HOST_ALLOC: u64 = 0x7f3a_5c00_0000;

/// What the live line fed its sinks: records, storage events, a summary tick with counters,
/// more events, the end (notes, the final tick with the counters read last).
fn live(file: &mut Vec<u8>, out: &mut Vec<u8>) {
    let mut rs =
        RecordingSink::new(file, None, Posture::default(), vec![], Resolver::new("/nonexistent".as_ref()));
    let mut js = JsonSink::new(out).files(true);
    let mut fan = FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
    let mut pipeline = Pipeline::new();
    let lost = Lost::of(gdr_trace_common::lost::STASH_MISS, 1);
    // Registered inside pinned host memory cuMemHostAlloc gave: a range replay must still see.
    let reg = MrRecord::at(
        MrKind::Register,
        "fexit:ib_umem_get",
        Context { pid: 10, tid: 10, ..ctx(10) },
        HOST_ALLOC + 0x1000,
        4096,
        7,
    );
    let alloc = crate::events::cuda::CudaCall {
        ctx: ctx(10),
        op: crate::events::cuda::CudaOp::HostAlloc,
        function: "cuMemHostAlloc".into(),
        source: "uprobe:cuMemHostAlloc".into(),
        addr: HOST_ALLOC,
        length: 1 << 20,
        flags: 0,
        aux: 0,
        ret: 0,
        device: Some(0),
        peer_device: None,
        handle: None,
        file: None,
    };
    let tally = GdsTally { nvfs_calls: 1, ..Default::default() };
    let first = [
        Event::Cuda(alloc),
        Event::Mr(reg),
        Event::Storage(opened(10, 3, "/data/shard.bin", 100, 0)),
        Event::Storage(opened(20, 4, "/data/direct.bin", 200, libc::O_DIRECT as u32)),
        Event::Storage(gds(10, GdsOp::Read, Some(3), 1, 4096, tally)),
    ];
    for ev in first {
        fan.raw(&ev);
        pipeline.push(ev, &mut fan);
    }
    let interim = Snapshot {
        files: vec![
            snap_file(10, 3, 100, 0, stats(4, 16384)),
            snap_file(20, 4, 200, libc::O_DIRECT as u32, stats(2, 8192)),
        ],
        comms: [(10, "p10".to_string()), (20, "p20".to_string())].into(),
        ..Default::default()
    };
    pipeline.summary_tick(interim, &lost, false, &mut fan);
    let closed = Event::Storage(StorageEvent::Closed(FileClosed {
        ctx: ctx(20),
        fd: 4,
        id: crate::storage::state::tests::id(200, libc::O_DIRECT as u32),
        counters: stats(3, 12288),
    }));
    fan.raw(&closed);
    pipeline.push(closed, &mut fan);
    pipeline.finish(&mut fan);
    fan.emit(&Output::Note("interrupted"));
    let last = Snapshot {
        files: vec![snap_file(10, 3, 100, 0, stats(9, 36864))],
        gone: vec![10],
        ..Default::default()
    };
    pipeline.summary_tick(last, &lost, true, &mut fan);
    assert!(rs.error.is_none());
}

/// A recording so far: its header line.
fn header() -> Vec<u8> {
    let mut file = Vec::new();
    serde_json::to_writer(&mut file, &Item::Header(Header { host: "h".into(), ..Default::default() }))
        .unwrap();
    file.push(b'\n');
    file
}

/// The summaries of an NDJSON stream: per process, lost, per file and per process storage.
fn summaries(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| {
            l.contains("_summary\"")
                || l.contains("\"event\":\"summary\"")
                || l.contains("\"event\":\"lost\"")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_replayed_report_equals_the_live_one() {
    let (mut file, mut out) = (header(), Vec::new());
    live(&mut file, &mut out);
    let text = String::from_utf8_lossy(&file).to_string();
    for item in [
        "\"event\":\"storage\"",
        "\"event\":\"counters\",\"last\":false",
        "\"event\":\"counters\",\"last\":true",
    ] {
        assert!(text.contains(item), "the recording carries {item}: {text}");
    }
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let mut replayed = Vec::new();
    let r = replay(reader, &mut JsonSink::new(&mut replayed).files(true), |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    let (live, replayed) = (summaries(&out), summaries(&replayed));
    let count = |needle: &str| live.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(count("\"event\":\"file_io_summary\""), 4, "two files, interim and final: {live:#?}");
    assert!(live.iter().any(|l| l.contains("/data/shard.bin") && l.contains("\"reads\":9")), "{live:#?}");
    assert!(
        live.iter().any(|l| l.contains("\"event\":\"lost\"") && l.contains("\"stash_miss\":1")),
        "{live:#?}"
    );
    // Byte for byte but for user addresses (a staging MR's), each moved (`unmove`).
    assert_eq!(replayed.len(), live.len(), "{replayed:#?}");
    for (l, r) in live.iter().zip(&replayed) {
        let (mut lv, mut rv): (serde_json::Value, serde_json::Value) =
            (serde_json::from_str(l).unwrap(), serde_json::from_str(r).unwrap());
        unmove(&mut lv, &mut rv);
        assert_eq!(rv, lv, "the replayed summaries are the live ones");
        if !l.contains("staging_mrs") {
            assert_eq!(r, l, "byte for byte");
        }
    }
}

#[test]
fn older_recordings_without_counters_still_replay_their_storage_reports() {
    // A recording as gdr-trace wrote it before storage events were recorded: only the
    // finished reports. (The header's format is the same: the new lines are additions.)
    let (mut file, mut out) = (header(), Vec::new());
    live(&mut file, &mut out);
    let old: String = String::from_utf8_lossy(&file)
        .lines()
        .filter(|l| !l.contains("\"event\":\"storage\"") && !l.contains("\"event\":\"counters\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let (_, reader) = Reader::open(Cursor::new(old.as_bytes())).expect("header");
    let mut replayed = Vec::new();
    let r = replay(reader, &mut JsonSink::new(&mut replayed).files(true), |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    let storage =
        |b: &[u8]| summaries(b).into_iter().filter(|l| l.contains("_summary\"")).collect::<Vec<_>>();
    assert_eq!(storage(&replayed), storage(&out), "the recorded reports, shown as live tracing showed them");
}

/// Interim summaries as a sink sees them (`Output::Summary { last: false }`).
#[derive(Default)]
struct Interim(usize);

impl Sink for Interim {
    fn start(&mut self, _: &crate::facts::KernelFacts, _: &[crate::facts::HookStatus]) {}
    fn emit(&mut self, out: &Output<'_>) {
        if matches!(out, Output::Summary { last: false, .. }) {
            self.0 += 1;
        }
    }
}

#[test]
fn an_interim_tick_replays_through_the_live_summary_tick() {
    // One path: the replayed interim tick is the pipeline's own (exits, archiving and the
    // interim registration summary), not a storage report made on the side.
    let (mut file, mut out) = (header(), Vec::new());
    live(&mut file, &mut out);
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let mut seen = Interim::default();
    let r = replay(reader, &mut seen, |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(seen.0, 1, "the live line had one interim summary tick");
}

/// Not only the summaries: every line the live sink wrote (registrations, cuFile calls, notes,
/// file and process summaries, lost) comes back from the recording, in order, field for field;
/// a user-space address is the one field that differs: moved by the recording's offset for its
/// process (`addrs`), zero staying zero.
#[test]
fn every_line_of_the_live_stream_replays() {
    let (mut file, mut out) = (header(), Vec::new());
    live(&mut file, &mut out);
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let mut replayed = Vec::new();
    let r = replay(reader, &mut JsonSink::new(&mut replayed).files(true), |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    let (live, replayed) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&replayed));
    let kinds: std::collections::BTreeSet<&str> =
        live.lines().filter_map(|l| l.split("\"event\":\"").nth(1)?.split('"').next()).collect();
    for k in ["mr_register", "gds_io", "note", "file_io_summary", "storage_summary", "summary", "lost"] {
        assert!(kinds.contains(k), "the live stream has {k}: {kinds:?}");
    }
    let (l, r): (Vec<&str>, Vec<&str>) = (live.lines().collect(), replayed.lines().collect());
    assert_eq!(r.len(), l.len(), "the replayed stream is the live one:\n{live}\n{replayed}");
    let mut moved = 0;
    for (l, r) in l.iter().zip(&r) {
        let (mut lv, mut rv): (serde_json::Value, serde_json::Value) =
            (serde_json::from_str(l).unwrap(), serde_json::from_str(r).unwrap());
        moved += unmove(&mut lv, &mut rv);
        assert_eq!(rv, lv, "the replayed stream is the live one");
    }
    assert!(moved > 0, "an address was there to move:\n{live}");
    // The range held: the registration lies in the pinned host memory, live and replayed.
    assert!(live.contains("\"host_origin\":\"cuda-pinned\""), "{live}");
    let text = String::from_utf8_lossy(&file);
    for a in [HOST_ALLOC, HOST_ALLOC + 0x1000] {
        assert!(!text.contains(&a.to_string()) && !text.contains(&format!("{a:x}")), "{a:#x} in {text}");
    }
}

/// Nulls the user-space address fields of a live line and its replay (in a summary's staging
/// MRs too) after checking each was moved, zero staying zero; how many were moved.
fn unmove(live: &mut serde_json::Value, replayed: &mut serde_json::Value) -> usize {
    let mut moved = 0;
    for field in ["addr", "iova", "buf", "stream", "cpuvaddr", "gpuvaddr"] {
        let (Some(a), Some(b)) =
            (live.get(field).and_then(|v| v.as_u64()), replayed.get(field).and_then(|v| v.as_u64()))
        else {
            continue;
        };
        assert!(if a == 0 { b == 0 } else { b != a }, "{field} {a:#x} written as {b:#x}: {replayed}");
        moved += usize::from(a != 0);
        live[field] = serde_json::Value::Null;
        replayed[field] = serde_json::Value::Null;
    }
    if let (Some(l), Some(r)) = (live.get_mut("staging_mrs"), replayed.get_mut("staging_mrs")) {
        if let (Some(l), Some(r)) = (l.as_array_mut(), r.as_array_mut()) {
            for (l, r) in l.iter_mut().zip(r.iter_mut()) {
                moved += unmove(l, r);
            }
        }
    }
    moved
}
