//! The audit at the end of the line: registration records with user and container, findings at
//! the end, an NDJSON audit log, tables for people. Everything else goes to the inner sink
//! (text or NDJSON), so `audit` and `report` show what `watch` shows.

use std::io::Write;

use serde_json::{json, Value};

use super::{json::registration, Lost, Output, Sink};
use crate::{
    audit::{counts, finding_record, identity::Resolver, Auditor, Finding, Posture, ProcessFacts, Severity},
    events::{access_names, Event},
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::Registration,
    units::human_bytes,
};

pub struct AuditSink<'a> {
    inner: Box<dyn Sink + 'a>,
    out: Box<dyn Write + 'a>,
    json: bool,
    /// Print each registration (audit); `report` prints only summaries and findings.
    events: bool,
    log: Option<Box<dyn Write + 'a>>,
    pub auditor: Auditor,
    resolver: Option<Resolver>,
    posture: Posture,
    host_markers: Vec<String>,
    started: std::time::Instant,
    /// A hook that sees registrations is attached (else "not traced", never "none seen").
    rdma_traced: bool,
    /// What this host cannot tell (`crate::untold`): the findings rest on the rest.
    untold: Vec<crate::untold::Untold>,
    /// Maps records' `ts_ns` to wall-clock time (live: from start; a replay: the recording's).
    anchor: Option<crate::clock::Anchor>,
    /// The findings, once the trace ended.
    pub findings: Vec<Finding>,
}

impl<'a> AuditSink<'a> {
    pub fn new(inner: Box<dyn Sink + 'a>, out: Box<dyn Write + 'a>, json: bool, posture: Posture) -> Self {
        Self {
            inner,
            out,
            json,
            events: true,
            log: None,
            auditor: Auditor::new(),
            resolver: None,
            posture,
            host_markers: Vec::new(),
            started: std::time::Instant::now(),
            rdma_traced: true,
            untold: Vec::new(),
            anchor: None,
            findings: Vec::new(),
        }
    }

    /// Records' times to wall-clock through a recording's anchor (a replay; None: a recording
    /// without one, whose records are stamped when written).
    pub fn anchored(mut self, anchor: Option<crate::clock::Anchor>) -> Self {
        self.anchor = anchor;
        self
    }

    /// Learns process facts live, at each process's first record.
    pub fn resolving(mut self, resolver: Resolver, host_markers: Vec<String>) -> Self {
        self.resolver = Some(resolver);
        self.host_markers = host_markers;
        self
    }

    pub fn host_markers(mut self, markers: Vec<String>) -> Self {
        self.host_markers = markers;
        self
    }

