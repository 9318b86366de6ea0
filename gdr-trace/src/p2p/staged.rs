//! Bytes copied between device memory and CUDA pinned host buffers (staging): the kernel counts
//! `cuMemcpyDtoH*` / `cuMemcpyHtoD*` calls per (process, direction, host address); at each
//! summary they are added up per process over the host buffers known to be pinned (the CUDA
//! calls seen, nvidia.ko's mappings in /proc/PID/maps, the staging MRs) and per staging MR.

use serde::{Deserialize, Serialize};

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StagedDir {
    /// Device -> host (`cuMemcpyDtoH*`).
    Dtoh,
    /// Host -> device (`cuMemcpyHtoD*`).
    Htod,
}

impl StagedDir {
    pub fn from_u32(d: u32) -> Option<Self> {
        match d {
            gdr_trace_common::p2p::staged_dir::DTOH => Some(Self::Dtoh),
            gdr_trace_common::p2p::staged_dir::HTOD => Some(Self::Htod),
            _ => None,
        }
    }
}

/// Copies of one process in one direction whose host side started at `host`, as the kernel
/// counted them (cumulative since the trace began).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedCopies {
    pub pid: u32,
    pub dir: StagedDir,
    pub host: u64,
    pub calls: u64,
    pub bytes: u64,
}

/// Bytes copied device -> host and host -> device through pinned host memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedBytes {
    pub dtoh: u64,
    pub htod: u64,
}

impl StagedBytes {
    pub fn add(&mut self, c: &StagedCopies) {
        match c.dir {
            StagedDir::Dtoh => self.dtoh += c.bytes,
            StagedDir::Htod => self.htod += c.bytes,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.dtoh == 0 && self.htod == 0
    }
}

/// The copies whose host side lies in `[addr, addr + length)`, added up.
pub fn within(copies: &[StagedCopies], addr: u64, length: u64) -> StagedBytes {
    let end = addr.saturating_add(length);
    let mut b = StagedBytes::default();
    for c in copies.iter().filter(|c| c.host >= addr && c.host < end) {
        b.add(c);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(dir: StagedDir, host: u64, bytes: u64) -> StagedCopies {
        StagedCopies { pid: 1, dir, host, calls: 1, bytes }
    }

    #[test]
    fn copies_are_added_up_by_the_buffer_their_host_side_lies_in() {
        let copies = [
            c(StagedDir::Dtoh, 0x1000, 300),
            c(StagedDir::Dtoh, 0x1800, 20),
            c(StagedDir::Htod, 0x1000, 7),
            c(StagedDir::Dtoh, 0x2000, 5000),
        ];
        assert_eq!(within(&copies, 0x1000, 0x1000), StagedBytes { dtoh: 320, htod: 7 });
        assert_eq!(within(&copies, 0x2000, 1), StagedBytes { dtoh: 5000, htod: 0 }, "the end is open");
        assert_eq!(within(&copies, 0x3000, 0x1000), StagedBytes::default());
        let v = serde_json::to_value(within(&copies, 0, u64::MAX)).unwrap();
        assert_eq!(v, serde_json::json!({"dtoh": 5320, "htod": 7}));
    }
}
