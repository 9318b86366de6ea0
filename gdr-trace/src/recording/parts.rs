//! Bounded recording lines: the kernel's counters and the storage reports of a busy node grow
//! with its files and processes (a 5 s recording on a host of 570 processes had a 1.15 MB
//! report), while the reader takes lines of at most [`MAX_RECORDING_LINE`] bytes. The writer
//! splits such an item into parts of at most [`PART_BYTES`] each (`more`: another part
//! follows); the reader joins them back into the item the live line had.

use serde::Serialize;

use super::format::Item;
use crate::{counters::Counters, storage::aggregate::StorageReport};

/// What one part's elements may take (the line adds its tag and flags). A quarter of the
/// reader's line limit: one element (a file with a 4 KiB path) never comes near it.
pub const PART_BYTES: usize = crate::bounded::MAX_RECORDING_LINE / 4;

fn size<T: Serialize>(v: &T) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len() + 1)
}

/// Fills parts in order: a new part when the current one would go past the budget.
struct Parts<T> {
    parts: Vec<T>,
    used: usize,
}

impl<T: Default> Parts<T> {
    fn new() -> Self {
        Self { parts: vec![T::default()], used: 0 }
    }

    /// The part an element of `bytes` goes into.
    fn room(&mut self, bytes: usize) -> &mut T {
        if self.used > 0 && self.used + bytes > PART_BYTES {
            self.parts.push(T::default());
            self.used = 0;
        }
        self.used += bytes;
        self.parts.last_mut().expect("never empty")
    }
}

/// `snap` as parts that each fit a line; joined with [`join_snapshot`] they are `snap` again.
pub fn split_snapshot(snap: &Counters) -> Vec<Counters> {
    if size(snap) <= PART_BYTES {
        return vec![snap.clone()];
    }
    let mut p = Parts::<Counters>::new();
    macro_rules! spread {
        ($($path:ident).+) => {
            for x in &snap.$($path).+ {
                p.room(size(x)).$($path).+.push(x.clone());
            }
        };
    }
    spread!(storage.files);
    spread!(storage.fills);
    spread!(storage.uring_loose);
    spread!(storage.gone);
    spread!(storage.folded_growth);
    spread!(storage.gds_facts);
    spread!(p2p);
    spread!(peer_access);
    spread!(staged);
    spread!(bytes);
    let mut comms: Vec<_> = snap.storage.comms.iter().collect();
    comms.sort();
    for (pid, comm) in comms {
        p.room(comm.len() + 16).storage.comms.insert(*pid, comm.clone());
    }
    p.parts
}

/// Adds a later part of a split snapshot to the ones before it.
pub fn join_snapshot(into: &mut Counters, part: Counters) {
    let (s, t) = (&mut into.storage, part.storage);
    s.files.extend(t.files);
    s.fills.extend(t.fills);
    s.uring_loose.extend(t.uring_loose);
    s.gone.extend(t.gone);
    s.folded_growth.extend(t.folded_growth);
    s.gds_facts.extend(t.gds_facts);
    s.comms.extend(t.comms);
    into.p2p.extend(part.p2p);
    into.peer_access.extend(part.peer_access);
    into.staged.extend(part.staged);
    into.bytes.extend(part.bytes);
}

/// A part of a split storage report: `continued` when its first process is the last one of
/// the part before (a process with more files than a part holds), whose further files it has.
#[derive(Default)]
pub struct ReportPart {
    pub report: StorageReport,
    pub continued: bool,
}

/// `report` as parts that each fit a line; joined with [`join_report`] they are `report` again.
pub fn split_report(report: &StorageReport) -> Vec<ReportPart> {
    if size(report) <= PART_BYTES {
        return vec![ReportPart { report: report.clone(), continued: false }];
    }
    let mut p = Parts::<ReportPart>::new();
    for proc in &report.procs {
        let head = crate::storage::aggregate::ProcReport { files: vec![], ..proc.clone() };
        p.room(size(&head)).report.procs.push(head.clone());
        for f in &proc.files {
            let parts = p.parts.len();
            let part = p.room(size(f));
            if part.report.procs.is_empty() {
                // A new part: the process goes on in it.
                debug_assert!(parts > 0);
                part.continued = true;
                part.report
                    .procs
                    .push(crate::storage::aggregate::ProcReport { files: vec![], ..head.clone() });
            }
            part.report.procs.last_mut().expect("pushed").files.push(f.clone());
        }
    }
    p.parts
}

/// Adds a later part of a split storage report to the ones before it.
pub fn join_report(into: &mut StorageReport, part: StorageReport, continued: bool) {
    let mut procs = part.procs.into_iter();
    if continued {
        if let (Some(last), Some(next)) = (into.procs.last_mut(), procs.next()) {
            last.files.extend(next.files);
        }
    }
    into.procs.extend(procs);
}

/// The lines the kernel's counters are written as: one, or parts when too long for one line.
pub fn counter_lines(last: bool, snapshot: &Counters) -> Vec<Item> {
    let parts = split_snapshot(snapshot);
    let n = parts.len();
    let lines = parts.into_iter().enumerate();
    lines.map(|(i, snapshot)| Item::Counters { last, snapshot, more: i + 1 < n }).collect()
}

/// The lines a storage report is written as: one, or parts when too long for one line.
pub fn summary_lines(last: bool, report: &StorageReport) -> Vec<Item> {
    let parts = split_report(report);
    let n = parts.len();
    let lines = parts.into_iter().enumerate();
    lines
        .map(|(i, p)| Item::StorageSummary {
            last,
            report: p.report,
            more: i + 1 < n,
            continued: p.continued,
        })
        .collect()
}
