//! One copy of a hooked library found after start (a distinct file: device and inode as the
//! maps show them): opened safely as the file the process maps (`crate::libfile`: map_files or
//! the name inside the process's own root, never a host path), parsed once, and every user row
//! of the hook table for that library attached through the descriptor. Detached as a whole.

use std::os::fd::OwnedFd;

use super::{elf, options::LoadOptions, prog_fds::ProgFds};
use crate::{
    facts::LibraryCopy,
    hooks::{Library, Programs, HOOKS},
    libfile::{bounded::BoundedElf, LibraryFile},
    procfs::MapsEntry,
};

/// Device (major, minor) and inode, as /proc/PID/maps shows them.
pub type Key = (u32, u32, u64);

/// How a copy's hooks are attached (`LibraryCopy::via`): at most two uprobe_multi links, or a
/// perf-event uprobe per offset.
pub const VIA_MULTI: &str = "uprobe_multi";
pub const VIA_PERF: &str = "perf_event";

pub struct Copy {
    pub info: LibraryCopy,
    pub lib: Library,
    pub pids: std::collections::BTreeSet<u32>,
    /// Each program's perf events (the links: closing one detaches it).
    links: Vec<(&'static str, Vec<OwnedFd>)>,
    /// Whose process it was found in (the per-user cap); None for those found at start.
    pub owner: Option<Owner>,
}

impl Copy {
    /// The hooks this copy holds, as the kernel releases them: perf-event uprobes (and
    /// uretprobes), or uprobe_multi links.
    pub fn probes(&self) -> usize {
        self.links.iter().map(|(_, l)| l.len()).sum()
    }
}

/// Who a copy found after start counts against: a user, or for root, a cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Uid(u32),
    RootCgroup(String),
}

/// The user rows of `lib` this trace wants: (function, symbols, programs).
fn rows(opts: &LoadOptions, lib: Library) -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    HOOKS
        .iter()
        .filter(|h| opts.storage || !super::storage_attach::is_storage(h))
        .filter_map(|h| match h.programs {
            Programs::UserReturn { lib: l, uprobe, uretprobe } if l == lib => {
                Some((h.function, vec![h.function], vec![uprobe, uretprobe]))
            }
            Programs::UserSymbols { lib: l, symbols, uprobe, uretprobe } if l == lib => {
                Some((h.function, symbols.to_vec(), std::iter::once(uprobe).chain(uretprobe).collect()))
            }
            _ => None,
        })
        .collect()
}

/// The programs of every row of `lib` (name, whether it is a uretprobe): what the tracer loads
/// and hands the follower (`prog_fds`).
pub fn programs(opts: &LoadOptions, lib: Library) -> Vec<(&'static str, bool)> {
    rows(opts, lib).into_iter().flat_map(|(_, _, progs)| progs.into_iter().zip([false, true])).collect()
}

impl Copy {
    /// A copy known from the start (the loader attached it): counted, never detached here.
    pub fn started(lib: Library, key: Key, shown: String, hooked: Vec<String>) -> Self {
        // `shown` of a mapped file names the process it was found in: the path is what's kept.
        let path = shown.split(" in pid ").next().unwrap_or(&shown).to_string();
        let info = info(lib, key, path, "attached", hooked, vec![], true);
        Self { info, lib, pids: Default::default(), links: vec![], owner: None }
    }

    /// A copy the tracer knew at start, as it told the follower (`follow::Seed`).
    pub fn known(lib: Library, info: LibraryCopy) -> Self {
        Self { info, lib, pids: Default::default(), links: vec![], owner: None }
    }

    /// A copy not hooked, for `why` (its owner's cap): listed, and not tried again while
    /// processes map it.
    pub fn refused(lib: Library, pid: u32, entry: &MapsEntry, why: String) -> Self {
        let key = (entry.dev_major, entry.dev_minor, entry.inode);
        let info = info(lib, key, entry.path.clone(), "failed", vec![], vec![why], false);
        Self { info, lib, pids: [pid].into(), links: vec![], owner: None }
    }

