//! The library follower: every copy of each hooked library (libibverbs, libcuda, libcufile)
//! that a traced process maps, wherever it is (another mount namespace, a wheel or conda
//! directory, a `dlopen` long after start), hooked once per distinct file however many
//! processes map it, and detached when the last of them exits.
//!
//! Found two ways: the kernel tells which process just mapped a file executable (the
//! `sys_exit_mmap` row; `LIB_PENDING` is its rate limit), and a periodic scan of /proc is the
//! safety net. A library given on the command line (`--libcufile`...) is not followed: the
//! operator's file is the one.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, Instant},
};

use super::{
    copy::{Copy, Key, Owner},
    options::LoadOptions,
    prog_fds::ProgFds,
    provider::{Hooked, Providers},
    uprobe::Libraries,
};
use crate::{
    facts::{HookStatus, LibraryCopy},
    hooks::{self, Library},
    procfs,
};

/// Copies found after start one user (one cgroup, for root) may have hooked at once (the
/// default of `--max-copies-per-user`).
pub const MAX_COPIES_PER_USER: usize = 32;

/// Hooks the copies found after start may hold at once on the whole node (the default of
/// `--max-uprobes`): releasing each waits for kernel grace periods (docs/performance.md,
/// teardown), so this bounds detaching. As perf-event uprobes (kernels before 6.6) a copy of
/// libibverbs holds 18, of libcuda or libcufile up to about 60, released one after another
/// under a kernel-wide lock: a few minutes for all. As uprobe_multi links a copy holds two,
/// released together: seconds.
pub const MAX_UPROBES: usize = 1024;

/// The safety net's period when the kernel tells of new mappings, and when it can't.
const FULL_SCAN: Duration = Duration::from_secs(2);
const FULL_SCAN_UNTOLD: Duration = Duration::from_millis(500);

pub struct Follower {
    opts: LoadOptions,
    libs: Vec<Library>,
    copies: BTreeMap<Key, Copy>,
    queued: BTreeSet<u32>,
    last_full: Option<Instant>,
    full_every: Duration,
    own_ns: Option<u64>,
    /// Copies attached, failed or detached since the last `take_changes`.
    changes: Vec<LibraryCopy>,
    /// Copies let go, their hooks still to remove (`release`: after the change is told).
    dropping: Vec<Copy>,
    /// The RDMA provider functions hooked where processes' ops tables point.
    providers: Providers,
}

/// What the tracer tells the follower it starts (`follow_remote`): the trace's options, the
/// copies and provider functions hooked at start, and whether the kernel tells of new mappings.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Seed {
    pub opts: LoadOptions,
    pub started: Vec<(Library, Key, LibraryCopy)>,
    pub providers: Hooked,
    pub told: bool,
}

impl Follower {
    /// `statuses`/`libs`: what the loader attached at start (those files count as hooked).
    pub fn new(opts: &LoadOptions, statuses: &[HookStatus], libs: &Libraries, told: bool) -> Self {
        let followed = [Library::Ibverbs, Library::Cuda, Library::Cufile]
            .into_iter()
            .filter(|l| {
                opts.uprobes
                    && match l {
                        Library::Ibverbs => opts.libibverbs.is_none(),
                        Library::Cuda => opts.libcuda.is_none(),
                        Library::Cufile => opts.libcufile.is_none() && opts.storage,
                    }
            })
            .collect();
        let mut copies = BTreeMap::new();
        for (lib, key, shown) in libs.opened() {
            let hooked = statuses
                .iter()
                .filter(|s| s.attached.is_some())
                .filter(|s| hooks::by_function(s.hook).is_some_and(|h| h.programs.library() == Some(lib)))
                .map(|s| s.hook.to_string())
                .collect();
            let mut c = Copy::started(lib, key, shown, hooked);
            if c.info.hooked.is_empty() {
                c.info.state = "failed".into();
                c.info.reasons = statuses
                    .iter()
                    .filter(|s| hooks::by_function(s.hook).is_some_and(|h| h.programs.library() == Some(lib)))
                    .flat_map(|s| s.reasons.iter().map(|r| format!("{}: {r}", s.hook)))
                    .collect();
                let why = super::copy::none_hooked(lib, &c.info.reasons);
                c.info.reasons.push(why);
            }
            copies.insert(key, c);
        }
        Self {
            opts: opts.clone(),
            libs: followed,
            copies,
            queued: BTreeSet::new(),
            last_full: None,
            full_every: if told { FULL_SCAN } else { FULL_SCAN_UNTOLD },
            own_ns: procfs::mnt_ns(std::process::id()),
            changes: vec![],
            dropping: vec![],
            providers: Default::default(),
        }
    }

