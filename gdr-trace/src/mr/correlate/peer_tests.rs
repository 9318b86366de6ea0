//! Peer registrations in the flows of nvidia-peermem 580.65.06+ (docs/drivers.md): the
//! persistent client claims with `nv_mem_acquire_nc`, whose trial pin is persistent too, so
//! the trial and the registration's own pin are the same call; only the one given back is the
//! trial.

use super::*;
use crate::{events::Context, mr::classify::classify, mr::classify::Verdict};

const VA: u64 = 0x7f00_0000_0000;

fn record(kind: MrKind, hook: &str, ts: u64, ret: i64, data: u64) -> MrRecord {
    let ctx = Context { pid: 10, tid: 5, comm: "w".into(), uid: 0, cgroup_id: 1, ts_ns: ts };
    let mut r = MrRecord::at(kind, &format!("kprobe:{hook}"), ctx, VA, 1 << 20, data);
    r.ret = ret;
    r.failed = ret < 0;
    r.aux = i64::from(kind == MrKind::GpuEvidence);
    r
}

/// Evidence records (hook, ret, free-callback data) in the order they return, then
/// ib_umem_get_peer; the registrations and everything else that came out.
fn register(mode: Option<PeermemMode>, calls: &[(&str, i64, u64)]) -> (Vec<Registration>, Vec<Joined>) {
    let mut c = Correlator::new().with_peermem(mode);
    let mut out = vec![];
    for (i, (hook, ret, data)) in calls.iter().enumerate() {
        c.push(record(MrKind::GpuEvidence, hook, 1 + i as u64, *ret, *data), &mut out);
    }
    assert!(out.is_empty(), "evidence waits for its registration: {out:?}");
    c.push(record(MrKind::Register, "ib_umem_get_peer", 100, 0, 0xaa), &mut out);
    c.flush(&mut out);
    let regs = out.iter().filter_map(|j| if let Joined::Registered(r) = j { Some(r.clone()) } else { None });
    (regs.collect(), out)
}

/// nv_mem_acquire_nc's trial (persistent pin + unpin), its "mine", then the client's own pin.
const ACQUIRE_NC: [(&str, i64, u64); 3] = [
    ("nvidia_p2p_get_pages_persistent", 0, 0),
    ("nvidia_p2p_put_pages_persistent", 0, 0),
    ("nv_mem_acquire_nc", 1, 0),
];
const PERSISTENT_PIN: [(&str, i64, u64); 3] =
    [("nvidia_p2p_get_pages_persistent", 0, 0), ("nv_mem_get_pages_nc", 0, 0), ("ib_peer_umem_get", 0, 0)];

#[test]
fn the_580_default_flow_is_claimed_by_nv_mem_acquire_nc_and_its_trial_is_not_the_pin() {
    let calls: Vec<_> = ACQUIRE_NC.iter().chain(&PERSISTENT_PIN).copied().collect();
    let (r, out) = register(Some(PeermemMode::Persistent), &calls);
    assert_eq!(r.len(), 1, "{out:?}");
    let p = &r[0].peer;
    assert!(p.entered && p.claimed && p.gpu_pages, "{p:?}");
    assert_eq!(p.claim.map(|s| s.to_string()).as_deref(), Some("kprobe:nv_mem_acquire_nc"));
    assert_eq!(p.client.as_deref(), Some("nv_mem"));
    assert_eq!(p.trial_pins, 1, "the persistent pin given back inside acquire");
    assert!(p.p2p_data.is_empty());
    assert_eq!(classify(&r[0]), Verdict::GpuPeermem);
    assert!(!out.iter().any(|j| matches!(j, Joined::GpuPin(_))), "no pin is GDS's: {out:?}");
    assert!(!r[0].sources.iter().any(|s| s == "kprobe:nv_mem_acquire"), "{:?}", r[0].sources);
}

#[test]
fn a_580_trial_pin_alone_proves_no_gpu_pages() {
    // acquire_nc said "mine" after its trial; the client's own persistent pin then failed.
    let calls = [
        ACQUIRE_NC[0],
        ACQUIRE_NC[1],
        ACQUIRE_NC[2],
        ("nvidia_p2p_get_pages_persistent", -22, 0),
        ("nv_mem_get_pages_nc", -22, 0),
        ("ib_peer_umem_get", -22, 0),
    ];
    let (r, _) = register(Some(PeermemMode::Persistent), &calls);
    let p = &r[0].peer;
    assert!(p.claimed && !p.gpu_pages, "{p:?}");
    assert_eq!(p.trial_pins, 1);
    assert_ne!(classify(&r[0]), Verdict::GpuPeermem);
}

#[test]
fn nv_mem_acquire_nc_alone_names_the_persistent_client_by_the_mode() {
    // get_pages not hooked (missing, or inlined by a build): the acquire names the client.
    let calls = [ACQUIRE_NC[0], ACQUIRE_NC[1], ACQUIRE_NC[2], PERSISTENT_PIN[0], PERSISTENT_PIN[2]];
    for (mode, want) in [
        (Some(PeermemMode::Persistent), Some("nv_mem")),
        (Some(PeermemMode::Legacy), Some("nv_mem_nc")),
        (None, None),
    ] {
        let (r, _) = register(mode, &calls);
        assert_eq!(r[0].peer.client.as_deref(), want, "{mode:?}");
        assert!(r[0].peer.gpu_pages, "the pin kept is the registration's");
        assert_eq!(classify(&r[0]), Verdict::GpuPeermem, "{mode:?}");
    }
}

#[test]
fn the_580_legacy_mode_keeps_nv_mem_acquire_for_nv_mem_and_acquire_nc_for_nv_mem_nc() {
    // With invalidation support ib_core asks nv_mem first: nv_mem_acquire, legacy trial pin.
    let calls = [
        ("nvidia_p2p_get_pages", 0, 0xc0de),
        ("nvidia_p2p_put_pages", 0, 0),
        ("nv_mem_acquire", 1, 0),
        ("nvidia_p2p_get_pages", 0, 0xdada),
        ("nv_mem_get_pages", 0, 0),
        ("ib_peer_umem_get", 0, 0),
    ];
    let (r, _) = register(Some(PeermemMode::Legacy), &calls);
    let p = &r[0].peer;
    assert_eq!(
        (p.claim.map(|s| s.to_string()).as_deref(), p.client.as_deref()),
        (Some("kprobe:nv_mem_acquire"), Some("nv_mem"))
    );
    assert_eq!((p.trial_pins, p.p2p_data.as_slice()), (1, &[0xdada][..]));

    // Without it, nv_mem is skipped: nv_mem_nc claims with nv_mem_acquire_nc.
    let calls: Vec<_> = ACQUIRE_NC.iter().chain(&PERSISTENT_PIN).copied().collect();
    let (r, _) = register(Some(PeermemMode::Legacy), &calls);
    let p = &r[0].peer;
    assert_eq!(
        (p.claim.map(|s| s.to_string()).as_deref(), p.client.as_deref()),
        (Some("kprobe:nv_mem_acquire_nc"), Some("nv_mem_nc"))
    );
}

#[test]
fn an_acquire_that_says_not_mine_is_no_claim() {
    let calls = [ACQUIRE_NC[0], ("nv_mem_acquire_nc", 0, 0), ("ib_peer_umem_get", -14, 0)];
    let (r, _) = register(Some(PeermemMode::Persistent), &calls);
    let p = &r[0].peer;
    assert!(!p.claimed && p.claim.is_none() && p.client.is_none(), "{p:?}");
    assert_ne!(classify(&r[0]), Verdict::GpuPeermem);
}