    /// Opens the file `pid` maps at `entry` and hooks every row of `lib` in it. Never fails:
    /// what went wrong is the copy's reasons (state "failed").
    pub fn attach(fds: &ProgFds, opts: &LoadOptions, lib: Library, pid: u32, entry: &MapsEntry) -> Self {
        let started = std::time::Instant::now();
        let key = (entry.dev_major, entry.dev_minor, entry.inode);
        let mut copy = Self {
            info: info(lib, key, entry.path.clone(), "failed", vec![], vec![], false),
            lib,
            pids: [pid].into(),
            links: vec![],
            owner: None,
        };
        let (data, file) = match open(pid, entry) {
            Ok(x) => x,
            Err(e) => {
                copy.info.reasons.push(e);
                return copy;
            }
        };
        let rows = rows(opts, lib);
        let names: Vec<&str> = rows.iter().flat_map(|(_, s, _)| s.iter().copied()).collect();
        let found = match elf::offsets_by_name(&data, &file.shown, &names) {
            Ok(f) => f,
            Err(e) => {
                copy.info.reasons.push(e);
                return copy;
            }
        };
        let target = file.fd_path();
        let rows: Vec<_> = rows
            .into_iter()
            .filter_map(|(function, symbols, progs)| {
                let offsets: Vec<u64> =
                    symbols.iter().filter_map(|s| found.get(s)).flat_map(|o| o.iter().copied()).collect();
                if offsets.is_empty() {
                    copy.info.reasons.push(format!("{function}: no such symbol in this copy"));
                    return None;
                }
                Some((function, offsets, progs))
            })
            .collect();
        let wanted: Vec<(&str, Vec<u64>)> =
            rows.iter().flat_map(|(_, offsets, progs)| progs.iter().map(|p| (*p, offsets.clone()))).collect();
        if let Some(made) = fds.attach_multi(&wanted, &target) {
            // At most two links for the whole copy (entry and return offsets).
            match made {
                Ok(links) => {
                    copy.links.push(("uprobe_multi", links));
                    copy.info.hooked.extend(rows.iter().map(|(f, _, _)| f.to_string()));
                    copy.info.via = Some(VIA_MULTI.into());
                }
                Err(e) => copy.info.reasons.push(format!("every function: uprobe_multi: {e}")),
            }
            return copy.finish(lib, started);
        }
        copy.info.via = Some(VIA_PERF.into());
        'row: for (function, offsets, progs) in rows {
            let mut made = vec![];
            for prog in progs {
                match fds.attach_at(prog, &offsets, &target) {
                    Ok(l) => made.push((prog, l)),
                    Err(e) => {
                        // Dropping what was made detaches it.
                        copy.info.reasons.push(format!("{function}: uprobe: {e}"));
                        continue 'row;
                    }
                }
            }
            copy.links.extend(made);
            copy.info.hooked.push(function.to_string());
        }
        copy.finish(lib, started)
    }

    /// Attached if anything was hooked, else failed with the reason.
    fn finish(mut self, lib: Library, started: std::time::Instant) -> Self {
        if self.info.hooked.is_empty() {
            self.info.via = None;
            self.info.reasons.push(none_hooked(lib, &self.info.reasons));
        } else {
            self.info.state = "attached".into();
            self.info.attach_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        }
        self
    }

    /// Removes this copy's uprobes (the last process mapping it exited).
    pub fn detach(&mut self) {
        // Closing each perf event detaches it (an RCU grace period each).
        self.links.clear();
        if self.info.state == "attached" {
            self.info.state = "detached".into();
        }
        self.info.attach_ms = None;
    }

    /// The record shown for it now (its process count and first pids refreshed).
    pub fn shown(&self) -> LibraryCopy {
        let mut i = self.info.clone();
        i.processes = self.pids.len();
        i.pids = self.pids.iter().take(8).copied().collect();
        i
    }
}

/// Why a copy has no hook: none of the functions is there, or they could not be hooked.
pub fn none_hooked(lib: Library, reasons: &[String]) -> String {
    let missing = reasons.iter().all(|r| r.contains("no such symbol") || r.contains("has no symbol"));
    let what = if missing { "is in this copy" } else { "could be hooked in this copy" };
    format!("none of the hooked {} functions {what}", lib.soname())
}

/// The file `pid` maps at `entry`, opened safely and read; why not, saying so when the process
/// exited while it was being opened.
fn open(pid: u32, entry: &MapsEntry) -> Result<(BoundedElf, LibraryFile), String> {
    LibraryFile::open_mapped(pid, entry).and_then(|f| Ok((f.symbols()?, f))).map_err(|e| {
        let gone = if crate::procfs::pid_alive(pid) { "" } else { " (the process exited meanwhile)" };
        format!("{e}{gone}")
    })
}

fn info(
    lib: Library,
    key: Key,
    path: String,
    state: &str,
    hooked: Vec<String>,
    reasons: Vec<String>,
    from_start: bool,
) -> LibraryCopy {
    LibraryCopy {
        library: lib.soname().into(),
        state: state.into(),
        path,
        dev: format!("{:x}:{:x}", key.0, key.1),
        inode: key.2,
        mnt_ns: None,
        own_mnt_ns: true,
        cgroup: None,
        processes: 0,
        pids: vec![],
        hooked,
        reasons,
        from_start,
        attach_ms: None,
        via: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_gone_while_its_library_is_opened_is_a_stated_reason() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap().to_string();
        let entry = crate::procfs::find_in_maps(&maps, &name).expect("own executable mapped");
        assert!(open(std::process::id(), &entry).is_ok_and(|(_, f)| f.size > 0));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let e = open(pid, &entry).unwrap_err();
        assert!(e.ends_with("(the process exited meanwhile)") && e.contains("no host path"), "{e}");
    }
}
