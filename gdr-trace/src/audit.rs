//! Security audit: who exposes GPU memory to NICs, with what access, from which container, and
//! whether the machine's peer-to-peer posture suits several tenants.
//!
//! Pure analysis over what the pipeline delivers (registrations with their verdicts) plus
//! process facts ([`identity`]: user, cgroup, container) and the machine posture ([`posture`]).
//! [`crate::sink::audit::AuditSink`] puts it at the end of the line for `audit` and `report`; `serve` counts
//! its findings.

pub mod cgroups;
pub mod container;
pub mod identity;
pub mod posture;
mod severity;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{json, Value};

pub use container::Container;
pub use identity::ProcessFacts;
pub use posture::Posture;
pub use severity::Severity;

use crate::{events::access_names, mr::classify::Verdict, mr::correlate::Registration};

/// One finding: what, how bad, about whom, and the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub summary: String,
    /// The process it is about (None: about the machine).
    pub process: Option<ProcessFacts>,
    /// Registrations (id, addr, length, verdict, access flags, device) or sysfs values.
    pub evidence: Vec<Value>,
    pub hint: Option<String>,
}

/// The access bits that let a remote peer write: REMOTE_WRITE, REMOTE_ATOMIC.
pub const REMOTE_WRITE_BITS: u32 = (1 << 1) | (1 << 3);
/// Evidence kept per finding; the count says how many there were in all.
const EVIDENCE_CAP: usize = 16;

#[derive(Debug, Default)]
struct Group {
    count: u64,
    bytes: u64,
    flags: BTreeSet<String>,
    evidence: Vec<Value>,
}

impl Group {
    fn add(&mut self, reg: &Registration, verdict: Verdict) {
        self.count += 1;
        self.bytes += reg.length;
        self.flags.extend(access_names(reg.access & REMOTE_WRITE_BITS));
        if self.evidence.len() < EVIDENCE_CAP {
            self.evidence.push(json!({
                "id": reg.id, "addr": reg.addr, "length": reg.length, "verdict": verdict,
                "access_flags": access_names(reg.access), "device": reg.device, "ts_ns": reg.ctx.ts_ns,
            }));
        }
    }
}

/// Collects registrations and process facts; rates them into findings at the end.
#[derive(Debug, Default)]
pub struct Auditor {
    facts: HashMap<u32, ProcessFacts>,
    /// GPU memory registered with remote write access, per pid.
    gpu_remote: BTreeMap<u32, Group>,
    /// GPU memory registered, per pid.
    gpu: BTreeMap<u32, Group>,
    /// Any memory registered successfully, per pid.
    any: BTreeMap<u32, Group>,
    /// Imports of GPU memory exported by a process of another uid, per importing pid.
    cross_uid_imports: BTreeMap<u32, Vec<Value>>,
    /// Exited processes whose evidence is kept, oldest first (at most [`MAX_EXITED`]).
    exited: std::collections::VecDeque<u32>,
    /// Exited processes whose evidence was dropped past that bound.
    pub exited_dropped: u64,
}

/// Exited processes whose facts and evidence [`Auditor::forget`] keeps for findings (`serve`
/// runs for weeks on a node that starts thousands of processes an hour); older ones go.
pub const MAX_EXITED: usize = 256;

