//! libibverbs' return after the window: under load (16 processes registering at once on an
//! emulated CPU), `ibv_reg_mr` can return more than [`WINDOW_NS`](super::WINDOW_NS) after the
//! kernel's `ib_umem_get` record, which is then reported alone (or with the nested
//! `ibv_reg_mr_iova2` only). Its late return (the nested `ibv_reg_mr_iova2` and the outer
//! `ibv_reg_mr`, the thread's next records, whichever it has not taken in) is that same
//! registration: it is not reported again, and its `struct ibv_mr *` is tied to it so the
//! release still joins. The release side is `Correlator::reported`.

use std::collections::HashMap;

use super::joined::{Joined, Live};
use crate::events::{MrKind, MrRecord, Source};

/// Per thread: a registration reported from the kernel's record alone.
#[derive(Debug, Default)]
pub(super) struct Late {
    pending: HashMap<u32, Pending>,
}

/// A late return taken in: the reported registration's `struct ib_umem *`, and what its release
/// needs (None when the return failed).
pub(super) struct Tie {
    pub umem: u64,
    pub live: Option<Live>,
}

/// A registration reported from the kernel's record alone, waiting for its thread's next record.
#[derive(Debug, Clone)]
struct Pending {
    pid: u32,
    id: u64,
    addr: u64,
    length: u64,
    umem: u64,
    device: Option<String>,
    /// libibverbs sources already taken in (each of the nested calls once).
    taken: Vec<Source>,
}

impl Late {
    /// An item leaves the correlator: a registration the kernel saw waits for its thread's next
    /// record, which may be a libibverbs return it has not taken in yet — all of them (the
    /// kernel's record reported alone), or only the outer one (`ibv_reg_mr` returning after the
    /// window that its nested `ibv_reg_mr_iova2` made in time: seen in the VM under load).
    pub(super) fn note_closed(&mut self, j: &Joined) {
        let Joined::Registered(r) = j else { return };
        let from_kernel = r.sources.iter().any(Source::from_kernel);
        if let (true, false, Some(umem)) = (from_kernel, r.failed, r.umem) {
            let p = Pending {
                pid: r.ctx.pid,
                id: r.id,
                addr: r.addr,
                length: r.length,
                umem,
                device: r.device.clone(),
                taken: r.sources.iter().filter(|s| !s.from_kernel()).copied().collect(),
            };
            self.pending.insert(r.ctx.tid, p);
        }
    }

    /// Whether `rec` is the late libibverbs return of the thread's registration already
    /// reported (then taken in here, and not to be reported again): what to tie it to.
    pub(super) fn take(&mut self, rec: &MrRecord) -> Option<Tie> {
        let mut p = self.pending.remove(&rec.ctx.tid)?;
        let same = rec.kind == MrKind::Register
            && !rec.from_kernel
            && rec.addr == p.addr
            && rec.length == p.length
            && !p.taken.contains(&rec.source);
        if !same {
            return None;
        }
        let live = (!rec.failed).then(|| Live {
            id: p.id,
            addr: p.addr,
            length: p.length,
            device: p.device.clone(),
            mr: Some(rec.handle),
        });
        let tie = Tie { umem: p.umem, live };
        p.taken.push(rec.source);
        self.pending.insert(rec.ctx.tid, p);
        Some(tie)
    }

    /// Nothing waits (tests).
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(super) fn forget(&mut self, pid: u32) {
        self.pending.retain(|_, p| p.pid != pid);
    }
}
