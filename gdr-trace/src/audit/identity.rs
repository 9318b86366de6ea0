//! Who a process is: user name, cgroup path, container. Learned live from /proc, /sys and
//! /etc/passwd when a process is first seen, or read back from a recording.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{
    cgroups::CgroupIndex,
    container::{self, Container},
};
use crate::events::Context;

/// What is known about one process (a `process` record in recordings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessFacts {
    pub pid: u32,
    pub comm: String,
    pub uid: u32,
    pub user: Option<String>,
    pub cgroup_id: u64,
    /// The cgroup path (`/system.slice/docker-<id>.scope`), as `/proc/PID/cgroup` shows it.
    pub cgroup: Option<String>,
    pub container: Option<Container>,
    /// The process has an NVIDIA device open or libcuda mapped (None: not known).
    pub uses_gpu: Option<bool>,
}

/// `name:x:uid:...` lines of a passwd file -> uid -> name (the first name wins, as getpwuid).
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut it = line.split(':');
        let (Some(name), Some(_), Some(uid)) = (it.next(), it.next(), it.next()) else { continue };
        if let Ok(uid) = uid.parse::<u32>() {
            out.entry(uid).or_insert_with(|| name.to_string());
        }
    }
    out
}

/// Finds the cgroup (v2) directory whose inode is `id` (the id BPF's `bpf_get_current_cgroup_id`
/// returns), with one bounded walk ([`CgroupIndex`] keeps the walk for the next processes).
pub fn cgroup_path_by_id(root: &Path, id: u64) -> Option<String> {
    CgroupIndex::new(root).path(id)
}

/// Signs that this machine runs containers: runtime sockets, Kubernetes cgroup trees.
pub fn container_host_markers(root: &Path) -> Vec<String> {
    [
        "run/containerd/containerd.sock",
        "run/crio/crio.sock",
        "var/run/docker.sock",
        "run/docker.sock",
        "run/podman/podman.sock",
        "sys/fs/cgroup/kubepods.slice",
        "sys/fs/cgroup/kubepods",
        "sys/fs/cgroup/systemd/kubepods",
    ]
    .iter()
    .filter(|p| root.join(p).exists())
    .map(|p| format!("/{p}"))
    .collect()
}

/// A process's start time (clock ticks after boot: field 22 of /proc/PID/stat). With the pid
/// it names one process: pids are reused, start times of one pid are not.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    // The comm (field 2) may hold spaces and parentheses: count from the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Learns each process's facts from the live system, once per process: per (pid, start time),
/// so a reused pid never inherits another process's user, container or pod.
pub struct Resolver {
    proc_root: PathBuf,
    /// For processes gone before their /proc/PID/cgroup was read.
    cgroups: CgroupIndex,
    passwd_path: PathBuf,
    passwd: Option<HashMap<u32, String>>,
    known: HashMap<u32, ProcessFacts>,
    /// Start time of the process each `known` entry is about, when it could be read.
    started: HashMap<u32, u64>,
    /// Past this many entries, those of exited processes are dropped.
    max_known: usize,
}

/// Entries kept before exited processes are pruned (a busy node starts thousands an hour).
const MAX_KNOWN: usize = 2048;

impl Resolver {
    pub fn new(passwd: &Path) -> Self {
        Self::with_roots(Path::new("/proc"), Path::new("/sys/fs/cgroup"), passwd)
    }

    /// Reading another /proc and cgroup tree (tests).
    pub fn with_roots(proc_root: &Path, cgroup_root: &Path, passwd: &Path) -> Self {
        Self {
            proc_root: proc_root.to_path_buf(),
            cgroups: CgroupIndex::new(cgroup_root),
            passwd_path: passwd.to_path_buf(),
            passwd: None,
            known: HashMap::new(),
            started: HashMap::new(),
            max_known: MAX_KNOWN,
        }
    }

    fn user(&mut self, uid: u32) -> Option<String> {
        let path = &self.passwd_path;
        let map = self.passwd.get_or_insert_with(|| {
            fs::read_to_string(path).map(|t| parse_passwd(&t)).unwrap_or_else(|e| {
                tracing::warn!("{}: {e}: user names unknown", path.display());
                HashMap::new()
            })
        });
        map.get(&uid).cloned()
    }

