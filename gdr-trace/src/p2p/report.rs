//! The P2P summary: per process, copies per device pair with their verdict, and the peer
//! access enabled.

use std::collections::BTreeMap;

use gdr_trace_common::p2p::verdict;
use serde::Serialize;

use super::{P2pCopies, PeerEnabled};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct P2pPair {
    pub src_device: u32,
    pub dst_device: u32,
    pub calls: u64,
    pub bytes: u64,
    /// `p2p-direct`, `p2p-staged`, or `unknown` (a context created before the trace).
    pub verdict: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PeerAccess {
    pub device: u32,
    pub peer_device: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct P2pProcess {
    pub pid: u32,
    pub comm: String,
    pub pairs: Vec<P2pPair>,
    pub peer_access: Vec<PeerAccess>,
}

impl P2pProcess {
    pub fn staged_bytes(&self) -> u64 {
        self.pairs.iter().filter(|p| p.verdict == "p2p-staged").map(|p| p.bytes).sum()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct P2pReport {
    pub processes: Vec<P2pProcess>,
}

pub fn verdict_name(v: u32) -> &'static str {
    match v {
        verdict::DIRECT => "p2p-direct",
        verdict::STAGED => "p2p-staged",
        _ => "unknown",
    }
}

pub fn build(
    copies: &BTreeMap<u32, Vec<P2pCopies>>,
    peers: &BTreeMap<u32, Vec<PeerEnabled>>,
    comms: &BTreeMap<u32, String>,
) -> P2pReport {
    let pids: std::collections::BTreeSet<u32> = copies.keys().chain(peers.keys()).copied().collect();
    let processes = pids
        .into_iter()
        .map(|pid| {
            let mut pairs: Vec<P2pPair> = copies
                .get(&pid)
                .into_iter()
                .flatten()
                .map(|c| P2pPair {
                    src_device: c.src_device,
                    dst_device: c.dst_device,
                    calls: c.calls,
                    bytes: c.bytes,
                    verdict: verdict_name(c.verdict),
                })
                .collect();
            pairs.sort_by_key(|p| (p.src_device, p.dst_device, p.verdict));
            let mut peer_access: Vec<PeerAccess> = peers
                .get(&pid)
                .into_iter()
                .flatten()
                .map(|p| PeerAccess { device: p.device, peer_device: p.peer_device })
                .collect();
            peer_access.sort_by_key(|p| (p.device, p.peer_device));
            P2pProcess { pid, comm: comms.get(&pid).cloned().unwrap_or_default(), pairs, peer_access }
        })
        .collect();
    P2pReport { processes }
}
