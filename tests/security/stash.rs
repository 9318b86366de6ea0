//! Issue 23, finding 1: threads that enter a hooked user call and never return (a fault
//! handler that parks or ends the thread, as a siglongjmp would) cannot fill the kernel's stash
//! of calls in flight, and what they left goes when they exit.

use gdr_trace_tests::{
    stash_flood::{stashed, StashFlood},
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
    recs.iter().rev().find(|r| r["event"] == "lost").expect("a lost record")["by_reason"].clone()
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
