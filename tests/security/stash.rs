//! Threads that enter a hooked user call and never return (a fault
//! handler that parks or ends the thread, as a siglongjmp would) cannot fill the kernel's stash
//! of calls in flight, and what they left goes when they exit.

use gdr_trace_tests::{
    stash_flood::{assert_refusals_charged, charged, last_lost, stashed, StashFlood},
    Tracer,
};
use serde_json::Value;

const THREADS: usize = 5000;

/// A system-wide trace: it goes on after the flooding process exits.
fn watching() -> Tracer {
    let t = Tracer::spawn(&["watch", "--json", "--no-storage", "--interval", "0"].map(String::from));
    assert_eq!(t.attached("ibv_reg_mr").as_deref(), Some("uprobe+uretprobe"), "{}", t.hooks);
    t
}

fn lost(recs: &[Value]) -> Value {
    last_lost(recs)["by_reason"].clone()
}

#[test]
fn parked_calls_are_all_stashed_and_leave_with_their_threads() {
    let mut t = watching();
    let tracer = t.child.id();
    let mut f = StashFlood::spawn(THREADS, "park");
    f.flood();
    assert_eq!(f.tids.len(), THREADS);
    // Every parked call is stashed: nothing was refused (a full plain hash map refused the
    // 4,097th and every later call of every process).
    let before = stashed(tracer, "USER_ARGS", &f.tids);
    assert!(before >= THREADS * 9 / 10, "{before} of {THREADS} parked calls stashed");
    let tids = f.tids.clone();
    f.end();
    // Each thread's exit took its call out (nothing else would: the calls never return).
    let after = stashed(tracer, "USER_ARGS", &tids);
    assert_eq!(after, 0, "{after} calls of exited threads still stashed");
    let recs = t.terminate();
    assert_eq!(lost(&recs)["stash_full"], 0, "{}", lost(&recs));
}

#[test]
fn a_thread_that_exits_inside_a_call_leaves_nothing_stashed() {
    let mut t = watching();
    let mut f = StashFlood::spawn(THREADS, "exit");
    f.flood();
    assert_eq!(f.tids.len(), THREADS);
    let left = stashed(t.child.id(), "USER_ARGS", &f.tids);
    assert_eq!(left, 0, "{left} calls of {THREADS} threads that exited inside them still stashed");
    f.end();
    let recs = t.terminate();
    assert_eq!(lost(&recs)["stash_full"], 0, "{}", lost(&recs));
}

/// Tracing the whole node, one user's calls in flight cannot crowd out
/// another's. 10,000 threads of uid 65534 park inside `ibv_reg_mr`, each holding two entries
/// (`ibv_reg_mr` calls `ibv_reg_mr_iova2`, both hooked): the table (32,768 entries,
/// evicting nothing) takes their calls until it is half full, then refuses that user (far past
/// its 4,096), each refusal its own `over_budget` loss; a second user's calls, parked before the
/// flood, all stay on record (an LRU table evicted them), and none of the loss is charged to it.
#[test]
fn one_users_parked_calls_leave_room_for_anothers() {
    const FLOOD: usize = 10_000;
    const HALF: usize = 32768 / 2;
    let mut t = watching();
    let tracer = t.child.id();
    // The second user's calls first: a flood after them must neither evict nor refuse them.
    let mut victim = StashFlood::spawn_as(16, "park", Some(1001));
    victim.flood();
    let before = stashed(tracer, "USER_ARGS", &victim.tids);
    let mut flood = StashFlood::spawn_as(FLOOD, "park", Some(65534));
    flood.flood();
    assert_eq!(flood.tids.len(), FLOOD);
    let held = stashed(tracer, "USER_ARGS", &flood.tids);
    // (Threads on two CPUs may each pass the check before either counts: a few over half.)
    assert!((HALF..HALF + 256).contains(&(held + before)), "{held} of {FLOOD} calls of one user stashed");
    assert_eq!(
        stashed(tracer, "USER_ARGS", &victim.tids),
        before,
        "the second user's calls are all still on record"
    );
    // (`ibv_reg_mr` calls `ibv_reg_mr_iova2`: a parked thread may hold both entries.)
    let missing: Vec<u32> =
        victim.tids.iter().copied().filter(|t| stashed(tracer, "USER_ARGS", &[*t]) == 0).collect();
    assert!(missing.is_empty(), "calls of the second user not on record: {missing:?}");
    victim.end();
    flood.end();
    let recs = t.terminate();
    assert_refusals_charged(&recs, (2 * FLOOD).saturating_sub(held) as u64, "uid 65534", "uid 1001");
}

/// Coalitions: three uids flooding one after another (6,000 threads each, up to 36,000 entries:
/// more than the table's 32,768) hold at most half the table plus a share (4,096) each — the
/// bound docs/security.md states — and a fourth user's calls made after them all get in (a
/// full table refused them); each refusal is charged to the uid that made it.
#[test]
fn a_coalition_of_uids_holds_half_the_table_plus_a_share_each() {
    const EACH: usize = 6000;
    const HALF: usize = 32768 / 2;
    const SHARE: usize = 32768 / 8;
    let uids = [65534, 65533, 65532];
    let mut t = watching();
    let tracer = t.child.id();
    let mut floods: Vec<StashFlood> = uids
        .iter()
        .map(|&uid| {
            let mut f = StashFlood::spawn_as(EACH, "park", Some(uid));
            f.flood();
            f
        })
        .collect();
    let held: usize = floods.iter().map(|f| stashed(tracer, "USER_ARGS", &f.tids)).sum();
    // (`ibv_reg_mr` calls `ibv_reg_mr_iova2`: a parked thread may hold both entries; threads on
    // two CPUs may each pass the check before either counts: a few over.)
    let bound = HALF + uids.len() * SHARE + 256;
    assert!((HALF..bound).contains(&held), "{held} calls of {} uids stashed", uids.len());
    let mut victim = StashFlood::spawn_as(16, "park", Some(1001));
    victim.flood();
    let missing: Vec<u32> =
        victim.tids.iter().copied().filter(|t| stashed(tracer, "USER_ARGS", &[*t]) == 0).collect();
    assert!(missing.is_empty(), "calls of the fourth user not on record: {missing:?}");
    victim.end();
    for f in floods.drain(..) {
        f.end();
    }
    let recs = t.terminate();
    let last = last_lost(&recs);
    let charged = |uid: u32| charged(last, &format!("uid {uid}")).unwrap_or(0);
    // Past half, at least the uids over their share were refused; never the fourth user.
    assert!(uids.iter().map(|&u| charged(u)).sum::<u64>() > 0, "{last}");
    assert_eq!(charged(1001), 0, "{last}");
}
