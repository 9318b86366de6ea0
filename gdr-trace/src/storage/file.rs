//! What the storage state keeps of one file a process used: counters of its closed and open
//! descriptors, page-cache fills, cuFile and nvidia-fs bytes.

use std::collections::BTreeMap;

use super::classify::StorageVerdict;
use crate::events::storage::{Counters, Identity};

#[derive(Debug, Clone, Default)]
pub struct FileState {
    pub path: Option<String>,
    pub id: Identity,
    /// Counters of descriptors already closed.
    pub closed: Counters,
    /// The part of `closed` done through descriptors opened O_DIRECT.
    pub closed_direct: Counters,
    /// Counters of open descriptors as of the last snapshot, and whether each is O_DIRECT.
    pub live: BTreeMap<u32, (Counters, bool)>,
    /// Pages added to the page cache, all of them and those inside read system calls.
    pub pages_filled: u64,
    pub read_pages_filled: u64,
    /// cuFile bytes on this file, by verdict.
    pub gds_bytes: BTreeMap<StorageVerdict, u64>,
    pub nvfs_bytes: u64,
}

impl FileState {
    pub fn counters(&self) -> Counters {
        let mut c = self.closed;
        for (l, _) in self.live.values() {
            c.add(l);
        }
        c
    }

    /// What was done through O_DIRECT descriptors (the rest went through the page cache).
    pub fn direct(&self) -> Counters {
        let mut c = self.closed_direct;
        for (l, _) in self.live.values().filter(|(_, d)| *d) {
            c.add(l);
        }
        c
    }
}
