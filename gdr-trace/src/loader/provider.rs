//! The RDMA provider's post and poll functions (librxe, libmlx5, libefa ...), which the inline
//! `ibv_post_send` & co. call through `ibv_context.ops` and which the provider does not export:
//! the kernel side copies each traced process's ops table at its registrations
//! (`PROVIDER_OPS`); here each function's address becomes file + offset through
//! /proc/PID/maps, and the work-request rows of the hook table (`Programs::Provider`) are
//! attached there once per (file, offset), for every process (the in-kernel filter keeps the
//! traced ones). They stay until the follower ends.

use std::collections::{BTreeMap, BTreeSet};

use std::os::fd::OwnedFd;

use gdr_trace_common::mr::bytes::{
    ProviderOps, OPS_POLL_CQ, OPS_POST_RECV, OPS_POST_SEND, OPS_POST_SRQ_RECV, QPX_RDMA_READ,
    QPX_SET_INLINE_DATA, QPX_SET_SGE, QPX_SET_SGE_LIST,
};

use super::prog_fds::ProgFds;
use crate::{
    facts::LibraryCopy,
    hooks::{Programs, HOOKS},
    libfile::LibraryFile,
    procfs::{self, MapsEntry},
};

/// One provider function found at start (`provider_ops`): its ops slot and where it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Found {
    pub slot: u64,
    pub path: String,
    pub dev: (u32, u32),
    pub inode: u64,
    pub offset: u64,
}

/// Device (major, minor) and inode, as /proc/PID/maps shows them.
type Key = (u32, u32, u64);

/// Attaches a uprobe program at an offset of a file (the loader's `uprobe::attach_at`, at start).
pub type AttachAt<'a> = &'a mut dyn FnMut(&str, u64, &std::path::Path) -> Result<(), String>;

/// The start-up status of the work-request rows.
pub const DEFERRED: &str = "hooked per provider file by the library follower, where a process's \
     ibv_context.ops points (read when it opens a device or registers memory) or its ibv_qp_ex \
     (read at ibv_qp_to_qp_ex); the system's providers of the RDMA devices present are hooked \
     at start (ibv_context.ops only)";

/// What a copy of a provider library is called in `library_copy` records.
pub const PROVIDER: &str = "RDMA provider (ibv_context.ops)";

#[derive(Default)]
pub struct Providers {
    /// (file, offset, program) hooked.
    hooked: BTreeSet<(Key, u64, &'static str)>,
    /// Each process's ops table as last looked at.
    seen: BTreeMap<u32, ProviderOps>,
    /// The follower's hooks on them (perf events), held until it ends.
    held: Vec<OwnedFd>,
}

/// What the follower is told of the providers hooked at start: (file, offset, program).
pub type Hooked = Vec<((u32, u32, u64), u64, String)>;

/// The work-request rows: (function, ops slot, programs).
fn rows() -> Vec<(&'static str, u64, Vec<&'static str>)> {
    HOOKS
        .iter()
        .filter_map(|h| match h.programs {
            Programs::Provider { slot, uprobe, uretprobe } => {
                Some((h.function, slot, std::iter::once(uprobe).chain(uretprobe).collect()))
            }
            _ => None,
        })
        .collect()
}

/// The work-request programs (name, whether it is a uretprobe): what the tracer loads and
/// hands the follower (`prog_fds`).
pub fn programs() -> Vec<(&'static str, bool)> {
    rows().into_iter().flat_map(|(_, _, progs)| progs.into_iter().zip([false, true])).collect()
}

fn slot_of(ops: &ProviderOps, slot: u64) -> u64 {
    match slot {
        OPS_POLL_CQ => ops.poll_cq,
        OPS_POST_SRQ_RECV => ops.post_srq_recv,
        OPS_POST_SEND => ops.post_send,
        OPS_POST_RECV => ops.post_recv,
        QPX_RDMA_READ => ops.wr_rdma_read,
        QPX_SET_SGE => ops.wr_set_sge,
        QPX_SET_SGE_LIST => ops.wr_set_sge_list,
        QPX_SET_INLINE_DATA => ops.wr_set_inline_data,
        _ => 0,
    }
}

/// The mapping of `maps` (a /proc/PID/maps text) holding `addr`, and the address's offset in
/// its file.
pub fn locate(maps: &str, addr: u64) -> Option<(MapsEntry, u64)> {
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        if !(start..end).contains(&addr) {
            return None;
        }
        let offset = u64::from_str_radix(f.nth(1)?, 16).ok()?;
        let entry = procfs::parse_maps_line(line)?;
        entry.exec.then_some((entry, addr - start + offset))
    })
}

