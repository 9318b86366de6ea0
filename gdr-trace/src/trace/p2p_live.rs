//! The live side of the P2P analysis: reads the kernel's copy counters and peer-access map at a
//! summary tick.

use std::collections::HashMap;

use crate::loader::MapSet;
use aya::maps::HashMap as BpfHashMap;
use gdr_trace_common::p2p::{maps, P2pCount, P2pKey, PeerKey, StagedKey};

use crate::p2p::{P2pCopies, PeerEnabled};
use crate::procfs;

/// The kernel's copy counters and enabled peer access, with the command names of their
/// processes (those still running).
pub fn read(ebpf: &MapSet) -> (Vec<P2pCopies>, Vec<PeerEnabled>, HashMap<u32, String>) {
    let copies: Vec<P2pCopies> = entries::<P2pKey, P2pCount>(ebpf, maps::P2P_COPIES)
        .into_iter()
        .map(|(k, c)| P2pCopies {
            pid: k.tgid,
            src_device: k.src_device,
            dst_device: k.dst_device,
            verdict: k.verdict,
            calls: c.calls,
            bytes: c.bytes,
        })
        .collect();
    let peers: Vec<PeerEnabled> = entries::<PeerKey, u32>(ebpf, maps::CU_PEER)
        .into_iter()
        .map(|(k, _)| PeerEnabled { pid: k.tgid, device: k.device, peer_device: k.peer })
        .collect();
    let comms = copies
        .iter()
        .map(|c| c.pid)
        .chain(peers.iter().map(|p| p.pid))
        .filter_map(|p| procfs::comm(p).map(|c| (p, c)))
        .collect();
    (copies, peers, comms)
}

/// The kernel's device <-> host copy counters (`cuMemcpyDtoH*`, `cuMemcpyHtoD*`).
pub fn read_staged(ebpf: &MapSet) -> Vec<crate::p2p::StagedCopies> {
    entries::<StagedKey, P2pCount>(ebpf, maps::STAGED_COPIES)
        .into_iter()
        .filter_map(|(k, c)| {
            let dir = crate::p2p::staged::StagedDir::from_u32(k.dir)?;
            Some(crate::p2p::StagedCopies { pid: k.tgid, dir, host: k.host, calls: c.calls, bytes: c.bytes })
        })
        .collect()
}

fn entries<K: aya::Pod, V: aya::Pod>(ebpf: &MapSet, name: &str) -> Vec<(K, V)> {
    let Some(map) = ebpf.map(name) else { return vec![] };
    let Ok(m) = BpfHashMap::<_, K, V>::try_from(map) else { return vec![] };
    m.iter().flatten().collect()
}
