//! The kernel's work-request byte counts (`BYTES`, per process, device and lkey), read at each summary
//! tick for the pipeline (`wr_bytes::Ledger`); exited processes' entries of the byte maps
//! (`BYTES`, `RECV_POSTED`) leave them here, and each tenant gets its entries back
//! (`BYTES_FREED`, `RECV_FREED`: running totals per tenant that only this writes).

use std::collections::HashMap;

use crate::loader::MapSet;
use aya::maps::HashMap as BpfHashMap;
use gdr_trace_common::mr::bytes::{maps, ByteCount, ByteKey, RecvKey, RecvPosted};

use super::freed::Freed;
use crate::procfs;

/// Every entry, cumulative. Exited processes' entries leave the map once read: their counts are
/// final, and the ledger keeps them.
pub fn read(ebpf: &mut MapSet) -> Vec<(ByteKey, ByteCount)> {
    let Some(map) = ebpf.map_mut(maps::BYTES) else { return vec![] };
    let Ok(mut m) = BpfHashMap::<_, ByteKey, ByteCount>::try_from(map) else { return vec![] };
    let mut entries: Vec<(ByteKey, ByteCount)> = m.iter().flatten().collect();
    entries.sort_by_key(|(k, _)| *k);
    let mut alive = Alive::default();
    let mut freed = Freed::default();
    for (k, c) in entries.iter().filter(|(k, _)| !alive.is(k.tgid)) {
        if m.remove(k).is_ok() {
            freed.one(c.tenant);
        }
    }
    freed.give_back(ebpf, maps::BYTES_FREED);
    forget_receives(ebpf, &mut alive);
    entries
}

/// Removes the receives exited processes posted and never saw complete (every program that
/// ends with receives posted, as most do).
fn forget_receives(ebpf: &mut MapSet, alive: &mut Alive) {
    let Some(map) = ebpf.map_mut(maps::RECV_POSTED) else { return };
    let Ok(mut m) = BpfHashMap::<_, RecvKey, RecvPosted>::try_from(map) else { return };
    let dead: Vec<RecvKey> = m.keys().flatten().filter(|k| !alive.is(k.tgid)).collect();
    let mut freed = Freed::default();
    for k in dead {
        if let Ok(v) = m.get(&k, 0) {
            if m.remove(&k).is_ok() {
                freed.one(v.tenant);
            }
        }
    }
    freed.give_back(ebpf, maps::RECV_FREED);
}

/// Whether processes are alive, each asked once per reading.
#[derive(Default)]
struct Alive(HashMap<u32, bool>);

impl Alive {
    fn is(&mut self, tgid: u32) -> bool {
        *self.0.entry(tgid).or_insert_with(|| procfs::pid_alive(tgid))
    }
}
