//! cgroup (v2) directories by inode, for processes gone before `/proc/PID/cgroup` could be read:
//! the id BPF's `bpf_get_current_cgroup_id` returns is the directory's inode.
//!
//! Bounded: one walk of the tree visits at most [`MAX_DIRS`] directories, its result is kept as
//! an index (so the next process of the same cgroup costs a lookup), and an id the index lacks
//! walks the tree again at most once per `min_interval`. A node that starts processes faster
//! than that pays at most one walk per interval, never one per process.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Directories one walk visits at most.
pub const MAX_DIRS: usize = 20_000;
/// The least time between two walks.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);

pub struct CgroupIndex {
    root: PathBuf,
    paths: HashMap<u64, String>,
    last_walk: Option<Instant>,
    min_interval: Duration,
    max_dirs: usize,
    /// Directories visited by all walks so far.
    pub visited: u64,
}

impl CgroupIndex {
    pub fn new(root: &Path) -> Self {
        Self::with_limits(root, MIN_INTERVAL, MAX_DIRS)
    }

    pub fn with_limits(root: &Path, min_interval: Duration, max_dirs: usize) -> Self {
        Self {
            root: root.to_path_buf(),
            paths: HashMap::new(),
            last_walk: None,
            min_interval,
            max_dirs,
            visited: 0,
        }
    }

    /// The path of cgroup `id` ("/system.slice/docker-<id>.scope"), when the tree holds it.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if let Some(p) = self.paths.get(&id) {
            return Some(p.clone());
        }
        if self.last_walk.is_some_and(|t| t.elapsed() < self.min_interval) {
            return None;
        }
        self.walk();
        self.paths.get(&id).cloned()
    }

    /// The id (inode) of the cgroup at `path` ("/system.slice/x.scope"), when the tree has it.
    pub fn id_of(&self, path: &str) -> Option<u64> {
        fs::metadata(self.root.join(path.trim_start_matches('/'))).ok().map(|m| m.ino())
    }

    /// Indexes the tree again, breadth-first, at most `max_dirs` directories.
    fn walk(&mut self) {
        self.last_walk = Some(Instant::now());
        self.paths.clear();
        let mut queue = std::collections::VecDeque::from([self.root.clone()]);
        let mut visited = 0;
        while let Some(dir) = queue.pop_front() {
            if visited >= self.max_dirs {
                break;
            }
            visited += 1;
            let Ok(meta) = fs::metadata(&dir) else { continue };
            let Ok(rel) = dir.strip_prefix(&self.root) else { continue };
            self.paths.insert(meta.ino(), format!("/{}", rel.to_string_lossy()));
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            queue.extend(
                entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()),
            );
        }
        self.visited += visited as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_walk_serves_many_processes_and_misses_do_not_walk_again_within_the_interval() {
        let dir = std::env::temp_dir().join(format!("gdr-cgidx-{}", std::process::id()));
        let root = dir.join("cgroup");
        for i in 0..50 {
            fs::create_dir_all(root.join(format!("kubepods.slice/pod{i}.slice"))).unwrap();
        }
        let leaf = root.join("kubepods.slice/pod7.slice");
        let ino = fs::metadata(&leaf).unwrap().ino();
        let mut idx = CgroupIndex::with_limits(&root, Duration::from_secs(3600), MAX_DIRS);
        assert_eq!(idx.path(ino).as_deref(), Some("/kubepods.slice/pod7.slice"));
        assert_eq!(idx.path(0), None);
        let one_walk = idx.visited;
        assert_eq!(one_walk, 52, "root, kubepods.slice and 50 pods");
        // Thousands of new processes, in known cgroups or in ones that went away: no more walks.
        for i in 0..5_000u64 {
            let id = if i % 2 == 0 { ino } else { u64::MAX - i };
            let _ = idx.path(id);
        }
        assert_eq!(idx.visited, one_walk, "a lookup per process, not a walk");
        // Past the interval, a miss walks again; a walk stops at its bound.
        let mut small = CgroupIndex::with_limits(&root, Duration::ZERO, 10);
        assert_eq!(small.path(u64::MAX), None);
        assert_eq!(small.path(u64::MAX), None);
        assert_eq!(small.visited, 20, "two walks of at most 10 directories");
        fs::remove_dir_all(&dir).unwrap();
    }
}