impl Auditor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records (or updates) what is known about a process.
    pub fn learn(&mut self, facts: ProcessFacts) {
        self.facts.insert(facts.pid, facts);
    }

    /// The facts of a pid (learned, or the record's own context when nothing was learned).
    pub fn facts_of(&self, reg: &Registration) -> ProcessFacts {
        self.facts.get(&reg.ctx.pid).cloned().unwrap_or_else(|| ProcessFacts {
            pid: reg.ctx.pid,
            comm: reg.ctx.comm.clone(),
            uid: reg.ctx.uid,
            cgroup_id: reg.ctx.cgroup_id,
            ..Default::default()
        })
    }

    pub fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        if matches!(verdict, Verdict::Failed | Verdict::Probe) {
            return;
        }
        let pid = reg.ctx.pid;
        if !self.facts.contains_key(&pid) {
            let f = self.facts_of(reg);
            self.facts.insert(pid, f);
        }
        self.any.entry(pid).or_default().add(reg, verdict);
        if verdict.is_gpu() {
            self.gpu.entry(pid).or_default().add(reg, verdict);
            if reg.access & REMOTE_WRITE_BITS != 0 {
                self.gpu_remote.entry(pid).or_default().add(reg, verdict);
            }
        }
    }

    /// An import of GPU memory from another process: kept when the exporter ran as another user.
    pub fn gpu_imported(&mut self, ipc: &crate::p2p::GpuIpc) {
        let (Some(exporter), Some(exporter_uid)) = (ipc.exporter_pid, ipc.exporter_uid) else { return };
        if ipc.ret != 0 || exporter_uid == ipc.ctx.uid {
            return;
        }
        let pid = ipc.ctx.pid;
        self.facts.entry(pid).or_insert_with(|| ProcessFacts {
            pid,
            comm: ipc.ctx.comm.clone(),
            uid: ipc.ctx.uid,
            cgroup_id: ipc.ctx.cgroup_id,
            ..Default::default()
        });
        let ev = self.cross_uid_imports.entry(pid).or_default();
        if ev.len() < EVIDENCE_CAP {
            ev.push(json!({
                "op": ipc.op, "length": ipc.length, "exporter_pid": exporter,
                "exporter_uid": exporter_uid, "exporter_comm": ipc.exporter_comm, "ts_ns": ipc.ctx.ts_ns,
            }));
        }
    }

    /// A process ended: its facts go unless a finding's evidence names it; those stay for the
    /// newest [`MAX_EXITED`] exited processes, and the oldest go past that (counted).
    pub fn forget(&mut self, pid: u32) {
        let evidence = self.any.contains_key(&pid) || self.cross_uid_imports.contains_key(&pid);
        if !evidence {
            self.facts.remove(&pid);
            return;
        }
        self.exited.retain(|p| *p != pid);
        self.exited.push_back(pid);
        while self.exited.len() > MAX_EXITED {
            let Some(old) = self.exited.pop_front() else { break };
            self.facts.remove(&old);
            self.any.remove(&old);
            self.gpu.remove(&old);
            self.gpu_remote.remove(&old);
            self.cross_uid_imports.remove(&old);
            self.exited_dropped += 1;
        }
    }

    /// Processes whose facts are held.
    pub fn known(&self) -> usize {
        self.facts.len()
    }

    /// Tenants (uid, container or pod) that exposed GPU memory, with their pids.
    fn gpu_tenants(&self) -> BTreeMap<(u32, Option<Container>), Vec<u32>> {
        let mut out: BTreeMap<(u32, Option<Container>), Vec<u32>> = BTreeMap::new();
        for pid in self.gpu.keys() {
            let f = &self.facts[pid];
            out.entry((f.uid, f.container.clone())).or_default().push(*pid);
        }
        out
    }

    /// Every finding, rated. `host_markers`: signs that the machine runs containers.
    pub fn findings(&self, posture: &Posture, host_markers: &[String]) -> Vec<Finding> {
        let tenants = self.gpu_tenants();
        let uids: BTreeSet<u32> = tenants.keys().map(|(u, _)| *u).collect();
        let multi = uids.len() > 1 || tenants.len() > 1;
        let mut out = Vec::new();
        for (pid, g) in &self.gpu_remote {
            let flags: Vec<&str> = g.flags.iter().map(String::as_str).collect();
            out.push(Finding {
                id: "gpu-remote-write".into(),
                severity: if multi { Severity::High } else { Severity::Medium },
                summary: format!(
                    "GPU memory registered with {}: a remote peer can write into it ({} registration(s), {})",
                    flags.join("|"),
                    g.count,
                    crate::units::human_bytes(g.bytes)
                ),
                process: Some(self.facts[pid].clone()),
                evidence: g.evidence.clone(),
                hint: Some(
                    "expected for NCCL's receive buffers; for anything else register GPU memory \
                     without remote write, and keep such jobs off machines shared with other tenants"
                        .into(),
                ),
            });
        }
        if multi {
            let evidence = tenants
                .iter()
                .map(|((uid, c), pids)| {
                    let bytes: u64 = pids.iter().map(|p| self.gpu[p].bytes).sum();
                    let user = pids.first().and_then(|p| self.facts[p].user.clone());
                    json!({ "uid": uid, "user": user, "container": c, "pids": pids, "bytes": bytes })
                })
                .collect();
            let open = posture.p2p_open();
            out.push(Finding {
                id: "gpu-multi-tenant".into(),
                severity: if open { Severity::High } else { Severity::Medium },
                summary: format!(
                    "GPU memory exposed to NICs by {} tenants ({} uid(s)) on one machine{}",
                    tenants.len(),
                    uids.len(),
                    if open { ", and the P2P posture does not isolate them" } else { "" }
                ),
                process: None,
                evidence,
                hint: Some("keep ACS on and the IOMMU translating on machines shared by tenants".into()),
            });
        }
        let contained = self.any.keys().any(|p| self.facts[p].container.is_some());
        if contained || !host_markers.is_empty() {
            for (pid, g) in self.any.iter().filter(|(p, _)| self.facts[p].container.is_none()) {
                let gpu = self.gpu.contains_key(pid);
                out.push(Finding {
                    id: "uncontained-registration".into(),
                    severity: if gpu { Severity::Medium } else { Severity::Low },
                    summary: format!(
                        "memory registered by a process outside any container on a container host \
                         ({} registration(s), {}{})",
                        g.count,
                        crate::units::human_bytes(g.bytes),
                        if gpu { ", GPU memory among them" } else { "" }
                    ),
                    process: Some(self.facts[pid].clone()),
                    evidence: g.evidence.clone(),
                    hint: None,
                });
            }
        }
        for (pid, evidence) in &self.cross_uid_imports {
            let f = &self.facts[pid];
            let exporters: BTreeSet<String> =
                evidence.iter().map(|e| format!("uid {}", e["exporter_uid"])).collect();
            out.push(Finding {
                id: "gpu-ipc-cross-user".into(),
                severity: Severity::High,
                summary: format!(
                    "a process of uid {} imported GPU memory exported by another user ({}; {} import(s))",
                    f.uid,
                    exporters.into_iter().collect::<Vec<_>>().join(", "),
                    evidence.len()
                ),
                process: Some(f.clone()),
                evidence: evidence.clone(),
                hint: Some(
                    "CUDA IPC and cuMem handles give the importer the exporter's GPU memory: keep \
                     jobs of different users from sharing handles (separate IPC namespaces)"
                        .into(),
                ),
            });
        }
        for p in &posture.items {
            out.push(Finding {
                id: p.id.clone(),
                severity: if multi { p.multi_tenant } else { p.single_tenant },
                summary: p.summary.clone(),
                process: None,
                evidence: p.evidence.iter().map(|e| json!(e)).collect(),
                hint: p.hint.clone(),
            });
        }
        out.sort_by_key(|f| std::cmp::Reverse(f.severity));
        out
    }
}

/// A finding as its NDJSON record (`event: "finding"`; field names documented in docs/fleet.md).
pub fn finding_record(f: &Finding) -> Value {
    let mut v = json!({ "event": "finding", "id": f.id, "severity": f.severity, "summary": f.summary });
    if let Some(p) = &f.process {
        v["pid"] = json!(p.pid);
        v["uid"] = json!(p.uid);
        v["user"] = json!(p.user);
        v["comm"] = json!(p.comm);
        v["container"] = json!(p.container);
        v["cgroup"] = json!(p.cgroup);
    }
    v["evidence"] = json!(f.evidence);
    v["hint"] = json!(f.hint);
    v
}

/// Findings per severity, every severity present (0 when none).
pub fn counts(findings: &[Finding]) -> BTreeMap<&'static str, usize> {
    Severity::ALL.iter().map(|s| (s.as_str(), findings.iter().filter(|f| f.severity == *s).count())).collect()
}

#[cfg(test)]
mod tests;
