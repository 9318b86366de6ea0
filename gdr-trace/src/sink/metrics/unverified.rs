//! Registrations no kernel hook corroborates: only a libibverbs uprobe saw them, so they are
//! what a process claimed (any process can call a hooked function with any length, on a fake
//! provider that never reaches the kernel: 1,000 x 1 TiB were once 1.03e15 registered bytes in
//! the series). They are counted apart, per uid (a tenant cannot pick a victim's comm here),
//! never in the registration series, their top-N or the audit's findings.
//! The converse is counted too: registrations a kernel hook saw that no library-call hook did
//! (made before the follower hooked a library copy the process had just mapped, through a copy
//! past `--max-uprobes`, or without libibverbs): real, and counted in the series, but without
//! what only the call tells (its access flags, a dma-buf's fd).

use std::collections::BTreeMap;

use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::{Registry, Unit},
};

use super::{labels::Labels, topn::Totals};
use crate::mr::correlate::Registration;

/// Uids with a series of their own; the rest are summed under uid="other".
const UIDS: usize = 256;

#[derive(Debug, Default)]
pub struct Unverified {
    by_uid: BTreeMap<String, Totals>,
    /// Kernel-seen registrations no library-call hook saw, by uid.
    no_call_by_uid: BTreeMap<String, u64>,
}

/// Whether a kernel hook saw `reg` (else it is only a claim).
pub fn corroborated(reg: &Registration) -> bool {
    reg.sources.iter().any(|s| s.from_kernel())
}

impl Unverified {
    pub fn add(&mut self, reg: &Registration) {
        let key = uid_key(&self.by_uid, reg);
        let bytes = if reg.failed { 0 } else { reg.length };
        self.by_uid.entry(key).or_default().add(Totals { count: 1, bytes });
    }

    /// A registration a kernel hook saw: counted here when no library-call hook saw it too.
    pub fn kernel_seen(&mut self, reg: &Registration) {
        if reg.sources.iter().all(|s| s.from_kernel()) {
            let key = uid_key(&self.no_call_by_uid, reg);
            *self.no_call_by_uid.entry(key).or_default() += 1;
        }
    }

    pub fn register(&self, reg: &mut Registry) {
        let count = Family::<Labels, Counter>::default();
        let bytes = Family::<Labels, Counter>::default();
        for (uid, t) in &self.by_uid {
            let l = vec![("uid".into(), uid.clone())];
            count.get_or_create(&l).inc_by(t.count);
            bytes.get_or_create(&l).inc_by(t.bytes);
        }
        reg.register(
            "unverified_registrations",
            "Registrations only a libibverbs uprobe saw, no kernel hook: claims, by uid (not in registrations)",
            count,
        );
        reg.register_with_unit(
            "unverified_registered",
            "Bytes those claimed, by uid (not in registered_bytes)",
            Unit::Bytes,
            bytes,
        );
        let no_call = Family::<Labels, Counter>::default();
        for (uid, n) in &self.no_call_by_uid {
            no_call.get_or_create(&vec![("uid".into(), uid.clone())]).inc_by(*n);
        }
        reg.register(
            "registrations_without_library_call",
            "Registrations a kernel hook saw that no libibverbs call hook did, by uid: made before the \
             follower hooked a library copy just mapped, through a copy past --max-uprobes, or \
             without libibverbs (in registrations, without the call's flags)",
            no_call,
        );
    }
}

/// `reg`'s uid as a key of `map`, or "other" once `UIDS` uids have one.
fn uid_key<V>(map: &BTreeMap<String, V>, reg: &Registration) -> String {
    let uid = reg.ctx.uid.to_string();
    if map.contains_key(&uid) || map.len() < UIDS {
        uid
    } else {
        "other".into()
    }
}

#[cfg(test)]
mod tests;
