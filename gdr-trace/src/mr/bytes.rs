//! Bytes moved by work requests, per MR and per process by the verdict of the MR they named
//! (pure analysis: the kernel's `BYTES` counts come in as readings and release records).
//!
//! A released MR's counts come with its `ibv_dereg_mr` record (the kernel takes them out of
//! the map then, exact to the byte); a live MR's are the latest reading of the map.

use std::collections::{BTreeMap, HashMap};

use gdr_trace_common::mr::bytes::{ByteCount, ByteKey, LKEY_INLINE, LKEY_UNJOINED};
use serde::Serialize;

use crate::mr::classify::Verdict;

/// Bytes out (the NIC read local memory), in (it wrote local memory), and work requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub out: u64,
    #[serde(rename = "in")]
    pub inn: u64,
    pub ops: u64,
}

impl Moved {
    pub fn of(c: &ByteCount) -> Self {
        Self { out: c.bytes_out, inn: c.bytes_in, ops: c.ops }
    }
    pub(crate) fn add(&mut self, o: Moved) {
        self.out += o.out;
        self.inn += o.inn;
        self.ops += o.ops;
    }
    pub fn bytes(&self) -> u64 {
        self.out + self.inn
    }
}

/// The `bytes_by_verdict` key of a host MR inside a CUDA pinned host allocation: staging.
pub const HOST_CUDA_PINNED: &str = "host-cuda-pinned";
/// Keys for bytes no registration seen explains.
pub const INLINE: &str = "inline";
pub const UNJOINED_RECV: &str = "recv-unjoined";
pub const UNKNOWN_MR: &str = "mr-not-seen";

/// The `bytes_by_verdict` key of a registration.
pub fn label(verdict: Verdict, cuda_pinned: bool) -> &'static str {
    if verdict == Verdict::Host && cuda_pinned {
        HOST_CUDA_PINNED
    } else {
        verdict.as_str()
    }
}

/// Whether a key is GPU memory.
pub fn is_gpu(label: &str) -> bool {
    label == Verdict::GpuPeermem.as_str() || label == Verdict::GpuDmabuf.as_str()
}

/// An MR as work requests name it: its device context (`gdr_trace_common::mr::bytes::dev_tag`)
/// and lkey (unique per device only).
pub type MrKey = (u32, u32);

#[derive(Debug, Default)]
pub struct Ledger {
    /// Live MRs with an lkey: (pid, (dev, lkey)) -> (registration id, key).
    mrs: HashMap<(u32, MrKey), (u64, &'static str)>,
    /// Released MRs' final counts, per pid by key.
    released: HashMap<u32, BTreeMap<&'static str, Moved>>,
    /// The latest reading of the map, per (pid, (dev, lkey)).
    live: HashMap<(u32, MrKey), Moved>,
}

impl Ledger {
    pub fn registered(&mut self, pid: u32, key: MrKey, id: u64, label: &'static str) {
        self.mrs.insert((pid, key), (id, label));
        // A key given again: the old MR's counts left the map with its release.
        self.live.remove(&(pid, key));
    }

    /// An MR went with its final counts (None: not through ibv_dereg_mr, or nothing counted).
    pub fn released(&mut self, pid: u32, key: MrKey, counts: Option<Moved>) {
        let label = self.mrs.remove(&(pid, key)).map_or(UNKNOWN_MR, |(_, l)| l);
        self.live.remove(&(pid, key));
        if let Some(m) = counts.filter(|m| *m != Moved::default()) {
            self.released.entry(pid).or_default().entry(label).or_default().add(m);
        }
    }

    /// A reading of the kernel map (cumulative per entry).
    pub fn reading(&mut self, entries: &[(ByteKey, ByteCount)]) {
        for (k, c) in entries {
            self.live.insert((k.tgid, (k.dev, k.lkey)), Moved::of(c));
        }
    }

    fn key_of(&self, pid: u32, key: MrKey) -> &'static str {
        match key.1 {
            LKEY_INLINE => INLINE,
            LKEY_UNJOINED => UNJOINED_RECV,
            _ => self.mrs.get(&(pid, key)).map_or(UNKNOWN_MR, |(_, l)| l),
        }
    }

    /// What `pid`'s work requests moved, by key.
    pub fn by_verdict(&self, pid: u32) -> BTreeMap<String, Moved> {
        let mut out: BTreeMap<String, Moved> = BTreeMap::new();
        for (k, m) in self.released.get(&pid).into_iter().flatten() {
            out.entry(k.to_string()).or_default().add(*m);
        }
        for ((p, key), m) in self.live.iter().filter(|((p, _), _)| *p == pid) {
            out.entry(self.key_of(*p, *key).to_string()).or_default().add(*m);
        }
        out
    }

    /// Live MRs' counts so far: (pid, registration id, counts).
    pub fn live_mrs(&self) -> Vec<(u32, u64, Moved)> {
        let mut v: Vec<_> =
            (self.live.iter()).filter_map(|(k, m)| self.mrs.get(k).map(|(id, _)| (k.0, *id, *m))).collect();
        v.sort_by_key(|(p, id, _)| (*p, *id));
        v
    }

    /// Every pid with bytes.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.released.keys().chain(self.live.keys().map(|(p, _)| p)).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A process's summary was dropped for good: so is what is kept for it.
    pub fn forget(&mut self, pid: u32) {
        self.mrs.retain(|(p, _), _| *p != pid);
        self.live.retain(|(p, _), _| *p != pid);
        self.released.remove(&pid);
    }
}

