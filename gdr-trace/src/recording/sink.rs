//! The recording sink: the live line's raw tap (decoded events, storage included; the
//! correlation clock; the kernel's counters at each summary tick) and what it learned, as
//! recording lines.

use std::{collections::HashMap, io::Write};

use super::format::{End, Header, Item};
use crate::clock::unix_ms;
use crate::{
    audit::{identity::Resolver, Posture, ProcessFacts},
    events::Event,
    facts::{HookStatus, KernelFacts},
    sink::{Output, Sink},
};

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
    /// The newest exit seen: ticks until the pipeline dropped the process are kept too.
    last_exit_ns: Option<u64>,
    /// The first write error (the recording is then incomplete: the command fails).
    pub error: Option<std::io::Error>,
    /// Kernel pointers never reach the file: records carry per-recording ids.
    handles: super::handles::HandleIds,
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
            last_exit_ns: None,
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

    /// Writes a process's facts the first time one of its records comes.
    fn process_facts(&mut self, ctx: &crate::events::Context) {
        let (facts, fresh) = self.resolver.resolve(ctx);
        if fresh {
            let facts = facts.clone();
            self.written.insert(facts.pid, facts.clone());
            self.write(&Item::Process(facts));
        }
    }
}

impl<W: Write> Sink for RecordingSink<W> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        let anchor = crate::clock::Anchor::now();
        let header = Header {
            host: crate::clock::hostname(),
            kernel: serde_json::to_value(facts).unwrap_or_default(),
            hooks: serde_json::to_value(hooks).unwrap_or_default(),
            target_pid: self.target_pid,
            posture: self.posture.clone(),
            container_host_markers: self.markers.clone(),
            started_unix_ms: anchor.unix_ms,
            started_monotonic_ns: anchor.monotonic_ns,
            boot_id: crate::clock::boot_id(),
            ..Default::default()
        };
        self.write(&Item::Header(header));
        self.flush();
    }

    fn raw(&mut self, ev: &Event) {
        let rec = match ev {
            Event::Mr(rec) => rec,
            Event::Storage(s) => {
                let ev = self.handles.storage(s);
                return self.write(&Item::Storage { ev });
            }
            Event::Exit(ctx) => {
                self.last_exit_ns = Some(ctx.ts_ns.max(self.last_exit_ns.unwrap_or(0)));
                return self.write(&Item::Exit { ctx: ctx.clone() });
            }
            // Which processes mapped libraries says nothing a replay needs.
            Event::LibraryMapped(_) => return,
            Event::Cuda(c) => {
                // Process facts first: the audit of a replay needs the importer's user.
                self.process_facts(&c.ctx);
                let ev = self.handles.cuda(c);
                return self.write(&Item::Cuda { ev });
            }
        };
        self.process_facts(&rec.ctx);
        self.records += 1;
        self.last_record_ns = self.last_record_ns.max(rec.ctx.ts_ns);
        let rec = self.handles.recorded(rec);
        self.write(&Item::Record(rec));
    }

    fn tick(&mut self, now_ns: u64) {
        // Only ticks that can still close something: within a few correlation windows of the
        // newest record (an idle trace writes none).
        let window = 4 * crate::mr::correlate::WINDOW_NS;
        // ...and those up to where the pipeline dropped an exited process (replay drops it there).
        let exit = self
            .last_exit_ns
            .is_some_and(|t| now_ns.saturating_sub(t) < crate::pipeline::EXIT_LINGER_NS + window);
        if exit || (self.records > 0 && now_ns.saturating_sub(self.last_record_ns) < window) {
            self.write(&Item::Tick { now_ns });
        }
    }

    fn flushed(&mut self) {
        self.write(&Item::Flush);
    }

    fn counters(&mut self, counters: &crate::counters::Counters, last: bool) {
        let counters = self.handles.counters(counters);
        for line in super::parts::counter_lines(last, &counters) {
            self.write(&line);
        }
    }

    fn emit(&mut self, out: &Output<'_>) {
        match *out {
            Output::Summary { agg, lost, last } => {
                // What the live pipeline learned about GPU use since, so replay learns it at the
                // same point.
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
            Output::Note(msg) => {
                self.write(&Item::Note { message: msg.to_string() });
                self.flush();
            }
            // An empty interim report says nothing; the final one is kept even when empty.
            Output::StorageSummary { report, last } if last || !report.is_empty() => {
                for line in super::parts::summary_lines(last, report) {
                    self.write(&line);
                }
            }
            _ => {}
        }
    }
}
