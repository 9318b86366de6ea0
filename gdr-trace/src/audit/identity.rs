//! Who a process is: user name, cgroup path, container. Learned live from /proc, /sys and
//! /etc/passwd when a process is first seen, or read back from a recording.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::container::{self, Container};
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
/// returns), breadth-first and bounded: for processes gone before they could be looked up.
pub fn cgroup_path_by_id(root: &Path, id: u64) -> Option<String> {
    if id == 0 {
        return None;
    }
    let mut queue = vec![root.to_path_buf()];
    let mut visited = 0;
    while let Some(dir) = queue.pop() {
        visited += 1;
        if visited > 20_000 {
            return None;
        }
        let Ok(meta) = fs::metadata(&dir) else { continue };
        if meta.ino() == id {
            let rel = dir.strip_prefix(root).ok()?.to_string_lossy().into_owned();
            return Some(format!("/{rel}"));
        }
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        queue.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
    }
    None
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

/// Learns each process's facts from the live system, once per process.
pub struct Resolver {
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    passwd_path: PathBuf,
    passwd: Option<HashMap<u32, String>>,
    known: HashMap<u32, ProcessFacts>,
}

impl Resolver {
    pub fn new(passwd: &Path) -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            passwd_path: passwd.to_path_buf(),
            passwd: None,
            known: HashMap::new(),
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
        let fresh = !self.known.contains_key(&ctx.pid);
        if fresh {
            let cgroup = fs::read_to_string(self.proc_root.join(format!("{}/cgroup", ctx.pid)))
                .ok()
                .and_then(|t| container::path_from_proc(&t))
                .or_else(|| cgroup_path_by_id(&self.cgroup_root, ctx.cgroup_id));
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
}

#[cfg(test)]
mod tests {
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
}
