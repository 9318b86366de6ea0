//! The stash flood (tests/workload/stash_flood.rs), for the host and VM tests:
//! thousands of threads inside a hooked user call that never return, and what the kernel's
//! stash (`USER_ARGS`) holds of them.

use std::{
    io::Write,
    process::{Child, Command, Stdio},
    time::Duration,
};

use aya::maps::{loaded_maps, HashMap, Map, MapData};

use crate::Lines;

pub struct StashFlood {
    pub child: Child,
    out: Lines,
    /// The flooding threads' ids, once flooded.
    pub tids: Vec<u32>,
}

impl StashFlood {
    /// Starts `gdr-stash-flood THREADS MODE`; it floods once told to ([`StashFlood::flood`]).
    pub fn spawn(threads: usize, mode: &str) -> Self {
        Self::spawn_as(threads, mode, None)
    }

    /// [`StashFlood::spawn`] as user `uid` (its group the same number, no other), where given.
    pub fn spawn_as(threads: usize, mode: &str, uid: Option<u32>) -> Self {
        Self::spawn_in(threads, mode, uid, None)
    }

    /// [`StashFlood::spawn_as`], the threads held inside `libcufile`'s `cuFileRead` where given
    /// (instead of libibverbs' `ibv_reg_mr`).
    pub fn spawn_in(threads: usize, mode: &str, uid: Option<u32>, libcufile: Option<&str>) -> Self {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(crate::binary("GDR_STASH_FLOOD_BIN", "gdr-stash-flood"));
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd
            .args([threads.to_string().as_str(), mode])
            .args(libcufile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gdr-stash-flood runs (cargo build --bins)");
        let out = Lines::new(child.stdout.take().unwrap());
        Self { child, out, tids: Vec::new() }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Floods and waits until every thread is inside the call (park) or gone (exit).
    pub fn flood(&mut self) {
        self.line();
        let l = self.out.next(Duration::from_secs(300), "gdr-stash-flood's flood");
        assert!(l.as_deref().is_some_and(|l| l.starts_with("flooded ")), "the flood did not happen: {l:?}");
        let l = self.out.next(Duration::from_secs(60), "gdr-stash-flood's thread ids").unwrap_or_default();
        let list = l.strip_prefix("tids ").unwrap_or_else(|| panic!("no thread ids: {l:.80}"));
        self.tids = list.split(',').filter_map(|t| t.parse().ok()).collect();
        self.tids.sort_unstable();
    }

    /// Lets the process exit (its parked threads with it) and reaps it.
    pub fn end(mut self) {
        self.line();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "gdr-stash-flood ended by {status}");
    }
}

impl Drop for StashFlood {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Ids of the BPF maps `pid` holds open (its /proc/PID/fdinfo `map_id` lines).
pub fn map_ids_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("map_id:")?.trim().parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// How many of `tids`' calls the tracer `tracer`'s map `name` (keys `hook << 32 | tid`, LRU or
/// plain hash, 48-byte values) holds. Panics when the tracer has no such map.
pub fn stashed(tracer: u32, name: &str, tids: &[u32]) -> usize {
    let ids = map_ids_of(tracer);
    let info = loaded_maps()
        .flatten()
        .find(|m| m.name_as_str() == Some(name) && ids.contains(&m.id()))
        .unwrap_or_else(|| panic!("gdr-trace (pid {tracer}) has no {name} map"));
    let open = || MapData::from_id(info.id()).expect("open the map by id");
    let map = HashMap::<MapData, u64, [u8; 48]>::try_from(Map::LruHashMap(open()))
        .or_else(|_| HashMap::<MapData, u64, [u8; 48]>::try_from(Map::HashMap(open())))
        .expect("a hash map of u64 keys and 48-byte values");
    map.keys().flatten().filter(|k| tids.contains(&(*k as u32))).count()
}

/// The trace's last `lost` record.
pub fn last_lost(recs: &[serde_json::Value]) -> &serde_json::Value {
    recs.iter().rev().find(|r| r["event"] == "lost").expect("a lost record")
}

/// What `last` (a `lost` record) charges to `tenant` ("uid N"): None when nothing.
pub fn charged(last: &serde_json::Value, tenant: &str) -> Option<u64> {
    let by_tenant = last["by_tenant"].as_array().unwrap_or_else(|| panic!("no by_tenant: {last}"));
    by_tenant.iter().find(|e| e["tenant"] == tenant).map(|e| e["lost"].as_u64().unwrap())
}

/// At least `refused` calls were refused over their share, all charged to `flooder` ("uid N"),
/// none to `victim`.
pub fn assert_refusals_charged(recs: &[serde_json::Value], refused: u64, flooder: &str, victim: &str) {
    let last = last_lost(recs);
    assert!(last["by_reason"]["over_budget"].as_u64().unwrap() >= refused, "{last}");
    assert!(charged(last, flooder).is_some_and(|n| n >= refused), "{last}");
    assert_eq!(charged(last, victim), None, "{last}");
}