impl Providers {
    /// The system's providers' functions (`provider_ops::learn`) hooked at start, their rows'
    /// statuses saying where.
    pub fn at_start(found: &[Found], statuses: &mut [crate::facts::HookStatus], attach: AttachAt) -> Self {
        let mut me = Self::default();
        for (function, slot, progs) in rows() {
            let Some(st) = statuses.iter_mut().find(|s| s.hook == function) else { continue };
            for f in found.iter().filter(|f| f.slot == slot) {
                let key = (f.dev.0, f.dev.1, f.inode);
                let path = std::path::Path::new(&f.path);
                let mut ok = true;
                for prog in &progs {
                    match attach(prog, f.offset, path) {
                        Ok(()) => {
                            me.hooked.insert((key, f.offset, prog));
                        }
                        Err(e) => {
                            st.reasons.push(format!("{} at {:#x}: uprobe: {e}", f.path, f.offset));
                            ok = false;
                        }
                    }
                }
                if ok {
                    // Every provider file hooked, not only the last (a node may have two NICs).
                    st.location = Some(match st.location.take() {
                        Some(l) if l.split(", ").any(|p| p == f.path) => l,
                        Some(l) => format!("{l}, {}", f.path),
                        None => f.path.clone(),
                    });
                    st.attached = Some(if progs.len() > 1 { "uprobe+uretprobe" } else { "uprobe" }.into());
                }
            }
        }
        me
    }

    /// `pid`'s ops table, if the kernel has one for it that changed since the last look: its
    /// functions hooked where not yet. A record per provider file that got new hooks or failed.
    pub fn scan(&mut self, fds: &ProgFds, pid: u32, changes: &mut Vec<LibraryCopy>) {
        let Some(ops) = fds.provider_ops(pid) else { return };
        if self.seen.get(&pid) == Some(&ops) {
            return;
        }
        self.seen.insert(pid, ops);
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
        let mut by_file: BTreeMap<Key, LibraryCopy> = BTreeMap::new();
        for (function, slot, progs) in rows() {
            let addr = slot_of(&ops, slot);
            if addr == 0 {
                continue;
            }
            let Some((entry, off)) = locate(&text, addr) else { continue };
            let key = (entry.dev_major, entry.dev_minor, entry.inode);
            if progs.iter().all(|p| self.hooked.contains(&(key, off, *p))) {
                continue;
            }
            let copy = by_file.entry(key).or_insert_with(|| record(pid, &entry, key));
            let file = match LibraryFile::open_mapped(pid, &entry) {
                Ok(f) => f,
                Err(e) => {
                    copy.reasons.push(format!("{function}: {e}"));
                    continue;
                }
            };
            let target = file.fd_path();
            let mut ok = true;
            let todo: Vec<&'static str> =
                progs.iter().copied().filter(|p| !self.hooked.contains(&(key, off, *p))).collect();
            for prog in todo {
                match fds.attach_at(prog, &[off], &target) {
                    Ok(links) => {
                        self.held.extend(links);
                        self.hooked.insert((key, off, prog));
                    }
                    Err(e) => {
                        copy.reasons.push(format!("{function} at {off:#x}: uprobe: {e}"));
                        ok = false;
                    }
                }
            }
            if ok {
                copy.hooked.push(format!("{function}@{off:#x}"));
            }
        }
        for mut c in by_file.into_values() {
            c.state = if c.hooked.is_empty() { "failed" } else { "attached" }.into();
            changes.push(c);
        }
    }

    /// What the follower is told: the functions hooked at start.
    pub fn hooked(&self) -> Hooked {
        self.hooked.iter().map(|(k, o, p)| (*k, *o, p.to_string())).collect()
    }

    /// The follower's: the functions the tracer hooked at start (programs named as in the hook
    /// table; another name is no program of this build's).
    pub fn told(hooked: &Hooked) -> Self {
        let names: Vec<&'static str> = programs().into_iter().map(|(p, _)| p).collect();
        let hooked = hooked
            .iter()
            .filter_map(|(k, o, p)| Some((*k, *o, *names.iter().find(|n| **n == p.as_str())?)))
            .collect();
        Self { hooked, ..Default::default() }
    }

    /// Exited processes' ops tables are forgotten (their pids may come back).
    pub fn retain(&mut self, alive: impl Fn(u32) -> bool) {
        self.seen.retain(|p, _| alive(*p));
    }
}

fn record(pid: u32, entry: &MapsEntry, key: Key) -> LibraryCopy {
    LibraryCopy {
        library: PROVIDER.into(),
        path: entry.path.clone(),
        dev: format!("{:x}:{:x}", key.0, key.1),
        inode: key.2,
        own_mnt_ns: true,
        processes: 1,
        pids: vec![pid],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_becomes_its_file_offset_in_an_executable_mapping() {
        let maps = "\
7f0000000000-7f0000002000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
7f0000002000-7f0000008000 r-xp 00002000 08:01 1234 /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
7f0000008000-7f000000a000 rw-p 00000000 00:00 0
";
        let (e, off) = locate(maps, 0x7f0000003a40).expect("in the code mapping");
        assert_eq!((e.inode, off), (1234, 0x3a40));
        assert!(locate(maps, 0x7f0000001000).is_none(), "data mapping: nothing to hook");
        assert!(locate(maps, 0x7f0000009000).is_none(), "anonymous memory");
    }
}
