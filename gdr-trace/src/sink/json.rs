//! NDJSON: one object per line. Field names are stable (documented in docs/usage.md).

use std::io::Write;

use serde_json::{json, Value};

use super::{queue_view, storage_json, Output, Sink};
use crate::{
    events::access_names,
    facts::{HookStatus, KernelFacts},
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
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
    if reg.peer.entered || reg.peer.claimed {
        v["peer_client"] = json!(reg.peer.client);
        v["peer_claim"] = json!(reg.peer.claim);
        v["trial_pins"] = json!(reg.peer.trial_pins);
        v["gpu_pages_pinned"] = json!(reg.peer.gpu_pages);
    }
    if let Some(va) = reg.gpu_va {
        v["gpu_va"] = json!(va);
    }
    if let Some(how) = reg.host_alloc {
        v["host_alloc"] = json!(how);
    }
    if let Some(o) = reg.host_origin {
        v["host_origin"] = json!(o.origin);
        v["origin_evidence"] = json!(o.evidence);
    }
    v
}

/// An import of GPU memory from another process.
pub fn gpu_ipc(ipc: &crate::p2p::GpuIpc) -> Value {
    let c = &ipc.ctx;
    json!({
        "event": "gpu_ipc",
        "pid": c.pid, "tid": c.tid, "uid": c.uid, "comm": c.comm,
        "cgroup_id": c.cgroup_id, "ts_ns": c.ts_ns,
        "op": ipc.op, "length": ipc.length,
        "exporter_pid": ipc.exporter_pid, "exporter_uid": ipc.exporter_uid,
        "ret": ipc.ret,
    })
}

/// One `p2p_summary` object per process.
pub fn p2p_summary(report: &crate::p2p::P2pReport, last: bool) -> impl Iterator<Item = Value> + '_ {
    report.processes.iter().map(move |p| {
        json!({
            "event": "p2p_summary", "final": last,
            "pid": p.pid, "comm": p.comm, "pairs": p.pairs, "peer_access": p.peer_access,
        })
    })
}

