//! Recordings: the decoded event stream as NDJSON, replayed through the same [`Pipeline`] as
//! live tracing (no BPF, no privilege).
//!
//! One object a line, tagged by `event`:
//! - `header` (line 1): `format` ([`FORMAT`]), tool `version`, `host`, `kernel` (the kernel facts
//!   of `watch --json`'s `hooks` record), `hooks` (each hook's status), `target_pid`, `posture`
//!   and `container_host_markers` (for the audit), `started_unix_ms`;
//! - `process`: what is known about a process (user, cgroup, container), written before its
//!   first record; again with `uses_gpu` whenever the live pipeline's knowledge of its GPU use
//!   changed (seen at summaries), so that replay ends with what live tracing ended with;
//! - `record`: one decoded ring-buffer record ([`MrRecord`], field for field, but `handle`: a
//!   per-recording id, never the kernel pointer; see `handles`);
//! - `tick`: the correlation clock ticked at `now_ns` (CLOCK_MONOTONIC, the records' clock),
//!   written while records may still be waiting for their other sources, so that replay
//!   closes them exactly where live tracing did;
//! - `note`: something the tracer told its user (the target exited, interrupted);
//! - `storage_summary`: the storage report (`last`: the final one) as live tracing built it, per
//!   process and file — its POSIX counts come from kernel maps, not from the record stream, so
//!   the report itself is what can be replayed (per-call `gds_io` / `nvfs_io` lines are not
//!   recorded);
//! - `end` (last line): `lost` records by reason, `records` written, `ended_unix_ms`.

use std::{
    cell::RefCell,
    collections::HashMap,
    io::{BufRead, Write},
    rc::Rc,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    audit::{identity::Resolver, Posture, ProcessFacts},
    events::MrRecord,
    pipeline::Pipeline,
    sink::{Lost, Sink},
    storage::aggregate::StorageReport,
};

mod handles;

pub const FORMAT: &str = "gdr-trace.recording/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: String,
    pub host: String,
    pub kernel: Value,
    pub hooks: Value,
    pub target_pid: Option<u32>,
    #[serde(default)]
    pub posture: Posture,
    #[serde(default)]
    pub container_host_markers: Vec<String>,
    pub started_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub lost: Lost,
    pub records: u64,
    pub ended_unix_ms: u64,
}

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Item {
    Header(Header),
    Process(ProcessFacts),
    Record(MrRecord),
    Tick { now_ns: u64 },
    Note { message: String },
    StorageSummary { last: bool, report: StorageReport },
    End(End),
}

#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("line {line}: {source}")]
    Io {
        line: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("the file is empty: not a gdr-trace recording")]
    Empty,
    #[error("line 1: not a gdr-trace recording (the first line is not its header: {0})")]
    NoHeader(String),
    #[error("line 1: recording format {0:?} is not supported (this gdr-trace reads {FORMAT})")]
    Format(String),
    #[error("line {line}: corrupt record: {reason}")]
    Corrupt { line: usize, reason: String },
    #[error("line {line}: truncated record (the file ends in the middle of it)")]
    Truncated { line: usize },
    #[error(
        "line {line}: the recording ends without its end record (cut short, or the recorder was killed)"
    )]
    NoEnd { line: usize },
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Reads a recording line by line; every error names its line.
pub struct Reader<R> {
    input: R,
    line: usize,
    ended: bool,
    done: bool,
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
                if let Some(f) = v.as_ref().and_then(|v| v["format"].as_str()).filter(|f| *f != FORMAT) {
                    return Err(RecordingError::Format(f.to_string()));
                }
                return Err(RecordingError::NoHeader(e.to_string()));
            }
        };
        if header.format != FORMAT {
            return Err(RecordingError::Format(header.format));
        }
        Ok((header, Self { input, line: 1, ended: false, done: false }))
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Item, RecordingError>;

    fn next(&mut self) -> Option<Self::Item> {
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
    let mut pipeline = Pipeline::new().with_gpu_use(Box::new(move |pid| probe.borrow().get(&pid).copied()));
    let mut out = Replayed { end: None, records: 0, error: None };
    let mut final_storage = None;
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
            Ok(Item::Note { message }) => sink.note(&message),
            Ok(Item::StorageSummary { last: false, report }) => sink.storage_summary(&report, false),
            // Shown where live tracing showed it: just before the final summary.
            Ok(Item::StorageSummary { last: true, report }) => final_storage = Some(report),
            Ok(Item::End(e)) => out.end = Some(e),
            Ok(Item::Header(_)) => {}
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    pipeline.finish(sink);
    pipeline.refresh_gpu_use();
    if let Some(report) = final_storage {
        sink.storage_summary(&report, true);
    }
    let lost = out.end.as_ref().map(|e| e.lost).unwrap_or_default();
    sink.summary(pipeline.aggregator(), &lost, true);
    out
}