    /// The provider functions the loader hooked at start (never hooked twice: that would count
    /// twice).
    pub fn with_providers(mut self, p: Providers) -> Self {
        self.providers = p;
        self
    }

    /// What the follower's process starts from.
    pub fn seed(&self) -> Seed {
        Seed {
            opts: self.opts.clone(),
            started: self.copies.iter().map(|(k, c)| (c.lib, *k, c.info.clone())).collect(),
            providers: self.providers.hooked(),
            told: self.full_every == FULL_SCAN,
        }
    }

    /// The follower's process: the tracer's follower as `seed` says.
    pub fn from_seed(seed: Seed) -> Self {
        let copies = seed.started.into_iter().map(|(lib, k, info)| (k, Copy::known(lib, info))).collect();
        let mut me = Self::new(&seed.opts, &[], &Libraries::default(), seed.told);
        me.copies = copies;
        me.providers = Providers::told(&seed.providers);
        me
    }

    /// Whether any library is followed (none with `--no-uprobes`, or all given as paths).
    /// Asked to hook copies with perf-event uprobes even where uprobe_multi links exist.
    pub fn perf_uprobes_only(&self) -> bool {
        self.opts.no_uprobe_multi
    }

    pub fn follows_any(&self) -> bool {
        !self.libs.is_empty()
    }

    /// The programs the follower may attach (name, whether it is a uretprobe): the tracer
    /// loads them and hands them over.
    pub fn programs(&self) -> Vec<(&'static str, bool)> {
        let mut out = Vec::new();
        if self.libs.contains(&Library::Ibverbs) && !self.opts.no_bytes {
            out.extend(super::provider::programs());
        }
        for lib in &self.libs {
            out.extend(super::copy::programs(&self.opts, *lib));
        }
        out
    }

    /// The kernel said `pid` mapped a file executable: looked at on the next tick.
    pub fn note(&mut self, pid: u32) {
        self.queued.insert(pid);
    }

    /// Every copy known now.
    pub fn copies(&self) -> Vec<LibraryCopy> {
        self.copies.values().map(Copy::shown).collect()
    }

    pub fn take_changes(&mut self) -> Vec<LibraryCopy> {
        std::mem::take(&mut self.changes)
    }

    /// The processes told about, exited processes let go, and the full scan when it is due.
    /// (The tracer removed each told process from `LIB_PENDING` before telling: a mapping made
    /// after the maps are read here is told again.)
    pub fn tick(&mut self, fds: &ProgFds) {
        if self.libs.is_empty() {
            return;
        }
        for pid in std::mem::take(&mut self.queued) {
            self.scan_pid(fds, pid);
        }
        if self.last_full.is_none_or(|t| t.elapsed() >= self.full_every) {
            self.scan_all(fds);
        } else {
            for c in self.copies.values_mut() {
                c.pids.retain(|p| procfs::pid_alive(*p));
            }
            self.let_go();
        }
    }

    /// Every process in scope: which copies each maps now.
    pub fn scan_all(&mut self, fds: &ProgFds) {
        self.last_full = Some(Instant::now());
        if self.libs.is_empty() {
            return;
        }
        for c in self.copies.values_mut() {
            c.pids.clear();
        }
        let me = std::process::id();
        for pid in procfs::processes(self.opts.filter_pid).into_iter().filter(|p| *p != me) {
            self.scan_pid(fds, pid);
        }
        self.providers.retain(procfs::pid_alive);
        self.let_go();
    }