    /// Facts of the process a record came from: looked up at its first record, while it runs.
    /// Returns them and whether they are new.
    pub fn resolve(&mut self, ctx: &Context) -> (&ProcessFacts, bool) {
        let started = fs::read_to_string(self.proc_root.join(format!("{}/stat", ctx.pid)))
            .ok()
            .and_then(|t| parse_start_time(&t));
        let known = self.known.contains_key(&ctx.pid);
        // Another process with the same pid now (gone ones can't be told apart: kept).
        let reused = known
            && match (self.started.get(&ctx.pid), started) {
                (Some(was), Some(now)) => *was != now,
                (None, Some(_)) => true,
                _ => false,
            };
        // The record's cgroup (the kernel's, when it happened) is not the one learnt: another
        // process (a pid reused while the tracer was behind), or one that moved.
        let moved = known && ctx.cgroup_id != 0 && self.known[&ctx.pid].cgroup_id != ctx.cgroup_id;
        let fresh = !known || reused || moved;
        if !known && self.known.len() >= self.max_known {
            self.prune_exited();
        }
        if fresh {
            match started {
                Some(t) => self.started.insert(ctx.pid, t),
                None => self.started.remove(&ctx.pid),
            };
            // /proc is read now: it speaks of the record's process only when its cgroup is the
            // record's (else the pid is another process's by now); the record's id comes first.
            let from_proc = fs::read_to_string(self.proc_root.join(format!("{}/cgroup", ctx.pid)))
                .ok()
                .and_then(|t| container::path_from_proc(&t))
                .filter(|p| ctx.cgroup_id == 0 || self.cgroups.id_of(p).is_none_or(|id| id == ctx.cgroup_id));
            let cgroup = from_proc.or_else(|| self.cgroups.path(ctx.cgroup_id));
            let facts = ProcessFacts {
                pid: ctx.pid,
                comm: ctx.comm.clone(),
                uid: ctx.uid,
                user: self.user(ctx.uid),
                cgroup_id: ctx.cgroup_id,
                container: cgroup.as_deref().and_then(container::parse),
                cgroup,
                // What the pipeline learns (recordings write it from the aggregator).
                uses_gpu: None,
            };
            self.known.insert(ctx.pid, facts);
        }
        (&self.known[&ctx.pid], fresh)
    }