/// One line per key for people: `host: out 19.5 MiB, in 0 B, 300 ops`.
pub fn lines(by: &BTreeMap<String, Moved>) -> String {
    let h = |n| crate::term::glue(&crate::units::human_bytes(n));
    let v: Vec<String> =
        by.iter().map(|(k, m)| format!("{k}: out {}, in {}, {} ops", h(m.out), h(m.inn), m.ops)).collect();
    v.join("\n")
}

/// GPU bytes over all bytes moved through MRs whose kind is known (None: none moved).
pub fn gdr_ratio(by: &BTreeMap<String, Moved>) -> Option<f64> {
    let gpu: u64 = by.iter().filter(|(k, _)| is_gpu(k)).map(|(_, m)| m.bytes()).sum();
    let total: u64 = by.iter().filter(|(k, _)| k.as_str() != UNKNOWN_MR).map(|(_, m)| m.bytes()).sum();
    (total > 0).then(|| gpu as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(o: u64, i: u64, n: u64) -> ByteCount {
        ByteCount { bytes_out: o, bytes_in: i, ops: n, tenant: 0 }
    }

    #[test]
    fn released_and_live_counts_add_up_by_verdict_without_double_counting() {
        let mut l = Ledger::default();
        l.registered(7, (0, 0x100), 1, "gpu-peermem");
        l.registered(7, (0, 0x200), 2, HOST_CUDA_PINNED);
        l.reading(&[(ByteKey { tgid: 7, lkey: 0x100, dev: 0 }, c(4096, 0, 1))]);
        l.reading(&[(ByteKey { tgid: 7, lkey: 0x100, dev: 0 }, c(8192, 0, 2))]);
        // Released with its final counts: the live reading of it goes.
        l.released(7, (0, 0x100), Some(Moved::of(&c(65536, 0, 16))));
        l.reading(&[
            (ByteKey { tgid: 7, lkey: 0x200, dev: 0 }, c(0, 1000, 3)),
            (ByteKey { tgid: 7, lkey: LKEY_INLINE, dev: 0 }, c(64, 0, 1)),
        ]);
        let by = l.by_verdict(7);
        assert_eq!(by["gpu-peermem"], Moved { out: 65536, inn: 0, ops: 16 });
        assert_eq!(by[HOST_CUDA_PINNED], Moved { out: 0, inn: 1000, ops: 3 });
        assert_eq!(by[INLINE], Moved { out: 64, inn: 0, ops: 1 });
        assert_eq!(l.live_mrs(), vec![(7, 2, Moved { out: 0, inn: 1000, ops: 3 })]);
        let r = gdr_ratio(&by).unwrap();
        assert!((r - 65536.0 / (65536.0 + 1000.0 + 64.0)).abs() < 1e-12, "{r}");
        // The lkey given to a new MR starts from nothing.
        l.registered(7, (0, 0x100), 3, "host");
        l.reading(&[(ByteKey { tgid: 7, lkey: 0x100, dev: 0 }, c(1, 0, 1))]);
        assert_eq!(l.by_verdict(7)["host"], Moved { out: 1, inn: 0, ops: 1 });
        assert_eq!(l.by_verdict(7)["gpu-peermem"].out, 65536);
        assert!(l.by_verdict(8).is_empty() && gdr_ratio(&l.by_verdict(8)).is_none());
    }

    #[test]
    fn an_mr_registered_before_the_trace_is_said_so() {
        let mut l = Ledger::default();
        l.reading(&[(ByteKey { tgid: 9, lkey: 5, dev: 0 }, c(10, 0, 1))]);
        assert_eq!(l.by_verdict(9)[UNKNOWN_MR].out, 10);
        assert_eq!(gdr_ratio(&l.by_verdict(9)), None);
        l.released(9, (0, 5), Some(Moved { out: 12, inn: 0, ops: 2 }));
        assert_eq!(l.by_verdict(9)[UNKNOWN_MR].out, 12);
    }

    #[test]
    fn the_same_lkey_on_two_devices_is_two_mrs() {
        // An lkey is unique per device: a process with a GPU MR on one NIC and a host MR on
        // another may hold the same lkey twice; each device's bytes go to its own MR.
        let (nic0, nic1) = (gdr_trace_common::mr::bytes::dev_tag(0x5555_0000_1000), 0x2000);
        let mut l = Ledger::default();
        l.registered(7, (nic0, 0x100), 1, "gpu-peermem");
        l.registered(7, (nic1, 0x100), 2, "host");
        l.reading(&[
            (ByteKey { tgid: 7, lkey: 0x100, dev: nic0 }, c(4096, 0, 1)),
            (ByteKey { tgid: 7, lkey: 0x100, dev: nic1 }, c(0, 512, 2)),
        ]);
        let by = l.by_verdict(7);
        assert_eq!(by["gpu-peermem"], Moved { out: 4096, inn: 0, ops: 1 }, "{by:?}");
        assert_eq!(by["host"], Moved { out: 0, inn: 512, ops: 2 }, "{by:?}");
        // Releasing one leaves the other's live count and verdict alone.
        l.released(7, (nic0, 0x100), Some(Moved { out: 8192, inn: 0, ops: 2 }));
        let by = l.by_verdict(7);
        assert_eq!((by["gpu-peermem"].out, by["host"].inn), (8192, 512), "{by:?}");
        assert_eq!(l.live_mrs(), vec![(7, 2, Moved { out: 0, inn: 512, ops: 2 })]);
    }
}
