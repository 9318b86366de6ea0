//! The kernel's counter maps at one moment, as the storage state takes them in (read at each
//! summary tick by `trace::storage_live`; recordings carry them).

use std::collections::HashMap;

use gdr_trace_common::storage::{FileIo, UringLoose};
use serde::{Deserialize, Serialize};

/// One kernel counter entry, with what the live layer learnt about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapFile {
    pub pid: u32,
    pub fd: u32,
    pub io: FileIo,
    pub path: Option<String>,
}

/// Pages one process added to the page cache for one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapFill {
    pub pid: u32,
    pub dev: u32,
    pub ino: u64,
    pub pages: u64,
    /// Of those, the ones added inside read system calls (reads and their readahead).
    pub read_pages: u64,
    pub path: Option<String>,
}

/// The kernel maps at one moment (read at each summary tick; recordings carry it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub files: Vec<SnapFile>,
    pub fills: Vec<SnapFill>,
    /// Per process: io_uring I/O on registered files (no descriptor, so no file).
    pub uring_loose: Vec<(u32, UringLoose)>,
    #[serde(with = "pairs")]
    pub comms: HashMap<u32, String>,
    /// Processes seen in the maps that have exited (their counters are final).
    #[serde(default)]
    pub gone: Vec<u32>,
    /// GPU↔GPU copies counted in the kernel (`p2p`), cumulative.
    #[serde(default)]
    pub p2p: Vec<crate::p2p::P2pCopies>,
    /// Peer access enabled, as the kernel holds it now.
    #[serde(default)]
    pub peer_access: Vec<crate::p2p::PeerEnabled>,
    /// Device <-> host copies counted in the kernel by host address (`p2p::staged`), cumulative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged: Vec<crate::p2p::StagedCopies>,
    /// Per process: pages filled for files it closed long ago (folded), taken out of the kernel
    /// map since the last snapshot (pid, pages, read pages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded_growth: Vec<(u32, u64, u64)>,
    /// cuFile processes' configuration, mounts and nvidia-fs as they see them, read once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gds_facts: Vec<(u32, super::gds_facts::ProcGdsFacts)>,
    /// Work requests' bytes per (process, lkey) as the kernel counts them (`BYTES`), cumulative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<(gdr_trace_common::bytes::ByteKey, gdr_trace_common::bytes::ByteCount)>,
}

/// A pid-keyed map as `[pid, value]` pairs, sorted (JSON object keys are strings, which an
/// internally tagged recording line can't turn back into numbers).
mod pairs {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(m: &HashMap<u32, String>, s: S) -> Result<S::Ok, S::Error> {
        let mut v: Vec<(&u32, &String)> = m.iter().collect();
        v.sort();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<u32, String>, D::Error> {
        Ok(Vec::<(u32, String)>::deserialize(d)?.into_iter().collect())
    }
}
