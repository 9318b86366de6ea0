//! The kernel's work-request byte counts (`BYTES`, per process, device and lkey), read at each summary
//! tick for the pipeline (`wr_bytes::Ledger`).

use crate::loader::MapSet;
use aya::maps::HashMap as BpfHashMap;
use gdr_trace_common::bytes::{maps, ByteCount, ByteKey};

use crate::procfs;

/// Every entry, cumulative. Exited processes' entries leave the map once read: their counts are
/// final, and the ledger keeps them.
pub fn read(ebpf: &mut MapSet) -> Vec<(ByteKey, ByteCount)> {
    let Some(map) = ebpf.map_mut(maps::BYTES) else { return vec![] };
    let Ok(mut m) = BpfHashMap::<_, ByteKey, ByteCount>::try_from(map) else { return vec![] };
    let mut entries: Vec<(ByteKey, ByteCount)> = m.iter().flatten().collect();
    entries.sort_by_key(|(k, _)| *k);
    for (k, _) in entries.iter().filter(|(k, _)| !procfs::pid_alive(k.tgid)) {
        let _ = m.remove(k);
    }
    entries
}
