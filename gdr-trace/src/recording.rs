//! Recordings: the decoded event stream as NDJSON, replayed through the same [`Pipeline`] as
//! live tracing (no BPF, no privilege).
//!
//! One object a line, tagged by `event`:
//! - `header` (line 1): `format` ([`FORMAT`]), tool `version`, `host`, `kernel` (the kernel facts
//!   of `watch --json`'s `hooks` record), `hooks` (each hook's status), `target_pid`, `posture`
//!   and `container_host_markers` (for the audit), `started_unix_ms` with the monotonic time
//!   read with it (`started_monotonic_ns`, the records' clock) and the `boot_id`;
//! - `process`: what is known about a process (user, cgroup, container), written before its
//!   first record; again with `uses_gpu` whenever the live pipeline's knowledge of its GPU use
//!   changed (seen at summaries), so that replay ends with what live tracing ended with;
//! - `record`: one decoded ring-buffer MR record ([`MrRecord`], field for field, but `handle`:
//!   a per-recording id, never the kernel pointer; see `handles`);
//! - `storage`: one decoded storage event (open, close, cuFile call, nvidia-fs call), as the
//!   live line completed it from /proc;
//! - `tick`: the correlation clock ticked at `now_ns` (CLOCK_MONOTONIC, the records' clock),
//!   written while records may still be waiting for their other sources, so that replay
//!   closes them exactly where live tracing did;
//! - `counters`: the kernel's storage counters (POSIX I/O, page-cache fills, io_uring) as read
//!   at a summary tick (`last`: the final one), so that replay folds them where live did;
//! - `note`: something the tracer told its user (the target exited, interrupted);
//! - `storage_summary`: the storage report as live tracing built it (`last`: the final one).
//!   Replay recomputes it from `storage` and `counters`; recordings made before those lines
//!   existed (same format, fewer kinds of line) are replayed from these reports instead.
//! - `end` (last line): `lost` records by reason, `records` written, `ended_unix_ms`.
//!
//! `counters` and `storage_summary` grow with a node's files and processes: one too long for a
//! line is written as parts (`more`: the next line goes on with it; `parts`), which the
//! reader joins, so that every line stays within [`crate::bounded::MAX_RECORDING_LINE`].

use std::{cell::RefCell, collections::HashMap, io::BufRead, rc::Rc};

use serde_json::Value;

use crate::{
    audit::ProcessFacts,
    events::Event,
    facts::PeermemMode,
    pipeline::Pipeline,
    sink::{Output, Sink},
};

mod addrs;
#[doc(hidden)]
#[cfg(any(test, feature = "testkit"))]
pub mod busy;
mod error;
mod format;
mod handles;
pub mod parts;
mod sink;

pub use error::RecordingError;
pub use format::{End, Header, Item, FORMAT, FORMATS_READ};

pub use sink::RecordingSink;

/// Reads a recording line by line; every error names its line.
pub struct Reader<R> {
    input: R,
    line: usize,
    ended: bool,
    done: bool,
    /// nvidia-peermem's mode as the live trace read it (names the peer clients on replay).
    peermem: Option<PeermemMode>,
    /// Whether the live trace could see I/O memory mapped into the GPU (`queues::gin`).
    io_mapping_visible: bool,
}

impl<R: BufRead> Reader<R> {
    /// Reads and checks the header.
    pub fn open(mut input: R) -> Result<(Header, Self), RecordingError> {
        let mut first = String::new();
        let n = crate::bounded::read_line(&mut input, &mut first, crate::bounded::MAX_RECORDING_LINE)
            .map_err(|source| RecordingError::Io { line: 1, source })?;
        if n == 0 {
            return Err(RecordingError::Empty);
        }
        let header = match serde_json::from_str::<Item>(&first) {
            Ok(Item::Header(h)) => h,
            Ok(other) => {
                return Err(RecordingError::NoHeader(format!("{other:?}").chars().take(80).collect()))
            }
            Err(e) => {
                // An unsupported format is worth saying as such, even if the rest doesn't parse.
                let v: Option<Value> = serde_json::from_str(&first).ok();
                if let Some(f) =
                    v.as_ref().and_then(|v| v["format"].as_str()).filter(|f| !FORMATS_READ.contains(f))
                {
                    return Err(RecordingError::Format(f.to_string()));
                }
                return Err(RecordingError::NoHeader(e.to_string()));
            }
        };
        if !FORMATS_READ.contains(&header.format.as_str()) {
            return Err(RecordingError::Format(header.format));
        }
        let peermem = serde_json::from_value(header.kernel["peermem"]["mode"].clone()).ok();
        let io_mapping_visible = crate::queues::io_mapping_visible(&header.hook_statuses());
        Ok((header, Self { input, line: 1, ended: false, done: false, peermem, io_mapping_visible }))
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Item, RecordingError>;

    /// The next item, its parts joined (`parts`): memory stays within what the recorder held.
    fn next(&mut self) -> Option<Self::Item> {
        let mut item = self.next_line()?;
        loop {
            let more = match &item {
                Ok(Item::Counters { more, .. } | Item::StorageSummary { more, .. }) => *more,
                _ => false,
            };
            if !more {
                return Some(item);
            }
            let line = self.line + 1;
            let next = match self.next_line() {
                Some(Ok(next)) => next,
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    self.done = true;
                    return Some(Err(RecordingError::NoEnd { line: self.line }));
                }
            };
            let Ok(whole) = &mut item else { unreachable!("only Ok items have more") };
            match (whole, next) {
                (
                    Item::Counters { last, snapshot, more },
                    Item::Counters { last: l, snapshot: part, more: m },
                ) if *last == l => {
                    parts::join_snapshot(snapshot, part);
                    *more = m;
                }
                (
                    Item::StorageSummary { last, report, more, .. },
                    Item::StorageSummary { last: l, report: part, more: m, continued },
                ) if *last == l => {
                    parts::join_report(report, part, continued);
                    *more = m;
                }
                _ => {
                    self.done = true;
                    let reason = "a part of a split record is missing (another kind of record follows it)";
                    return Some(Err(RecordingError::Corrupt { line, reason: reason.into() }));
                }
            }
        }
    }
}