    pub fn log_to(mut self, log: Box<dyn Write + 'a>) -> Self {
        self.log = Some(log);
        self
    }

    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }

    /// The worst severity found (None: no finding).
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    fn write_record(&mut self, v: &Value, to_out: bool) {
        // Every record has a wall-clock time: when it happened (`ts_ns`), else when written.
        let mut v = v.clone();
        let at = v["ts_ns"].as_u64().zip(self.anchor).map(|(t, a)| a.unix_ms_of(t));
        if let Some(obj) = v.as_object_mut() {
            obj.entry("unix_ms").or_insert(json!(at.unwrap_or_else(crate::clock::unix_ms)));
        }
        let v = &v;
        if to_out && self.json {
            crate::stop::write_line(&mut self.out, &v.to_string());
        }
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "{v}");
            let _ = log.flush();
        }
    }

    fn line(&mut self, s: &str) {
        if !self.json {
            crate::stop::write_line(&mut self.out, s);
        }
    }

    fn registration_line(&self, reg: &Registration, verdict: Verdict, f: &ProcessFacts) -> String {
        format!(
            "+{:.3}s REG pid {} ({}) user {} container {} dev {} addr {:#x} len {} [{}] => {verdict}",
            self.started.elapsed().as_secs_f64(),
            f.pid,
            reg.ctx.comm,
            user(f),
            f.container.as_ref().map_or("-".into(), |c| c.short()),
            reg.device.as_deref().unwrap_or("?"),
            reg.addr,
            human_bytes(reg.length),
            access_names(reg.access).join("|"),
        )
    }

    fn tables(&self, agg: &Aggregator) -> String {
        let mut who = crate::term::table();
        who.set_header(["PID", "COMM", "USER", "CONTAINER", "VERDICT", "GPU BYTES", "HOST BYTES", "LIVE"]);
        for p in agg.summaries() {
            let f = self.auditor.facts_of(&Registration {
                ctx: crate::events::Context { pid: p.pid, comm: p.comm.clone(), ..Default::default() },
                ..Default::default()
            });
            let bytes = |v: Verdict| p.by_verdict.get(&v).map_or(0, |t| t.bytes);
            // A size ("2.0 MiB") is not split over two lines of a cell.
            let human_bytes = |n: u64| crate::term::glue(&human_bytes(n));
            who.add_row([
                p.pid.to_string(),
                crate::escape::field(&p.comm).into_owned(),
                crate::escape::field(&user(&f)).into_owned(),
                f.container.as_ref().map_or("-".into(), |c| c.short()),
                p.process_verdict.as_str().to_string(),
                human_bytes(bytes(Verdict::GpuPeermem) + bytes(Verdict::GpuDmabuf)),
                human_bytes(bytes(Verdict::Host)),
                human_bytes(p.live_bytes),
            ]);
        }
        let mut found = crate::term::table();
        found.set_header(["SEVERITY", "FINDING", "PROCESS", "SUMMARY"]);
        for f in &self.findings {
            let who = f.process.as_ref().map_or("(machine)".to_string(), |p| {
                let c = p.container.as_ref().map_or(String::new(), |c| format!("\n{}", c.short()));
                let (comm, name) =
                    (crate::escape::field(&p.comm), crate::escape::field(&user(p)).into_owned());
                format!("{} ({comm})\n{name}{c}", p.pid)
            });
            found.add_row([f.severity.as_str().to_string(), f.id.clone(), who, f.summary.clone()]);
        }
        let c = counts(&self.findings);
        let tally: Vec<String> = c.iter().filter(|(_, n)| **n > 0).map(|(s, n)| format!("{n} {s}")).collect();
        let tally = if tally.is_empty() { "none".to_string() } else { tally.join(", ") };
        // An empty table is a line, not a header over nothing.
        let who = if agg.is_empty() && !self.rdma_traced {
            format!("-- who registered what: {} --", super::RDMA_NOT_TRACED)
        } else if agg.is_empty() {
            "-- who registered what: no memory registrations seen --".to_string()
        } else {
            format!("-- who registered what --\n{}", crate::term::render(&who))
        };
        // "none" on a host that cannot tell memory types is no clean bill: said with the tally.
        let facts: Vec<&str> = self.untold.iter().map(|u| u.fact).collect();
        let tally = if facts.is_empty() {
            tally
        } else {
            format!("{tally}; cannot tell here: {} (see the lines at the start)", facts.join(", "))
        };
        if self.findings.is_empty() {
            return format!("{who}\n-- findings: {tally} --");
        }
        format!("{who}\n-- findings: {tally} --\n{}", crate::term::render(&found))
    }
}

fn user(f: &ProcessFacts) -> String {
    match &f.user {
        Some(u) => format!("{u}({})", f.uid),
        None => f.uid.to_string(),
    }
}

/// A registration as its audit record: `watch --json`'s, plus user, container and cgroup.
pub fn audit_registration(reg: &Registration, verdict: Verdict, f: &ProcessFacts) -> Value {
    let mut v = registration(reg, verdict);
    v["user"] = json!(f.user);
    v["container"] = json!(f.container);
    v["cgroup"] = json!(f.cgroup);
    v
}

