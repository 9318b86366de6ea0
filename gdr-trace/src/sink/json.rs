//! NDJSON: one object per line. Field names are stable (documented in README).

use std::io::Write;

use serde_json::{json, Value};

use super::{Lost, Sink};
use crate::{
    aggregate::Aggregator,
    classify::Verdict,
    correlate::{Registration, Release},
    events::access_names,
    loader::{HookStatus, KernelFacts},
};

pub fn registration(reg: &Registration, verdict: Verdict) -> Value {
    let c = &reg.ctx;
    let mut v = json!({
        "event": "mr_register",
        "id": reg.id,
        "pid": c.pid, "tid": c.tid, "comm": c.comm, "uid": c.uid,
        "cgroup_id": c.cgroup_id, "ts_ns": c.ts_ns,
        "addr": reg.addr, "length": reg.length, "iova": reg.iova,
        "access": reg.access, "access_flags": access_names(reg.access),
        "device": reg.device,
        "verdict": verdict,
        "sources": reg.sources,
    });
    if reg.failed {
        v["errno"] = json!(reg.errno);
    }
    v
}

pub fn release(rel: &Release, owner: Option<(u32, Verdict)>) -> Value {
    let c = &rel.ctx;
    json!({
        "event": "mr_release",
        "id": rel.registration,
        "pid": owner.map_or(c.pid, |o| o.0),
        "released_by_pid": c.pid,
        "tid": c.tid, "comm": c.comm, "uid": c.uid,
        "cgroup_id": c.cgroup_id, "ts_ns": c.ts_ns,
        "addr": rel.addr, "length": rel.length,
        "device": rel.device,
        "verdict": owner.map(|o| o.1),
        "sources": rel.sources,
    })
}

pub struct JsonSink<W: Write> {
    out: W,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        Self { out }
    }
    fn emit(&mut self, v: &Value) {
        // A closed pipe (`| head`) must not panic the tracer; the loop ends on Ctrl-C/duration.
        let _ = writeln!(self.out, "{v}");
        let _ = self.out.flush();
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.emit(&json!({ "event": "hooks", "kernel": facts, "hooks": hooks }));
    }
    fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        self.emit(&registration(reg, verdict));
    }
    fn released(&mut self, rel: &Release, owner: Option<(u32, Verdict)>) {
        self.emit(&release(rel, owner));
    }
    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool) {
        if !last {
            return;
        }
        for p in agg.summaries() {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            v["event"] = json!("summary");
            self.emit(&v);
        }
        self.emit(&json!({ "event": "lost", "total": lost.total(), "by_reason": lost }));
    }
    fn note(&mut self, msg: &str) {
        self.emit(&json!({ "event": "note", "message": msg }));
    }
}
