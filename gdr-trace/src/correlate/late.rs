//! libibverbs' return after the window: under load (16 processes registering at once on an
//! emulated CPU), `ibv_reg_mr` can return more than [`WINDOW_NS`](super::WINDOW_NS) after the
//! kernel's `ib_umem_get` record, which is then reported alone (or with the nested
//! `ibv_reg_mr_iova2` only). Its late return (the nested `ibv_reg_mr_iova2` and the outer
//! `ibv_reg_mr`, the thread's next records, whichever it has not taken in) is that same
//! registration: it is not reported again, and its `struct ibv_mr *` is tied to it so the
//! release still joins. The release side is `Correlator::reported`.

use super::{Correlator, Joined, Live};
use crate::events::{MrKind, MrRecord};

/// A registration reported from the kernel's record alone, waiting for its thread's next record.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pid: u32,
    id: u64,
    addr: u64,
    length: u64,
    umem: u64,
    device: Option<String>,
    /// libibverbs sources already taken in (each of the nested calls once).
    taken: Vec<String>,
}

impl Correlator {
    /// An item leaves the correlator: a registration the kernel saw waits for its thread's next
    /// record, which may be a libibverbs return it has not taken in yet — all of them (the
    /// kernel's record reported alone), or only the outer one (`ibv_reg_mr` returning after the
    /// window that its nested `ibv_reg_mr_iova2` made in time: seen in the VM under load).
    pub(super) fn note_closed(&mut self, j: &Joined) {
        let Joined::Registered(r) = j else { return };
        let from_kernel = r.sources.iter().any(|s| !s.starts_with("uprobe:"));
        if let (true, false, Some(umem)) = (from_kernel, r.failed, r.umem) {
            let p = Pending {
                pid: r.ctx.pid,
                id: r.id,
                addr: r.addr,
                length: r.length,
                umem,
                device: r.device.clone(),
                taken: r.sources.iter().filter(|s| s.starts_with("uprobe:")).cloned().collect(),
            };
            self.late.insert(r.ctx.tid, p);
        }
    }

    /// Whether `rec` is the late libibverbs return of the thread's registration already
    /// reported (then taken in here, and not to be reported again).
    pub(super) fn take_late(&mut self, rec: &MrRecord) -> bool {
        let Some(mut p) = self.late.remove(&rec.ctx.tid) else { return false };
        let same = rec.kind == MrKind::Register
            && !rec.from_kernel
            && rec.addr == p.addr
            && rec.length == p.length
            && !p.taken.contains(&rec.source);
        if !same {
            return false;
        }
        if !rec.failed {
            let live = Live {
                id: p.id,
                addr: p.addr,
                length: p.length,
                device: p.device.clone(),
                mr: Some(rec.handle),
            };
            self.by_mr.insert(rec.handle, live);
            if let Some(k) = self.by_umem.get_mut(&p.umem) {
                k.mr = Some(rec.handle);
            }
        }
        p.taken.push(rec.source.clone());
        self.late.insert(rec.ctx.tid, p);
        true
    }

    pub(super) fn forget_late(&mut self, pid: u32) {
        self.late.retain(|_, p| p.pid != pid);
    }
}
