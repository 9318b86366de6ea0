//! User-space addresses in a recording: buffer, GPU and code addresses and CUDA stream pointers
//! tell where a process's heap, mappings and libraries lie (its ASLR), so none is written as
//! it was. Each is moved by an offset of the recording's own (random, never written), one per
//! process: a process's addresses keep their distances, so every range and equality replay
//! needs (an I/O inside a registered buffer, a pin given back at the address it was taken, a
//! copy through pinned host memory) holds as it did live, while knowing one's own addresses
//! tells nothing of another process's. Zero ("none") stays zero. The offset is a multiple of
//! 64 KiB in [2^58, 2^59 + 2^62): added to a user address (below 2^57) it does not wrap.

use std::hash::{BuildHasher, RandomState};

use crate::{
    counters::Counters,
    events::{cuda::CudaCall, storage::StorageEvent, MrRecord},
};

#[derive(Debug, Default)]
pub struct Addrs {
    /// This recording's key (random, never written).
    key: RandomState,
}

impl Addrs {
    /// `v`, an address in process `pid`, as written.
    pub fn of(&self, pid: u32, v: u64) -> u64 {
        if v == 0 {
            return 0;
        }
        let h = self.key.hash_one(pid);
        let offset = (1u64 << 58) | (h & ((1 << 62) - 1) & !0xffff);
        v.wrapping_add(offset)
    }

    pub fn record(&self, rec: &mut MrRecord) {
        let pid = rec.ctx.pid;
        rec.addr = self.of(pid, rec.addr);
        rec.iova = self.of(pid, rec.iova);
    }

    pub fn storage(&self, ev: &mut StorageEvent) {
        match ev {
            StorageEvent::Gds(c) => {
                let pid = c.ctx.pid;
                c.buf = self.of(pid, c.buf);
                c.detail.stream = self.of(pid, c.detail.stream);
                c.detail.func_ip = self.of(pid, c.detail.func_ip);
            }
            StorageEvent::Nvfs(n) => {
                n.cpuvaddr = self.of(n.ctx.pid, n.cpuvaddr);
                n.gpuvaddr = self.of(n.ctx.pid, n.gpuvaddr);
            }
            StorageEvent::Opened(_) | StorageEvent::Closed(_) | StorageEvent::Worker(_) => {}
        }
    }

    pub fn cuda(&self, c: &mut CudaCall) {
        c.addr = self.of(c.ctx.pid, c.addr);
    }

    /// The kernel's counters as written: the pinned host buffers copies went through.
    pub fn counters(&self, c: &Counters) -> Counters {
        let mut out = c.clone();
        for s in &mut out.staged {
            s.host = self.of(s.pid, s.host);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_keeps_its_distances_and_another_gets_another_offset() {
        let a = Addrs::default();
        let (base, end) = (0x7f12_3456_0000u64, 0x7f12_3456_0000u64 + (2 << 20));
        let io = 0x7f12_3456_8000u64;
        let (b, e, i) = (a.of(7, base), a.of(7, end), a.of(7, io));
        assert!(b != base && i >= b && i < e && e - b == end - base, "ranges hold");
        assert_eq!(b % 0x10000, base % 0x10000, "page offsets hold");
        assert!(b > base && e > b, "no wrap for a user address");
        assert_eq!(a.of(7, 0), 0, "none stays none");
        assert_eq!(a.of(7, base), b, "the same address, the same value");
        assert_ne!(a.of(8, base) - base, b - base, "another process, another offset");
        assert_ne!(Addrs::default().of(7, base), b, "another recording, another offset");
        // The highest user address (5-level paging) still does not wrap.
        assert!(a.of(7, (1 << 57) - 1) > (1 << 57) - 1);
    }

    #[test]
    fn staged_copies_move_with_their_process() {
        use crate::p2p::staged::{StagedCopies, StagedDir};
        let a = Addrs::default();
        let host = 0x7f00_0020_0000;
        let c = Counters {
            staged: vec![StagedCopies { pid: 7, dir: StagedDir::Dtoh, host, calls: 1, bytes: 4096 }],
            ..Default::default()
        };
        let w = a.counters(&c);
        assert_eq!(w.staged[0].host, a.of(7, host), "the process's offset, as its MRs get");
        assert_eq!((w.staged[0].pid, w.staged[0].bytes), (7, 4096));
    }
}
