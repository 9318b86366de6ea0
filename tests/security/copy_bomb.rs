//! The copy bomb: a tenant mapping many copies of a hooked library. Where
//! the kernel makes uprobe_multi links each copy costs the follower two links, whatever its
//! number of hooked offsets, and no perf-event uprobe (whose release waits for grace periods
//! one after another under the kernel's trace-event mutex); at the end the follower releases
//! them together. The teardown time is printed here and measured, for 10,000 copies, by
//! `cargo xtask bench --teardown-only` (docs/performance.md).

use std::time::{Duration, Instant};

use gdr_trace_tests::{kernel_has_uprobe_multi, skip, Tracer};
use serde_json::Value;

use super::{
    follower::{descriptors, follower_of},
    library::{ibverbs_copies, Mapper},
};

const COPIES: usize = 200;

#[test]
fn a_copy_bomb_costs_two_links_a_copy_released_together() {
    let name = "a_copy_bomb_costs_two_links_a_copy_released_together";
    if !kernel_has_uprobe_multi() {
        return skip(name, "this kernel makes no uprobe_multi links (Linux 6.6+)");
    }
    let dir = tempfile::tempdir().unwrap();
    let copies = ibverbs_copies(dir.path(), COPIES);
    let args = ["watch", "--json", "--no-storage", "--interval", "0", "--max-copies-per-user", "0"];
    let args: Vec<String> = args.iter().chain(&["--max-uprobes", "0"]).map(|s| s.to_string()).collect();
    let mut t = Tracer::spawn(&args);
    let follower = follower_of(t.child.id()).unwrap_or_else(|e| panic!("{e}"));
    let tenant = Mapper::start(65534, &copies);
    let root = dir.path().display().to_string();
    let ours =
        |r: &Value| r["event"] == "library_copy" && r["path"].as_str().is_some_and(|p| p.starts_with(&root));
    let mut attached = std::collections::BTreeMap::new();
    let started = Instant::now();
    while attached.len() < COPIES {
        assert!(started.elapsed() < Duration::from_secs(300), "{} of {COPIES} copies hooked", attached.len());
        for r in t.until("a copy of the tenant's", |r| ours(r) && r["state"] == "attached") {
            if ours(&r) && r["state"] == "attached" {
                attached.insert(r["path"].as_str().unwrap_or_default().to_string(), r);
            }
        }
    }
    for r in attached.values() {
        assert_eq!(r["via"], "uprobe_multi", "{r}");
        assert!(r["hooked"].as_array().is_some_and(|h| h.len() >= 6), "every libibverbs function: {r}");
    }
    let fds = descriptors(follower);
    let links = fds.iter().filter(|l| *l == "anon_inode:bpf_link").count();
    let perf = fds.iter().filter(|l| *l == "anon_inode:[perf_event]").count();
    assert_eq!((links, perf), (2 * COPIES, 0), "two links a copy, no perf-event uprobe");
    // The end: the follower releases every link at once, then exits.
    let end = Instant::now();
    t.terminate();
    // Gone, or a zombie: its descriptors are released by then.
    let running = || {
        std::fs::read_to_string(format!("/proc/{follower}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    while running() {
        assert!(end.elapsed() < Duration::from_secs(300), "the follower still releasing after 300 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "{COPIES} copies ({} links): the follower was gone {:?} after the end",
        2 * COPIES,
        end.elapsed()
    );
    drop(tenant);
}