impl Sink for AuditSink<'_> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.started = std::time::Instant::now();
        self.anchor = Some(crate::clock::Anchor::now());
        self.rdma_traced = crate::sink::metrics::rdma_traced(hooks);
        self.untold = crate::untold::untold(facts, hooks);
        self.inner.start(facts, hooks);
    }

    fn traced(&mut self, hooks: &[HookStatus]) {
        self.rdma_traced = crate::sink::metrics::rdma_traced(hooks);
        self.inner.traced(hooks);
    }

    fn raw(&mut self, ev: &Event) {
        let ctx = match ev {
            Event::Mr(rec) => Some(&rec.ctx),
            Event::Cuda(c) => Some(&c.ctx),
            Event::Storage(_) | Event::LibraryMapped(_) | Event::Exit(_) => None,
        };
        if let (Some(r), Some(ctx)) = (self.resolver.as_mut(), ctx) {
            let (facts, fresh) = r.resolve(ctx);
            if fresh {
                let facts = facts.clone();
                self.auditor.learn(facts);
            }
        }
        self.inner.raw(ev);
    }

    fn tick(&mut self, now_ns: u64) {
        self.inner.tick(now_ns);
    }

    fn flushed(&mut self) {
        self.inner.flushed();
    }

    fn emit(&mut self, out: &Output<'_>) {
        match *out {
            Output::Registered { reg, verdict } => self.registered(reg, verdict),
            Output::Summary { agg, lost, last } => self.summary(agg, lost, last),
            // Storage is not audited; a replayed recording's storage report is shown as
            // `report`'s storage section (the interim ones with --events).
            Output::StorageSummary { last, .. } if last || self.events => self.inner.emit(out),
            Output::StorageSummary { .. } => {}
            Output::Note(_) => self.inner.emit(out),
            Output::GpuIpc(ipc) => {
                self.auditor.gpu_imported(ipc);
                if self.events {
                    self.inner.emit(out);
                }
            }
            Output::P2pSummary { last, .. } if last || self.events => self.inner.emit(out),
            // Per-event lines only where events are shown (`audit`; `report` without --events
            // shows summaries and findings). cuFile and nvidia-fs calls are not audited.
            Output::Released { .. } | Output::GpuPin(_) | Output::GpuFreed { .. } if self.events => {
                self.inner.emit(out)
            }
            _ => {}
        }
    }
}

impl AuditSink<'_> {
    fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        self.auditor.registered(reg, verdict);
        let f = self.auditor.facts_of(reg);
        let rec = audit_registration(reg, verdict, &f);
        self.write_record(&rec, self.events);
        if self.events {
            let l = self.registration_line(reg, verdict, &f);
            self.line(&l);
        }
    }

    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool) {
        if !last {
            if self.events {
                self.inner.emit(&Output::Summary { agg, lost, last });
            }
            return;
        }
        self.inner.emit(&Output::Summary { agg, lost, last });
        self.findings = self.auditor.findings(&self.posture, &self.host_markers);
        let records: Vec<Value> = self.findings.iter().map(finding_record).collect();
        for r in &records {
            self.write_record(r, true);
        }
        let end = json!({ "event": "audit_summary", "findings": counts(&self.findings),
            "worst": self.worst(), "container_host_markers": self.host_markers, "untold": self.untold });
        self.write_record(&end, true);
        let t = self.tables(agg);
        self.line(&t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_tables_are_a_line_not_a_header_over_nothing() {
        let mut out = Vec::new();
        {
            let inner = Box::new(super::super::json::JsonSink::new(std::io::sink()));
            let mut s = AuditSink::new(inner, Box::new(&mut out), false, Posture::default());
            s.emit(&Output::Summary { agg: &Aggregator::new(), lost: &Lost::default(), last: true });
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("-- who registered what: no memory registrations seen --"), "{text}");
        assert!(!text.contains("CONTAINER"), "no header over no rows: {text}");
        if text.contains("-- findings: none --") {
            assert!(!text.contains("SEVERITY"), "{text}");
        }
    }
}