pub fn gpu_pin(p: &GpuPin) -> Value {
    let c = &p.ctx;
    json!({
        "event": "gpu_pin",
        "caller": "gds-or-other",
        "pid": c.pid, "tid": c.tid, "comm": c.comm, "uid": c.uid,
        "cgroup_id": c.cgroup_id, "ts_ns": c.ts_ns,
        "function": p.source.function(), "gpu_va": p.gpu_va, "length": p.length, "ret": p.ret,
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
    let mut v = json!({
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
    });
    if let Some(c) = rel.wr_bytes.filter(|_| rel.lkey.is_some()) {
        v["bytes_out"] = json!(c.bytes_out);
        v["bytes_in"] = json!(c.bytes_in);
        v["ops"] = json!(c.ops);
    } else if rel.lkey.is_some() {
        // Released through ibv_dereg_mr and no work request counted against it.
        v["bytes_out"] = json!(0);
        v["bytes_in"] = json!(0);
        v["ops"] = json!(0);
    }
    if let Some(o) = rel.host_origin {
        v["host_origin"] = json!(o.origin);
        v["origin_evidence"] = json!(o.evidence);
    }
    v
}

/// What byte counting cannot see, said with every summary that has bytes.
pub const BYTES_NOT_SEEN: &str = "the target side of one-sided RDMA writes and reads (the peer posts nothing: \
    trace it too); WQEs a library writes to the NIC itself (UCX rc_mlx5/dc_mlx5); ibv_wr_* on QPs made extended \
    before the trace when no process makes one after it starts";

/// What a summary says of bytes with `--no-bytes`.
pub const BYTES_NOT_TRACED: &str = "not traced (--no-bytes)";

pub struct JsonSink<W: Write> {
    out: W,
    /// Live streams: the wall-clock anchor of the header; every record then carries `unix_ms`.
    anchor: Option<crate::clock::Anchor>,
    /// A live stream (records without `ts_ns` are stamped when written), not a replay.
    live: bool,
    /// `--no-bytes`: summaries say bytes were not traced instead of carrying none.
    bytes_left_out: bool,
    /// `--files`: a `file_io_summary` for every process's files, not only cuFile/nvidia-fs users'.
    files: bool,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W) -> Self {
        Self { out, anchor: None, live: false, bytes_left_out: false, files: false }
    }

    /// A stream whose records' times map to wall-clock through `anchor` (a replay: the
    /// recording's own).
    pub fn anchored(out: W, anchor: crate::clock::Anchor) -> Self {
        Self { out, anchor: Some(anchor), live: false, bytes_left_out: false, files: false }
    }

    /// Every process's files (`--files`), not only those of cuFile/nvidia-fs users.
    pub fn files(mut self, files: bool) -> Self {
        self.files = files;
        self
    }

    fn write_value(&mut self, v: &Value) {
        let mut v = v.clone();
        if let (Some(a), Some(obj)) = (self.anchor, v.as_object_mut()) {
            // When it happened where the record says (`ts_ns`), else when it was written (a
            // replay writes its summaries now: the wall clock, not the recording's anchor).
            let now = || match self.live {
                true => a.unix_ms_of(crate::clock::monotonic_ns()),
                false => crate::clock::unix_ms(),
            };
            let at = obj.get("ts_ns").and_then(Value::as_u64).map(|t| a.unix_ms_of(t)).unwrap_or_else(now);
            obj.entry("unix_ms").or_insert(json!(at));
        }
        // A closed pipe (`| head`) ends the trace cleanly (stop::write_line), never a panic.
        crate::stop::write_line(&mut self.out, &v.to_string());
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        // The stream's header first: schema, version, host, boot, wall-clock anchor.
        let anchor = crate::clock::Anchor::now();
        (self.anchor, self.live) = (Some(anchor), true);
        self.traced(hooks);
        self.write_value(&crate::clock::header(&anchor));
        // Which hook families trace: off is "not traced", never "none seen".
        let families: serde_json::Map<String, Value> = crate::sink::metrics::hook_families(hooks)
            .into_iter()
            .map(|(f, on)| (f.to_string(), json!(on)))
            .collect();
        // Which facts each family tells here, and a line for each that cannot be told.
        let mut told = serde_json::Map::new();
        for (f, state) in crate::untold::states(facts, hooks) {
            let family = told.entry(f.family).or_insert_with(|| json!({}));
            family[f.name] = json!(state);
        }
        let untold = crate::untold::untold(facts, hooks);
        self.write_value(&json!({
            "event": "hooks", "kernel": facts, "hooks": hooks, "families": families, "facts": told, "untold": untold,
        }));
    }
    fn traced(&mut self, hooks: &[HookStatus]) {
        self.bytes_left_out = crate::facts::bytes_left_out(hooks);
    }
    fn emit(&mut self, out: &Output<'_>) {
        match *out {
            Output::Registered { reg, verdict } => self.write_value(&registration(reg, verdict)),
            Output::Released { rel, owner } => {
                let mut v = release(rel, owner);
                if self.bytes_left_out {
                    // Not traced: no figure at all, rather than a 0 that reads as "none moved".
                    if let Some(o) = v.as_object_mut() {
                        for k in ["bytes_out", "bytes_in", "ops"] {
                            o.remove(k);
                        }
                    }
                }
                self.write_value(&v)
            }
            Output::GpuPin(pin) => self.write_value(&gpu_pin(pin)),
            Output::GpuFreed { freed, owner } => self.write_value(&gpu_freed(freed, owner)),
            Output::Gds(io) => self.write_value(&storage_json::gds_io(io)),
            Output::Nvfs { io, path } => self.write_value(&storage_json::nvfs_io(io, path)),
            // Summaries once, at the end: NDJSON readers want totals, not snapshots.
            Output::Summary { last: false, .. } => {}
            Output::Summary { agg, lost, last: true } => {
                // MRs still registered: what their work requests moved so far.
                for (pid, id, m) in &agg.live_mr_bytes {
                    self.write_value(&json!({ "event": "mr_bytes", "id": id, "pid": pid,
                        "bytes_out": m.out, "bytes_in": m.inn, "ops": m.ops }));
                }
                for p in agg.summaries() {
                    let mut v = serde_json::to_value(p).unwrap_or_default();
                    v["event"] = json!("summary");
                    if self.bytes_left_out {
                        v["bytes_by_verdict"] = Value::Null;
                        v["bytes_not_seen"] = json!(BYTES_NOT_TRACED);
                    } else if !p.bytes_by_verdict.is_empty() {
                        v["gdr_byte_ratio"] = json!(crate::mr::bytes::gdr_ratio(&p.bytes_by_verdict));
                        v["bytes_not_seen"] = json!(BYTES_NOT_SEEN);
                    }
                    self.write_value(&v);
                }
                let mut v = json!({ "event": "lost", "total": lost.total(), "by_reason": lost });
                if let Some(d) = lost.delivered {
                    v["delivered"] = json!(d);
                }
                let tenants: Vec<Value> = lost
                    .by_tenant
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(k, n)| json!({ "tenant": crate::sink::tenant_label(*k), "lost": n }))
                    .collect();
                if !tenants.is_empty() {
                    v["by_tenant"] = json!(tenants);
                }
                self.write_value(&v);
            }
            Output::StorageSummary { report, last } => {
                for v in storage_json::summary(report, last, self.files) {
                    self.write_value(&v);
                }
            }
            Output::GpuIpc(ipc) => self.write_value(&gpu_ipc(ipc)),
            Output::P2pSummary { report, last } => {
                for v in p2p_summary(report, last) {
                    self.write_value(&v);
                }
            }
            Output::QueuePin(pin) => self.write_value(&queue_view::pin_json(pin)),
            Output::QueueRelease(rel) => self.write_value(&queue_view::release_json(rel)),
            Output::QueueSummary { last: false, .. } => {}
            Output::QueueSummary { report, last: true } => {
                for v in queue_view::summary_json(report) {
                    self.write_value(&v);
                }
            }
            Output::Note(msg) => self.write_value(&json!({ "event": "note", "message": msg })),
            Output::Exited { .. } => {}
            Output::LibraryCopy(c) => {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["event"] = json!("library_copy");
                self.write_value(&v);
            }
        }
    }
}
