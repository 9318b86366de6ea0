//! The kernel's storage counter maps at one moment, as the storage state takes them in (read at
//! each summary tick by `trace::storage_live`; the storage part of `counters::Counters`).

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

/// The kernel's storage maps at one moment, and the processes they name.
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
    /// Per process: pages filled for files it closed long ago (folded), taken out of the kernel
    /// map since the last snapshot (pid, pages, read pages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded_growth: Vec<(u32, u64, u64)>,
    /// cuFile processes' configuration, mounts and nvidia-fs as they see them, read once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gds_facts: Vec<(u32, super::gds_facts::ProcGdsFacts)>,
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