    fn scan_pid(&mut self, fds: &ProgFds, pid: u32) {
        if self.libs.contains(&Library::Ibverbs) && !self.opts.no_bytes {
            self.providers.scan(fds, pid, &mut self.changes);
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
        let mut seen = BTreeSet::new();
        for line in maps.lines().filter(|l| self.libs.iter().any(|lib| l.contains(lib.map_prefix()))) {
            let Some(entry) = procfs::parse_maps_line(line) else { continue };
            // Only code the process can run: a file of the right name mapped as data (one page of a
            // sparse "libcuda.so.0") is nothing to hook and nothing to read.
            if !entry.exec {
                continue;
            }
            let name = Path::new(&entry.path).file_name().and_then(|f| f.to_str()).unwrap_or("");
            let Some(lib) = self.libs.iter().copied().find(|l| name.starts_with(l.map_prefix())) else {
                continue;
            };
            let key = (entry.dev_major, entry.dev_minor, entry.inode);
            if !seen.insert(key) {
                continue;
            }
            if let Some(c) = self.copies.get_mut(&key) {
                c.pids.insert(pid);
                continue;
            }
            let owner = owner(pid);
            let (cap, node_cap) = (self.opts.max_copies_per_user, self.opts.max_uprobes);
            let hooked = |c: &&Copy| c.owner.is_some() && c.info.state == "attached";
            let held = self.copies.values().filter(hooked).filter(|c| c.owner == owner).count();
            let on_node: usize = self.copies.values().filter(hooked).map(Copy::probes).sum();
            let mut c = match &owner {
                Some(o) if cap > 0 && held >= cap => Copy::refused(lib, pid, &entry, over_cap(o, cap)),
                Some(_) if node_cap > 0 && on_node >= node_cap => {
                    Copy::refused(lib, pid, &entry, over_node_cap(on_node, node_cap))
                }
                _ => Copy::attach(fds, &self.opts, lib, pid, &entry),
            };
            c.owner = owner;
            c.info.mnt_ns = procfs::mnt_ns(pid);
            c.info.own_mnt_ns = c.info.mnt_ns.is_some() && c.info.mnt_ns == self.own_ns;
            c.info.cgroup = procfs::cgroup(pid);
            self.changes.push(c.shown());
            self.copies.insert(key, c);
        }
    }

    /// Copies no process maps any more: let go (those found at start stay); `release` removes
    /// their hooks.
    fn let_go(&mut self) {
        let gone: Vec<Key> = self
            .copies
            .iter()
            .filter(|(_, c)| c.pids.is_empty() && !c.info.from_start)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(mut c) = self.copies.remove(&k) {
                if c.info.state == "attached" {
                    c.info.state = "detached".into();
                    self.changes.push(c.shown());
                }
                self.dropping.push(c);
            }
        }
    }

    /// Removes the hooks of the copies let go (an RCU grace period each: tens of ms).
    pub fn release(&mut self) {
        for mut c in self.dropping.drain(..) {
            c.detach();
        }
    }
}

/// Whom the copies `pid` maps count against: its user, or its cgroup when it runs as root.
fn owner(pid: u32) -> Option<Owner> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(if uid == 0 { Owner::RootCgroup(procfs::cgroup(pid)?) } else { Owner::Uid(uid) })
}

/// Why a copy was not hooked: the copies found after start hold `held` hooks, the node's cap
/// is `cap`.
pub fn over_node_cap(held: usize, cap: usize) -> String {
    format!(
        "library copies found after start already hold {held} hooks (perf-event uprobes or \
         uprobe_multi links), the node's cap is {cap} \
         (--max-uprobes; releasing each waits for kernel grace periods, so their number bounds \
         how long detaching takes)"
    )
}

/// Why a copy was not hooked: its owner has `cap` hooked already.
pub fn over_cap(owner: &Owner, cap: usize) -> String {
    let who = match owner {
        Owner::Uid(u) => format!("user {u}"),
        Owner::RootCgroup(c) => format!("root in cgroup {}", crate::escape::printable(c)),
    };
    format!(
        "{who} already has {cap} library copies hooked (--max-copies-per-user; \
         one tenant cannot make the tracer hook an unbounded number of copies)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_follower_process_starts_from_what_the_tracer_knew() {
        let opts = LoadOptions { uprobes: true, storage: true, ..Default::default() };
        let info = LibraryCopy {
            library: "libibverbs.so.1".into(),
            state: "attached".into(),
            from_start: true,
            ..Default::default()
        };
        let prog = super::super::provider::programs()[0].0.to_string();
        let seed = Seed {
            opts,
            started: vec![(Library::Ibverbs, (8, 1, 42), info)],
            providers: vec![((8, 1, 7), 0x40, prog), ((8, 1, 7), 0x80, "not_a_program".into())],
            told: true,
        };
        let line = serde_json::to_string(&seed).unwrap();
        let f = Follower::from_seed(serde_json::from_str(&line).unwrap());
        let again = f.seed();
        assert_eq!(
            serde_json::to_value(&again.started).unwrap(),
            serde_json::to_value(&seed.started).unwrap()
        );
        assert_eq!(
            again.providers,
            seed.providers[..1],
            "a name that is no program of this build is dropped"
        );
        assert!(again.told && f.follows_any());
        assert_eq!(f.copies().len(), 1);
        // The programs it may attach: every followed library's rows and the providers'.
        let progs = f.programs();
        assert!(progs.iter().any(|(p, _)| *p == seed.providers[0].2));
        assert!(progs.iter().any(|(_, ret)| *ret) && progs.iter().any(|(_, ret)| !*ret));
    }
}