    /// Forgets processes that have exited; if most are alive, allows twice as many before the
    /// next pass (each pass costs one stat per entry).
    fn prune_exited(&mut self) {
        let root = &self.proc_root;
        self.known.retain(|pid, _| root.join(pid.to_string()).exists());
        self.started.retain(|pid, _| root.join(pid.to_string()).exists());
        self.max_known = (self.known.len() * 2).max(MAX_KNOWN);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn passwd_names_by_uid() {
        let p = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\n# comment\nalice:x:1000:1000::/home/alice:/bin/sh\n\
             toor:x:0:0::/:/bin/sh\nbroken line\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        );
        assert_eq!(p.get(&0).map(String::as_str), Some("root"), "first name wins");
        assert_eq!(p.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(p.get(&65534).map(String::as_str), Some("nobody"));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn cgroup_found_by_inode_and_markers() {
        let dir = std::env::temp_dir().join(format!("gdr-cg-{}", std::process::id()));
        let leaf = dir.join("sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice");
        fs::create_dir_all(&leaf).unwrap();
        let ino = fs::metadata(&leaf).unwrap().ino();
        let root = dir.join("sys/fs/cgroup");
        assert_eq!(cgroup_path_by_id(&root, ino).as_deref(), Some("/kubepods.slice/kubepods-pod1.slice"));
        assert_eq!(cgroup_path_by_id(&root, 0), None);
        assert_eq!(container_host_markers(&dir), vec!["/sys/fs/cgroup/kubepods.slice"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reused_pid_is_looked_up_again_not_given_the_old_process_facts() {
        const A: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
        const B: &str = "9e8d7c6b5a4938271605f4e3d2c1b0a99e8d7c6b5a4938271605f4e3d2c1b0a9";
        let dir = std::env::temp_dir().join(format!("gdr-reuse-{}", std::process::id()));
        let proc = dir.join("proc");
        fs::create_dir_all(proc.join("42")).unwrap();
        let run = |start: u64, id: &str| {
            let stat =
                format!("42 (we (ird) name) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {start} 1 2\n");
            fs::write(proc.join("42/stat"), stat).unwrap();
            fs::write(proc.join("42/cgroup"), format!("0::/system.slice/docker-{id}.scope\n")).unwrap();
        };
        let mut r = Resolver::with_roots(&proc, &dir.join("cgroup"), &dir.join("passwd"));
        let ctx = Context { pid: 42, tid: 42, comm: "w".into(), uid: 1000, cgroup_id: 0, ts_ns: 1 };
        run(1000, A);
        let (f, fresh) = r.resolve(&ctx);
        assert!(fresh);
        assert_eq!(f.container.as_ref().and_then(|c| c.id.as_deref()), Some(A));
        assert!(!r.resolve(&ctx).1, "the same process: cached");
        // Process A exited; another tenant's process got pid 42.
        run(2000, B);
        let (f, fresh) = r.resolve(&ctx);
        assert!(fresh, "a new process: looked up again");
        assert_eq!(f.container.as_ref().and_then(|c| c.id.as_deref()), Some(B));
        assert_eq!(
            parse_start_time("1 (a) b) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 9"),
            Some(777)
        );
        assert_eq!(parse_start_time("garbage"), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The tracer was behind; the record is of a process in container A,
    /// but pid 42 is by now another tenant's process in container B. The record's cgroup id
    /// (the kernel's, at the event) decides, not /proc read now.
    #[test]
    fn a_record_is_attributed_by_its_own_cgroup_not_by_whoever_has_the_pid_now() {
        const A: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
        const B: &str = "9e8d7c6b5a4938271605f4e3d2c1b0a99e8d7c6b5a4938271605f4e3d2c1b0a9";
        let dir = std::env::temp_dir().join(format!("gdr-reuse-cg-{}", std::process::id()));
        let (proc, cg) = (dir.join("proc"), dir.join("cgroup"));
        let scope = |id: &str| format!("system.slice/docker-{id}.scope");
        for id in [A, B] {
            fs::create_dir_all(cg.join(scope(id))).unwrap();
        }
        let ino = |id: &str| fs::metadata(cg.join(scope(id))).unwrap().ino();
        fs::create_dir_all(proc.join("42")).unwrap();
        fs::write(proc.join("42/stat"), "42 (b) S 1 42 42 0 -1 0 1 0 0 0 0 0 0 0 20 0 1 0 2000 1 2\n")
            .unwrap();
        fs::write(proc.join("42/cgroup"), format!("0::/{}\n", scope(B))).unwrap();
        let mut r = Resolver::with_roots(&proc, &cg, &dir.join("passwd"));
        let ctx = |id: &str| Context {
            pid: 42,
            tid: 42,
            comm: "w".into(),
            uid: 1000,
            cgroup_id: ino(id),
            ts_ns: 1,
        };
        let (f, fresh) = r.resolve(&ctx(A));
        assert!(fresh);
        assert_eq!(f.container.as_ref().and_then(|c| c.id.as_deref()), Some(A), "{f:?}");
        // B's own records, same pid and start time: looked up again, and B's.
        let (f, fresh) = r.resolve(&ctx(B));
        assert!(fresh, "another cgroup: another process");
        assert_eq!(f.container.as_ref().and_then(|c| c.id.as_deref()), Some(B));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn facts_of_exited_processes_are_dropped_past_the_bound() {
        let dir = std::env::temp_dir().join(format!("gdr-prune-{}", std::process::id()));
        let proc = dir.join("proc");
        let mut r = Resolver::with_roots(&proc, &dir.join("cgroup"), &dir.join("passwd"));
        r.max_known = 4;
        let ctx = |pid| Context { pid, tid: pid, comm: "w".into(), uid: 0, cgroup_id: 0, ts_ns: 1 };
        for pid in 1..=4 {
            fs::create_dir_all(proc.join(pid.to_string())).unwrap();
            r.resolve(&ctx(pid));
        }
        fs::remove_dir_all(proc.join("2")).unwrap();
        fs::remove_dir_all(proc.join("3")).unwrap();
        r.resolve(&ctx(5));
        let mut left: Vec<u32> = r.known.keys().copied().collect();
        left.sort_unstable();
        assert_eq!(left, [1, 4, 5], "exited 2 and 3 forgotten");
        fs::remove_dir_all(&dir).unwrap();
    }
}