impl<R: BufRead> Reader<R> {
    fn next_line(&mut self) -> Option<Result<Item, RecordingError>> {
        if self.done {
            return None;
        }
        let mut text = String::new();
        let line = self.line + 1;
        let fail = |this: &mut Self, e| {
            this.done = true;
            Some(Err(e))
        };
        match crate::bounded::read_line(&mut self.input, &mut text, crate::bounded::MAX_RECORDING_LINE) {
            Err(source) => return fail(self, RecordingError::Io { line, source }),
            Ok(0) if self.ended => return None,
            Ok(0) => return fail(self, RecordingError::NoEnd { line: self.line }),
            Ok(_) => self.line = line,
        }
        if self.ended {
            return fail(
                self,
                RecordingError::Corrupt { line, reason: "a record after the end record".into() },
            );
        }
        let complete = text.ends_with('\n');
        match serde_json::from_str::<Item>(&text) {
            Ok(Item::Header(_)) => {
                fail(self, RecordingError::Corrupt { line, reason: "a second header".into() })
            }
            Ok(item) => {
                self.ended = matches!(item, Item::End(_));
                Some(Ok(item))
            }
            Err(_) if !complete => fail(self, RecordingError::Truncated { line }),
            Err(e) => {
                // serde's own "at line 1 column N" is about the record, not the file.
                let text = e.to_string();
                let what = text.rsplit_once(" at line ").map_or(text.as_str(), |(w, _)| w);
                let reason = format!("{what} (column {})", e.column());
                fail(self, RecordingError::Corrupt { line, reason })
            }
        }
    }
}

/// How a replay went: the end record (None when the file was cut short) and the first error.
pub struct Replayed {
    pub end: Option<End>,
    pub records: u64,
    pub error: Option<RecordingError>,
}

/// Feeds a recording through `Pipeline` into `sink`, exactly as live tracing does, then the
/// final summary. Stops at the first bad line; what came before it is still summarised.
/// `on_facts` sees each `process` record (the audit learns users and containers from it).
pub fn replay<R: BufRead, S: Sink>(
    reader: Reader<R>,
    sink: &mut S,
    mut on_facts: impl FnMut(&mut S, &ProcessFacts),
) -> Replayed {
    let gpu: Rc<RefCell<HashMap<u32, bool>>> = Rc::default();
    let probe = gpu.clone();
    let mut pipeline = Pipeline::new()
        .with_peermem(reader.peermem)
        .with_io_mapping_visible(reader.io_mapping_visible)
        .with_gpu_use(Box::new(move |pid| probe.borrow().get(&pid).copied()));
    let mut out = Replayed { end: None, records: 0, error: None };
    let mut final_storage = None;
    let mut final_counters = None;
    // Recordings with counters replay storage through the pipeline; older ones (no counters)
    // show the storage reports live tracing built.
    let mut has_counters = false;
    for item in reader {
        match item {
            Ok(Item::Process(f)) => {
                if let Some(uses) = f.uses_gpu {
                    gpu.borrow_mut().insert(f.pid, uses);
                }
                on_facts(sink, &f);
            }
            Ok(Item::Record(r)) => {
                out.records += 1;
                pipeline.record(r, sink);
            }
            Ok(Item::Tick { now_ns }) => pipeline.tick(now_ns, sink),
            Ok(Item::Flush) => pipeline.finish(sink),
            Ok(Item::Storage { ev }) => pipeline.push(Event::Storage(ev), sink),
            Ok(Item::Cuda { ev }) => pipeline.push(Event::Cuda(ev), sink),
            Ok(Item::Exit { ctx }) => pipeline.push(Event::Exit(ctx), sink),
            Ok(Item::Counters { last: false, snapshot, .. }) => {
                has_counters = true;
                // The live line's own interim tick (exits, archiving, staged copies, summaries):
                // one path for both. What was lost so far is known only at the end.
                pipeline.summary_tick(snapshot, &crate::sink::Lost::default(), false, sink);
            }
            Ok(Item::Counters { last: true, snapshot, .. }) => {
                has_counters = true;
                final_counters = Some(snapshot);
            }
            Ok(Item::StorageSummary { .. }) if has_counters => {}
            Ok(Item::Note { message }) => sink.emit(&Output::Note(&message)),
            Ok(Item::StorageSummary { last: false, report, .. }) => {
                sink.emit(&Output::StorageSummary { report: &report, last: false })
            }
            // Shown where live tracing showed it: just before the final summary.
            Ok(Item::StorageSummary { last: true, report, .. }) => final_storage = Some(report),
            Ok(Item::End(e)) => out.end = Some(e),
            Ok(Item::Header(_)) => {}
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    pipeline.finish(sink);
    let lost = out.end.as_ref().map(|e| e.lost).unwrap_or_default();
    if let Some(counters) = final_counters {
        // The live line's last summary tick, with the counters it read.
        pipeline.summary_tick(counters, &lost, true, sink);
        return out;
    }
    pipeline.refresh_gpu_use();
    if let Some(report) = final_storage {
        sink.emit(&Output::StorageSummary { report: &report, last: true });
    }
    sink.emit(&Output::Summary { agg: pipeline.aggregator(), lost: &lost, last: true });
    out
}

#[cfg(test)]
mod parts_tests;
#[cfg(test)]
mod storage_tests;
#[cfg(test)]
mod tests;
