//! What the calls made inside a peer-memory registration prove: nvidia-peermem's acquire (the
//! claim: `nv_mem_acquire`, or `nv_mem_acquire_nc` for the persistent client from driver
//! 580.65.06), its get_pages (which client, hence its name), the P2P pins it kept (acquire's
//! trial pin, legacy or persistent API, is given back inside the registration and does not
//! count).

use super::joined::{push_source, Registration};
use crate::{events::MrRecord, facts::PeermemMode, hooks::Role};

/// What the calls made inside a peer registration say about it, in the order they returned.
pub(super) fn apply_evidence(r: &mut Registration, evidence: Vec<MrRecord>, mode: Option<PeermemMode>) {
    // Pins made inside the registration and not given back in it: (GPU VA, free-callback data).
    let mut held: Vec<(u64, u64)> = Vec::new();
    for e in evidence {
        let ok = !e.failed;
        match e.role() {
            Some(Role::PeerEntered) => r.peer.entered |= ok,
            // acquire returns 1 when the range is the client's (GPU memory), 0 otherwise.
            Some(Role::PeerClient) if e.ret == 1 => {
                r.peer.claimed = true;
                r.peer.claim = Some(e.source);
            }
            Some(Role::PeerClientPersistent) if e.ret == 1 => {
                r.peer.claimed = true;
                r.peer.claim = Some(e.source);
                // Only the persistent client has this acquire; get_pages, if seen, says the same.
                if r.peer.client.is_none() {
                    r.peer.client = mode.map(persistent_client);
                }
            }
            Some(Role::PeerPages) if ok => {
                r.peer.claimed = true;
                r.peer.gpu_pages = true;
                // Only the invalidatable client has this get_pages, in every version.
                r.peer.client = Some("nv_mem".into());
            }
            Some(Role::PeerPagesPersistent) if ok => {
                r.peer.claimed = true;
                r.peer.gpu_pages = true;
                r.peer.client = mode.map(persistent_client);
            }
            Some(Role::GpuPinned) if ok => held.push((e.addr, e.handle)),
            Some(Role::GpuUnpinned) => {
                // Given back before the registration returned: acquire's trial pin.
                if let Some(i) = held.iter().rposition(|(va, _)| *va == e.addr) {
                    held.remove(i);
                    r.peer.trial_pins += 1;
                }
            }
            _ => {}
        }
        push_source(&mut r.sources, e.source);
    }
    // A pin still held is the registration's own (a trial pin is given back at once).
    r.peer.gpu_pages |= !held.is_empty();
    r.peer.p2p_data.extend(held.into_iter().map(|(_, data)| data).filter(|d| *d != 0));
}

/// The persistent client's name in nvidia-peermem's mode.
fn persistent_client(mode: PeermemMode) -> String {
    match mode {
        PeermemMode::Persistent => "nv_mem".into(),
        PeermemMode::Legacy => "nv_mem_nc".into(),
    }
}
