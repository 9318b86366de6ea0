//! Where analysed events go: text for people, NDJSON for machines. Both receive the same calls
//! from the same pipeline.

pub mod json;
pub mod metrics;
pub mod storage_json;
pub mod storage_text;
pub mod text;

use crate::{
    aggregate::Aggregator,
    classify::Verdict,
    correlate::{GpuFreed, GpuPin, Registration, Release},
    events::MrRecord,
    loader::{HookStatus, KernelFacts},
    storage::{aggregate::StorageReport, events::NvfsIo, state::GdsIo},
};

/// Records that never reached userspace, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lost {
    /// The ring buffer was full.
    pub ringbuf_full: u64,
    /// An entry-argument stash was full.
    pub stash_full: u64,
    /// A return probe found no entry arguments.
    pub stash_miss: u64,
    /// A storage counter map was full: some I/O was not counted.
    #[serde(default)]
    pub storage_map_full: u64,
    /// The traced-process map was full: a child of the attached process went untraced.
    #[serde(default)]
    pub tracked_full: u64,
}

impl Lost {
    pub fn from_slots(s: &[u64]) -> Self {
        use gdr_trace_common::lost::*;
        Self {
            ringbuf_full: s[RINGBUF_FULL as usize],
            stash_full: s[STASH_FULL as usize],
            stash_miss: s[STASH_MISS as usize],
            storage_map_full: s[STORAGE_MAP_FULL as usize],
            tracked_full: s[TRACKED_FULL as usize],
        }
    }
    pub fn total(&self) -> u64 {
        self.ringbuf_full + self.stash_full + self.stash_miss + self.storage_map_full + self.tracked_full
    }
}

pub trait Sink {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]);
    /// A decoded record as it came off the ring buffer, before correlation (live tracing only:
    /// recordings are written from here, process facts are looked up while the process runs).
    fn raw(&mut self, _rec: &MrRecord) {}
    /// The correlation clock ticked (live tracing only; recordings keep it for replay).
    fn tick(&mut self, _now_ns: u64) {}
    fn registered(&mut self, reg: &Registration, verdict: Verdict);
    /// `owner`: pid and verdict of the registration released, when it was seen.
    fn released(&mut self, rel: &Release, owner: Option<(u32, Verdict)>);
    /// GPU pages pinned for P2P outside any registration (GDS or another caller).
    fn gpu_pin(&mut self, _pin: &GpuPin) {}
    /// GPU memory freed under a live registration (`owner`: its process, when known).
    fn gpu_freed(&mut self, _freed: &GpuFreed, _owner: Option<u32>) {}
    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool);
    /// Something a user should know (the attached process exited, a hook is missing...).
    fn note(&mut self, msg: &str);
    /// A cuFile call, classified.
    fn gds_io(&mut self, _io: &GdsIo) {}
    /// An nvidia-fs ioctl or direct I/O (`path`: of the target descriptor, when known).
    fn nvfs_io(&mut self, _io: &NvfsIo, _path: Option<&str>) {}
    /// Per-process storage report: every interval and at the end (`last`).
    fn storage_summary(&mut self, _report: &StorageReport, _last: bool) {}
}

/// Sends every call to each of several sinks, in order.
pub struct FanOut<'a>(pub Vec<&'a mut dyn Sink>);

impl Sink for FanOut<'_> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.0.iter_mut().for_each(|s| s.start(facts, hooks));
    }
    fn raw(&mut self, rec: &MrRecord) {
        self.0.iter_mut().for_each(|s| s.raw(rec));
    }
    fn tick(&mut self, now_ns: u64) {
        self.0.iter_mut().for_each(|s| s.tick(now_ns));
    }
    fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        self.0.iter_mut().for_each(|s| s.registered(reg, verdict));
    }
    fn released(&mut self, rel: &Release, owner: Option<(u32, Verdict)>) {
        self.0.iter_mut().for_each(|s| s.released(rel, owner));
    }
    fn gpu_pin(&mut self, pin: &GpuPin) {
        self.0.iter_mut().for_each(|s| s.gpu_pin(pin));
    }
    fn gpu_freed(&mut self, freed: &GpuFreed, owner: Option<u32>) {
        self.0.iter_mut().for_each(|s| s.gpu_freed(freed, owner));
    }
    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool) {
        self.0.iter_mut().for_each(|s| s.summary(agg, lost, last));
    }
    fn note(&mut self, msg: &str) {
        self.0.iter_mut().for_each(|s| s.note(msg));
    }
    fn gds_io(&mut self, io: &GdsIo) {
        self.0.iter_mut().for_each(|s| s.gds_io(io));
    }
    fn nvfs_io(&mut self, io: &NvfsIo, path: Option<&str>) {
        self.0.iter_mut().for_each(|s| s.nvfs_io(io, path));
    }
    fn storage_summary(&mut self, report: &StorageReport, last: bool) {
        self.0.iter_mut().for_each(|s| s.storage_summary(report, last));
    }
}

/// Bytes for people: 4096 -> "4.0 KiB".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes() {
        assert_eq!(super::human_bytes(0), "0 B");
        assert_eq!(super::human_bytes(4096), "4.0 KiB");
        assert_eq!(super::human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(super::human_bytes(3_435_973_837), "3.2 GiB");
    }
}
