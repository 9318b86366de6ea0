//! Entries userspace removed from a table the kernel holds tenants to shares of (exited
//! processes' `FILE_IO`, `BYTES`, `RECV_POSTED` entries), given back to their tenants: each
//! table's `*_FREED` map holds a running total per tenant that only this writes, so it never
//! races the kernel's atomic counts of the entries it makes and removes.

use std::collections::HashMap;

use aya::maps::HashMap as BpfHashMap;

use crate::loader::MapSet;

/// The key summing every tenant (no uid or cgroup id is it; the eBPF crate's `share::ALL`).
use gdr_trace_common::ALL_TENANTS as ALL;

/// Entries removed per tenant in one reading.
#[derive(Default)]
pub struct Freed(HashMap<u64, u64>);

impl Freed {
    /// One entry of `tenant` removed.
    pub fn one(&mut self, tenant: u64) {
        for t in [tenant, ALL] {
            *self.0.entry(t).or_default() += 1;
        }
    }

    /// Adds them to the running totals in the map `name`.
    pub fn give_back(self, ebpf: &mut MapSet, name: &str) {
        if self.0.is_empty() {
            return;
        }
        let Some(Ok(mut f)) = ebpf.map_mut(name).map(BpfHashMap::<_, u64, u64>::try_from) else { return };
        for (t, n) in self.0 {
            let before = f.get(&t, 0).unwrap_or(0);
            let _ = f.insert(t, before + n, 0);
        }
    }
}
