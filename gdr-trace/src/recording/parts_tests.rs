//! A busy node's recording (thousands of processes and files) replays in full: its counters
//! and storage reports are split into lines the reader takes, and joined back.

use std::io::Cursor;

use super::*;
use crate::{
    sink::json::JsonSink,
    storage::state::tests::{opened, snap_file, stats},
    storage::{
        aggregate::{report as storage_report, StorageReport},
        state::Snapshot,
    },
};

const PROCS: u32 = 2_000;
const FILES: u32 = 5;

fn count(ndjson: &[u8], event: &str) -> usize {
    let needle = format!("\"event\":\"{event}\"");
    String::from_utf8_lossy(ndjson).lines().filter(|l| l.contains(&needle)).count()
}

#[test]
fn a_busy_node_recording_is_written_in_bounded_lines_and_replays_whole() {
    let mut file = Vec::new();
    let live = super::busy::busy_node(PROCS, FILES, &mut file);
    let longest = file.split(|&b| b == b'\n').map(<[u8]>::len).max().unwrap();
    assert!(file.len() > 4 * crate::bounded::MAX_RECORDING_LINE, "a busy recording: {} bytes", file.len());
    assert!(longest <= crate::bounded::MAX_RECORDING_LINE, "every line is one the reader takes: {longest}");
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let mut replayed = Vec::new();
    let r = replay(reader, &mut JsonSink::new(&mut replayed).files(true), |_, _| {});
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.end.is_some());
    let files = count(&live, "file_io_summary");
    assert_eq!(files, 2 * (PROCS * FILES) as usize, "every file, interim and final");
    assert_eq!(count(&replayed, "file_io_summary"), files, "nothing lost on replay");
    assert_eq!(count(&replayed, "storage_summary"), count(&live, "storage_summary"));
}

#[test]
fn split_parts_join_back_to_the_whole() {
    let mut snap = crate::counters::Counters::default();
    for i in 0..3_000u32 {
        snap.storage.files.push(snap_file(i, 3, u64::from(i), 0, stats(1, 4096)));
        snap.storage.comms.insert(i, format!("c{i}"));
        snap.storage.gone.push(i);
    }
    // Every family's part comes back (a split once lost the staged copies and cuFile facts).
    snap.storage.gds_facts.push((7, Default::default()));
    snap.staged.push(crate::p2p::StagedCopies {
        pid: 7,
        dir: crate::p2p::staged::StagedDir::Dtoh,
        host: 0x1000,
        calls: 1,
        bytes: 4096,
    });
    snap.bytes.push((Default::default(), Default::default()));
    let parts = parts::split_snapshot(&snap);
    assert!(parts.len() > 1);
    let mut joined = crate::counters::Counters::default();
    for p in parts {
        assert!(serde_json::to_vec(&p).unwrap().len() <= parts::PART_BYTES + 4096);
        parts::join_snapshot(&mut joined, p);
    }
    assert_eq!(joined, snap);

    // One process with more files than a part holds.
    let mut pipeline = Pipeline::new();
    let mut snap = Snapshot::default();
    let mut sink = JsonSink::new(std::io::sink());
    for fd in 0..4_000u32 {
        pipeline.push(Event::Storage(opened(7, fd as i32, &format!("/f/{fd}"), u64::from(fd), 0)), &mut sink);
        snap.files.push(snap_file(7, fd, u64::from(fd), 0, stats(1, 4096)));
    }
    pipeline.counters(snap);
    let report = storage_report(pipeline.storage_state());
    assert_eq!(report.procs.len(), 1);
    let parts = parts::split_report(&report);
    assert!(parts.len() > 1 && parts[1..].iter().all(|p| p.continued));
    let mut joined = StorageReport::default();
    for p in parts {
        parts::join_report(&mut joined, p.report, p.continued);
    }
    assert_eq!(joined, report);
}

#[test]
fn a_split_record_with_a_part_missing_is_corrupt() {
    let mut file = Vec::new();
    serde_json::to_writer(&mut file, &Item::Header(Header::default())).unwrap();
    file.push(b'\n');
    let part = Item::Counters { last: false, snapshot: Default::default(), more: true };
    let other = Item::Note { message: "x".into() };
    for i in [part, other] {
        serde_json::to_writer(&mut file, &i).unwrap();
        file.push(b'\n');
    }
    let (_, reader) = Reader::open(Cursor::new(&file)).expect("header");
    let items: Vec<_> = reader.collect();
    let e = items.last().unwrap().as_ref().unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("part of a split record"), "{e}");
}
