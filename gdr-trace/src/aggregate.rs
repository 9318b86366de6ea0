//! Per-process totals: registrations, bytes, live pinned bytes, by verdict.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::{
    classify::Verdict,
    correlate::{Registration, Release},
};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerdictTotals {
    pub count: u64,
    pub bytes: u64,
    pub live_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub comm: String,
    pub registrations: u64,
    pub releases: u64,
    pub failed: u64,
    pub bytes_registered: u64,
    pub live_bytes: u64,
    pub by_verdict: BTreeMap<Verdict, VerdictTotals>,
}

#[derive(Debug, Default)]
pub struct Aggregator {
    procs: BTreeMap<u32, ProcessSummary>,
    /// Live registrations: id -> (owner pid, verdict, length).
    live: HashMap<u64, (u32, Verdict, u64)>,
}

impl Aggregator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        let p = self.procs.entry(reg.ctx.pid).or_insert_with(|| ProcessSummary {
            pid: reg.ctx.pid,
            comm: reg.ctx.comm.clone(),
            ..Default::default()
        });
        p.comm.clone_from(&reg.ctx.comm);
        p.registrations += 1;
        let t = p.by_verdict.entry(verdict).or_default();
        t.count += 1;
        if verdict == Verdict::Failed {
            p.failed += 1;
            return;
        }
        t.bytes += reg.length;
        t.live_bytes += reg.length;
        p.bytes_registered += reg.length;
        p.live_bytes += reg.length;
        self.live.insert(reg.id, (reg.ctx.pid, verdict, reg.length));
    }

    /// Returns the owner and verdict of the released registration, when known.
    pub fn released(&mut self, rel: &Release) -> Option<(u32, Verdict)> {
        let (pid, verdict, len) = self.live.remove(&rel.registration?)?;
        let p = self.procs.get_mut(&pid)?;
        p.releases += 1;
        p.live_bytes = p.live_bytes.saturating_sub(len);
        if let Some(t) = p.by_verdict.get_mut(&verdict) {
            t.live_bytes = t.live_bytes.saturating_sub(len);
        }
        Some((pid, verdict))
    }

    pub fn summaries(&self) -> impl Iterator<Item = &ProcessSummary> {
        self.procs.values()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Context;

    fn reg(id: u64, pid: u32, len: u64, failed: bool) -> Registration {
        Registration {
            id,
            ctx: Context { pid, tid: pid, comm: format!("p{pid}"), uid: 0, cgroup_id: 0, ts_ns: id },
            addr: 0x1000 * id,
            length: len,
            iova: 0,
            access: 1,
            device: None,
            sources: vec![],
            failed,
            errno: None,
            kernel_pinned: !failed,
            umem: None,
            mr: None,
        }
    }

    fn release(id: u64) -> Release {
        Release {
            ctx: reg(id, 1, 0, false).ctx,
            registration: Some(id),
            addr: 0,
            length: 0,
            device: None,
            sources: vec![],
            umem: None,
            mr: None,
        }
    }

    #[test]
    fn totals_and_live_bytes() {
        let mut a = Aggregator::new();
        a.registered(&reg(1, 100, 4096, false), Verdict::Host);
        a.registered(&reg(2, 100, 1 << 20, false), Verdict::Host);
        a.registered(&reg(3, 100, 64, true), Verdict::Failed);
        a.registered(&reg(4, 200, 8192, false), Verdict::Host);
        let p: Vec<_> = a.summaries().cloned().collect();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].registrations, 3);
        assert_eq!(p[0].failed, 1);
        assert_eq!(p[0].bytes_registered, 4096 + (1 << 20));
        assert_eq!(p[0].live_bytes, 4096 + (1 << 20));
        assert_eq!(p[0].by_verdict[&Verdict::Failed].count, 1);
        assert_eq!(p[0].by_verdict[&Verdict::Failed].bytes, 0);

        assert_eq!(a.released(&release(2)), Some((100, Verdict::Host)));
        assert_eq!(a.released(&release(2)), None, "a registration is released once");
        let p: Vec<_> = a.summaries().cloned().collect();
        assert_eq!(p[0].live_bytes, 4096);
        assert_eq!(p[0].by_verdict[&Verdict::Host].live_bytes, 4096);
        assert_eq!(p[0].releases, 1);
        assert_eq!(p[1].live_bytes, 8192);
    }
}
