//! Registrations no kernel hook corroborates: only a libibverbs uprobe saw them, so they are
//! what a process claimed (any process can call a hooked function with any length, on a fake
//! provider that never reaches the kernel: 1,000 x 1 TiB were once 1.03e15 registered bytes in
//! the series). They are counted apart, per uid (a tenant cannot pick a victim's comm here),
//! never in the registration series, their top-N or the audit's findings.

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
}

/// Whether a kernel hook saw `reg` (else it is only a claim).
pub fn corroborated(reg: &Registration) -> bool {
    reg.sources.iter().any(|s| s.from_kernel())
}

impl Unverified {
    pub fn add(&mut self, reg: &Registration) {
        let uid = reg.ctx.uid.to_string();
        let key =
            if self.by_uid.contains_key(&uid) || self.by_uid.len() < UIDS { uid } else { "other".into() };
        let bytes = if reg.failed { 0 } else { reg.length };
        self.by_uid.entry(key).or_default().add(Totals { count: 1, bytes });
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
    }
}

#[cfg(test)]
mod tests;
