//! NDJSON: one object per line. Field names are stable (documented in README).

use std::io::Write;

use serde_json::{json, Value};

use super::{storage_json, Lost, Sink};
use crate::{
    aggregate::Aggregator,
    classify::Verdict,
    correlate::{GpuFreed, GpuPin, Registration, Release},
    events::{access_names, storage::NvfsIo},
    facts::{HookStatus, KernelFacts},
    storage::{aggregate::StorageReport, state::GdsIo},
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
    if let Some(fd) = reg.dmabuf_fd {
        v["dmabuf_fd"] = json!(fd);
        v["exporter"] = json!(reg.exporter);
    }
    if reg.peer.entered || reg.peer.client.is_some() {
        v["peer_client"] = json!(reg.peer.client);
        v["gpu_pages_pinned"] = json!(reg.peer.gpu_pages);
    }
    if let Some(va) = reg.gpu_va {
        v["gpu_va"] = json!(va);
    }
    v
}

pub fn gpu_pin(p: &GpuPin) -> Value {
    let c = &p.ctx;
    json!({
        "event": "gpu_pin",
        "caller": "gds-or-other",
        "pid": c.pid, "tid": c.tid, "comm": c.comm, "uid": c.uid,
        "cgroup_id": c.cgroup_id, "ts_ns": c.ts_ns,
        "function": p.hook, "gpu_va": p.gpu_va, "length": p.length, "ret": p.ret,
    })
}

pub fn gpu_freed(f: &GpuFreed, owner: Option<u32>) -> Value {
    let c = &f.ctx;
    json!({
        "event": "gpu_freed",
        "id": f.registration,
        "pid": owner.unwrap_or(c.pid),
        "freed_by_pid": c.pid, "comm": c.comm, "ts_ns": c.ts_ns,
        "sources": [f.source],
    })
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
    fn gpu_pin(&mut self, pin: &GpuPin) {
        self.emit(&gpu_pin(pin));
    }
    fn gpu_freed(&mut self, freed: &GpuFreed, owner: Option<u32>) {
        self.emit(&gpu_freed(freed, owner));
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
    fn gds_io(&mut self, io: &GdsIo) {
        self.emit(&storage_json::gds_io(io));
    }
    fn nvfs_io(&mut self, io: &NvfsIo, path: Option<&str>) {
        self.emit(&storage_json::nvfs_io(io, path));
    }
    fn storage_summary(&mut self, report: &StorageReport, last: bool) {
        for v in storage_json::summary(report, last) {
            self.emit(&v);
        }
    }
}
