//! The table of cuFile calls in flight (`GDS_INFLIGHT`, one entry per thread inside a hooked
//! cuFile function, 4,096 in all) holds up like the libibverbs one: tracing the whole node, one
//! user's calls cannot crowd out another's, and a thread that exits inside a call takes its
//! entry with it. The threads are held inside the real libcufile's `cuFileRead` (a stack that
//! faults in its prologue, after the uprobe fired: `gdr-stash-flood`).

use aya::maps::{loaded_maps, HashMap, Map, MapData};
use gdr_trace_tests::{
    stash_flood::{assert_refusals_charged, last_lost, map_ids_of, StashFlood},
    Tracer,
};

const LIBCUFILE: &str = env!("GDR_TEST_LIBCUFILE");
/// More threads than the table has entries.
const FLOOD: usize = 5000;
const ENTRIES: usize = 4096;

fn watching() -> Tracer {
    let args = ["watch", "--json", "--interval", "0", "--libcufile", LIBCUFILE];
    let t = Tracer::spawn(&args.map(String::from));
    assert!(t.attached("cuFileRead").is_some_and(|a| a.contains("uprobe")), "{}", t.hooks);
    t
}

/// How many of `tids` have a cuFile call in the tracer `tracer`'s `GDS_INFLIGHT` (keys: tids).
fn cufile_in_flight(tracer: u32, tids: &[u32]) -> usize {
    const ARGS: usize = std::mem::size_of::<gdr_trace_common::storage::GdsArgs>();
    let ids = map_ids_of(tracer);
    let info = loaded_maps()
        .flatten()
        .find(|m| m.name_as_str() == Some("GDS_INFLIGHT") && ids.contains(&m.id()))
        .unwrap_or_else(|| panic!("gdr-trace (pid {tracer}) has no GDS_INFLIGHT map"));
    let data = MapData::from_id(info.id()).expect("open the map by id");
    let map = HashMap::<MapData, u32, [u8; ARGS]>::try_from(Map::HashMap(data)).expect("a hash map of tids");
    map.keys().flatten().filter(|k| tids.contains(k)).count()
}

/// 5,000 threads of uid 65534 held inside `cuFileRead`: the table takes their calls until it is
/// half full, then refuses that user (each refusal its own `over_budget` loss, charged to it);
/// another user's calls made after the flood are all on record (a table filled by the first
/// user refused them).
#[test]
fn one_users_cufile_calls_in_flight_leave_room_for_anothers() {
    let mut t = watching();
    let tracer = t.child.id();
    let mut flood = StashFlood::spawn_in(FLOOD, "park", Some(65534), Some(LIBCUFILE));
    flood.flood();
    assert_eq!(flood.tids.len(), FLOOD);
    let held = cufile_in_flight(tracer, &flood.tids);
    // (Threads on two CPUs may each pass the check before either counts: a few over half.)
    assert!(
        (ENTRIES / 2..ENTRIES / 2 + 128).contains(&held),
        "{held} of {FLOOD} calls of one user in flight"
    );
    let mut victim = StashFlood::spawn_in(16, "park", Some(1001), Some(LIBCUFILE));
    victim.flood();
    assert_eq!(cufile_in_flight(tracer, &victim.tids), 16, "the second user's calls in flight");
    victim.end();
    flood.end();
    let recs = t.terminate();
    assert_refusals_charged(&recs, (FLOOD - held) as u64, "uid 65534", "uid 1001");
}

/// 5,000 threads, a few at a time, each ending inside `cuFileRead`: none leaves its entry (the
/// table would have been full after 4,096), and nothing was refused.
#[test]
fn a_thread_that_exits_inside_a_cufile_call_leaves_nothing_in_flight() {
    let mut t = watching();
    let mut f = StashFlood::spawn_in(FLOOD, "exit", None, Some(LIBCUFILE));
    f.flood();
    assert_eq!(f.tids.len(), FLOOD);
    let left = cufile_in_flight(t.child.id(), &f.tids);
    assert_eq!(left, 0, "{left} calls of {FLOOD} threads that exited inside them still in flight");
    f.end();
    let recs = t.terminate();
    let last = last_lost(&recs);
    assert_eq!(
        (&last["by_reason"]["stash_full"], &last["by_reason"]["over_budget"]),
        (&0.into(), &0.into()),
        "{last}"
    );
}