/// Writes a recording from the live line: the header at start, process facts and records as
/// they come off the ring buffer, GPU-use updates at summaries, the end record last.
pub struct RecordingSink<W: Write> {
    out: W,
    target_pid: Option<u32>,
    posture: Posture,
    markers: Vec<String>,
    resolver: Resolver,
    /// GPU use last written per pid.
    written: HashMap<u32, ProcessFacts>,
    records: u64,
    /// Timestamp of the newest record (CLOCK_MONOTONIC ns).
    last_record_ns: u64,
    /// The first write error (the recording is then incomplete: the command fails).
    pub error: Option<std::io::Error>,
    /// Kernel pointers never reach the file: records carry per-recording ids.
    handles: handles::HandleIds,
}

impl<W: Write> RecordingSink<W> {
    pub fn new(
        out: W,
        target_pid: Option<u32>,
        posture: Posture,
        markers: Vec<String>,
        resolver: Resolver,
    ) -> Self {
        let written = HashMap::new();
        Self {
            out,
            target_pid,
            posture,
            markers,
            resolver,
            written,
            records: 0,
            last_record_ns: 0,
            error: None,
            handles: Default::default(),
        }
    }

    fn write(&mut self, item: &Item) {
        if self.error.is_some() {
            return;
        }
        let r = serde_json::to_writer(&mut self.out, item)
            .map_err(std::io::Error::from)
            .and_then(|_| self.out.write_all(b"\n"));
        if let Err(e) = r {
            self.error = Some(e);
        }
    }

    fn flush(&mut self) {
        if let (None, Err(e)) = (&self.error, self.out.flush()) {
            self.error = Some(e);
        }
    }
}

impl<W: Write> Sink for RecordingSink<W> {
    fn start(&mut self, facts: &crate::loader::KernelFacts, hooks: &[crate::loader::HookStatus]) {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let header = Header {
            format: FORMAT.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            host: host.trim().to_string(),
            kernel: serde_json::to_value(facts).unwrap_or_default(),
            hooks: serde_json::to_value(hooks).unwrap_or_default(),
            target_pid: self.target_pid,
            posture: self.posture.clone(),
            container_host_markers: self.markers.clone(),
            started_unix_ms: unix_ms(),
        };
        self.write(&Item::Header(header));
        self.flush();
    }

    fn raw(&mut self, rec: &MrRecord) {
        let (facts, fresh) = self.resolver.resolve(&rec.ctx);
        if fresh {
            let facts = facts.clone();
            self.written.insert(facts.pid, facts.clone());
            self.write(&Item::Process(facts));
        }
        self.records += 1;
        self.last_record_ns = self.last_record_ns.max(rec.ctx.ts_ns);
        let rec = self.handles.recorded(rec);
        self.write(&Item::Record(rec));
    }

    fn tick(&mut self, now_ns: u64) {
        // Only ticks that can still close something: within a few correlation windows of the
        // newest record (an idle trace writes none).
        if self.records > 0 && now_ns.saturating_sub(self.last_record_ns) < 4 * crate::correlate::WINDOW_NS {
            self.write(&Item::Tick { now_ns });
        }
    }

    fn registered(&mut self, _: &crate::correlate::Registration, _: crate::classify::Verdict) {}
    fn released(&mut self, _: &crate::correlate::Release, _: Option<(u32, crate::classify::Verdict)>) {}

    fn summary(&mut self, agg: &crate::aggregate::Aggregator, lost: &Lost, last: bool) {
        // What the live pipeline learned about GPU use since, so replay learns it at the same point.
        for p in agg.summaries() {
            if let Some(f) = self.written.get_mut(&p.pid).filter(|f| f.uses_gpu != p.uses_gpu) {
                f.uses_gpu = p.uses_gpu;
                let f = f.clone();
                self.write(&Item::Process(f));
            }
        }
        if last {
            let end = End { lost: *lost, records: self.records, ended_unix_ms: unix_ms() };
            self.write(&Item::End(end));
        }
        self.flush();
    }

    fn note(&mut self, msg: &str) {
        self.write(&Item::Note { message: msg.to_string() });
        self.flush();
    }

    fn storage_summary(&mut self, report: &StorageReport, last: bool) {
        // An empty interim report says nothing; the final one is kept even when empty.
        if last || !report.is_empty() {
            self.write(&Item::StorageSummary { last, report: report.clone() });
        }
    }
}

#[cfg(test)]
mod tests;
