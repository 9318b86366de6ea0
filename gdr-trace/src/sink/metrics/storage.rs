//! The storage path in the fleet view: what `watch` reports per process (bytes by verdict,
//! cuFile calls in compatibility mode, page-cache hits) as counters per process identity, under
//! the same top-N bound as the registration series ([`TopN`], its own ranking: bytes moved).
//!
//! A storage report is cumulative per pid; the counters take its growth since the last report
//! (`seen`, one entry per pid in the report: a pid the report no longer holds is forgotten).

use std::collections::{BTreeMap, HashMap};

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::labels::{labels, with, Labels, ProcKey};
use super::topn::{TopN, Totals};
use crate::storage::{
    aggregate::{page_size, ProcReport, StorageReport},
    classify::StorageVerdict,
};

/// Bytes read through the page cache, and bytes those reads added to it (misses).
const CACHE_READ: &str = "cache-read";
const CACHE_FILL: &str = "cache-fill";

pub struct StorageMetrics {
    top: TopN<ProcKey>,
    /// Per pid: the cumulative values already counted, by series.
    seen: HashMap<u32, BTreeMap<&'static str, Totals>>,
}

/// A process's cumulative values by series: one per verdict (calls, bytes), and the page cache's.
fn cumulative(p: &ProcReport, page: u64) -> BTreeMap<&'static str, Totals> {
    let mut out: BTreeMap<&'static str, Totals> = p
        .bytes_by_verdict
        .iter()
        .map(|(v, b)| (v.as_str(), Totals { count: b.calls, bytes: b.bytes }))
        .collect();
    let read = p.cached_read;
    let fill = p.hit_fills.saturating_mul(page);
    out.insert(CACHE_READ, Totals { count: 0, bytes: read });
    // Never more than was read: the hit ratio stays within [0, 1] (readahead fills ahead).
    out.insert(CACHE_FILL, Totals { count: 0, bytes: fill.min(read) });
    out
}

fn growth(now: Totals, was: Totals) -> Totals {
    Totals { count: now.count.saturating_sub(was.count), bytes: now.bytes.saturating_sub(was.bytes) }
}

impl StorageMetrics {
    pub fn new(top_n: usize, max_keys: usize) -> Self {
        Self { top: TopN::new(top_n, max_keys), seen: HashMap::new() }
    }

    /// Folds a storage report in; `key` names a pid's process identity.
    pub fn fold(&mut self, report: &StorageReport, mut key: impl FnMut(u32, &str) -> ProcKey) {
        let page = page_size();
        let mut seen = HashMap::with_capacity(report.procs.len());
        for p in report.procs.iter().filter(|p| !p.archived) {
            let now = cumulative(p, page);
            let was = self.seen.remove(&p.pid).unwrap_or_default();
            let k = key(p.pid, &p.comm);
            for (series, t) in &now {
                let g = growth(*t, was.get(series).copied().unwrap_or_default());
                if g != Totals::default() {
                    let rank = if series.starts_with("cache-") { 0 } else { g.bytes };
                    self.top.add_ranked(&k, series, g, rank);
                }
            }
            // Values only grow (a snapshot may lag a close record): keep the larger.
            let kept = now.into_iter().map(|(s, t)| {
                let w = was.get(s).copied().unwrap_or_default();
                (s, Totals { count: t.count.max(w.count), bytes: t.bytes.max(w.bytes) })
            });
            seen.insert(p.pid, kept.collect());
        }
        self.seen = seen;
    }

    /// Pids whose cumulative values are held (those of the last report).
    pub fn tracked_pids(&self) -> usize {
        self.seen.len()
    }

    /// Registers the storage families: every verdict and the page cache under `comm="other"`
    /// always (0 until something moves), the top N processes' own series.
    pub fn render(&mut self, reg: &mut Registry) {
        self.top.rerank();
        let bytes = Family::<Labels, Counter>::default();
        let calls = Family::<Labels, Counter>::default();
        let cache_read = Family::<Labels, Counter>::default();
        let cache_fill = Family::<Labels, Counter>::default();
        let ratio = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let (own, mut rest) = self.top.series();
        for v in StorageVerdict::ALL.iter().map(|v| v.as_str()).chain([CACHE_READ, CACHE_FILL]) {
            rest.entry(v.to_string()).or_default();
        }
        let other = ProcKey { comm: "other".into(), ..Default::default() };
        let mut per_key: BTreeMap<Labels, (u64, u64)> = BTreeMap::new();
        let all = own.into_iter().map(|(k, s, t)| (labels(&k), s, t));
        for (l, series, t) in all.chain(rest.into_iter().map(|(s, t)| (labels(&other), s, t))) {
            match series.as_str() {
                CACHE_READ => {
                    cache_read.get_or_create(&l).inc_by(t.bytes);
                    per_key.entry(l).or_default().0 += t.bytes;
                }
                CACHE_FILL => {
                    cache_fill.get_or_create(&l).inc_by(t.bytes);
                    per_key.entry(l).or_default().1 += t.bytes;
                }
                verdict => {
                    let l = with(l, &[("verdict", verdict)]);
                    bytes.get_or_create(&l).inc_by(t.bytes);
                    calls.get_or_create(&l).inc_by(t.count);
                }
            }
        }
        for (l, (read, fill)) in per_key.into_iter().filter(|(_, (read, _))| *read > 0) {
            ratio.get_or_create(&l).set((1.0 - fill as f64 / read as f64).clamp(0.0, 1.0));
        }
        reg.register_with_unit(
            "storage",
            "File bytes read and written by process and storage verdict: gds-nvfs (cuFile through \
             nvidia-fs), gds-compat (cuFile in compatibility mode, through a host bounce buffer), \
             page-cache, direct (O_DIRECT); cuFile compatibility-mode bytes are POSIX I/O too",
            Unit::Bytes,
            bytes,
        );
        reg.register(
            "storage_calls",
            "Calls by process and storage verdict: cuFile data calls (gds-nvfs, gds-compat: the \
             calls in compatibility mode), read and write system calls (page-cache, direct)",
            calls,
        );
        reg.register_with_unit(
            "page_cache_read",
            "Bytes read through the page cache, by process",
            Unit::Bytes,
            cache_read,
        );
        reg.register_with_unit(
            "page_cache_filled",
            "Bytes those reads added to the page cache (misses; at most the bytes read)",
            Unit::Bytes,
            cache_fill,
        );
        reg.register(
            "page_cache_hit_ratio",
            "1 - filled / read over the whole trace, by process (only where it read through the cache)",
            ratio,
        );
    }
}
