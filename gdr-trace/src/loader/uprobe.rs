//! Userspace hooks: find each library once (the operator's path, the file the traced process
//! maps, or the system's), open it safely (`crate::libfile`), parse that descriptor for the
//! hooked functions' offsets and attach uprobes through it.

use std::rc::Rc;

use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeLinkId, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::{
    explain::explain,
    options::LoadOptions,
    perf_events::{self, Event},
};
use crate::{facts::HookStatus, hooks::Library, libfile::LibraryFile, procfs};

/// A library opened and read once for every hook in it.
pub struct Opened {
    pub file: LibraryFile,
    pub data: crate::libfile::bounded::BoundedElf,
}

/// The reason on user-space rows with `--no-uprobes`.
pub const DISABLED: &str = crate::facts::UPROBES_DISABLED;

/// Each library, opened on first use during one load (kept open while its uprobes attach).
#[derive(Default)]
pub struct Libraries(Vec<(Library, Result<Rc<Opened>, String>)>);

impl Libraries {
    /// The files opened at start, by library, with their device and inode as /proc/PID/maps
    /// would show them (`LibraryFile::maps_identity`): the library follower counts a process
    /// mapping one of these as using a copy already hooked.
    pub fn opened(&self) -> Vec<(Library, (u32, u32, u64), String)> {
        self.0
            .iter()
            .filter_map(|(l, r)| {
                let o = r.as_ref().ok()?;
                Some((*l, o.file.maps_identity().ok()?, o.file.shown.clone()))
            })
            .collect()
    }

    fn get(&mut self, opts: &LoadOptions, lib: Library) -> Result<Rc<Opened>, String> {
        if let Some((_, r)) = self.0.iter().find(|(l, _)| *l == lib) {
            return r.clone();
        }
        let r = open_library(opts, lib).and_then(|file| {
            let data = file.symbols()?;
            Ok(Rc::new(Opened { file, data }))
        });
        self.0.push((lib, r.clone()));
        r
    }
}

/// The operator's path, else the file the traced process maps (opened as that very file, or
/// not at all), else the system's copy when the process doesn't map the library.
fn open_library(opts: &LoadOptions, lib: Library) -> Result<LibraryFile, String> {
    let explicit = match lib {
        Library::Ibverbs => &opts.libibverbs,
        Library::Cuda => &opts.libcuda,
        Library::Cufile => &opts.libcufile,
    };
    if let Some(p) = explicit {
        return LibraryFile::open_path(p);
    }
    if let Some((pid, entry)) =
        opts.filter_pid.and_then(|pid| Some((pid, procfs::mapped_library(pid, lib.map_prefix())?)))
    {
        return LibraryFile::open_mapped(pid, &entry);
    }
    match procfs::system_library(lib.soname()) {
        Some(p) => LibraryFile::open_path(&p),
        None => Err(format!(
            "{} not found (not mapped by the process, not in the system's library paths)",
            lib.soname()
        )),
    }
}

/// Program `prog` (loaded on first use) at each of `offsets` in the file `target` names, for
/// all processes; the links, to detach one copy of a library later.
pub fn attach_at(
    ebpf: &mut Ebpf,
    prog: &str,
    offsets: &[u64],
    target: &std::path::Path,
) -> Result<Vec<UProbeLinkId>, String> {
    let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
    let p: &mut UProbe = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
    if p.fd().is_err() {
        p.load().map_err(|e| explain(prog, e))?;
    }
    let mut links = Vec::with_capacity(offsets.len());
    for &off in offsets {
        match p.attach(UProbeAttachLocation::AbsoluteOffset(off), target, UProbeScope::AllProcesses) {
            Ok(l) => links.push(l),
            Err(e) => {
                // None of this copy half-attached for this program.
                for l in links {
                    let _ = p.detach(l);
                }
                return Err(explain(prog, e));
            }
        }
    }
    Ok(links)
}

/// Uprobes (`progs`: the entry program, then the return program if any) at every version of
/// every one of `symbols` the library exports (a row's function, or libcuda's exported
/// variants: at least one must be there).
pub fn attach_user(
    ebpf: &mut Ebpf,
    symbols: &[&str],
    opts: &LoadOptions,
    libs: &mut Libraries,
    lib: Library,
    progs: &[&str],
    st: &mut HookStatus,
) {
    if !opts.uprobes {
        st.reasons.push(DISABLED.into());
        return;
    }
    let opened = match libs.get(opts, lib) {
        Ok(o) => o,
        Err(e) => {
            st.reasons.push(e);
            return;
        }
    };
    st.location = Some(opened.file.shown.clone());
    let found = match super::elf::symbols_file_offsets(&opened.data, &opened.file.shown, symbols) {
        Ok(o) => o,
        Err(e) => {
            st.reasons.push(format!("uprobe: {e}"));
            return;
        }
    };
    let offsets: Vec<u64> = found.iter().flat_map(|(_, o)| o.iter().copied()).collect();
    // The kernel resolves this path once per attach: it is our descriptor, the checked file.
    let target = opened.file.fd_path();
    // Every symbol version (ibv_reg_mr@IBVERBS_1.0 and @@IBVERBS_1.1), all processes: the
    // in-kernel filter keeps the attached process and its children, including children that
    // map the library after attach.
    if let Err(e) = attach_started(ebpf, progs, &offsets, &target) {
        st.reasons.push(format!("uprobe: {e}"));
        return;
    }
    if symbols.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
        st.reasons.push(format!("exported variants hooked: {}", names.join(", ")));
    } else if offsets.len() > 1 {
        st.reasons.push(format!("{} symbol versions hooked", offsets.len()));
    }
    st.attached = Some(if progs.len() > 1 { "uprobe+uretprobe" } else { "uprobe" }.into());
}

/// The perf events [`attach_user`] will open for a row, to open them ahead, with every other
/// row's (`perf_events`): none where the library or its symbols are not found (the attach
/// then says why) or where there is no uprobe PMU.
pub fn events_ahead(
    symbols: &[&str],
    opts: &LoadOptions,
    libs: &mut Libraries,
    lib: Library,
    progs: &[&str],
) -> Vec<Event> {
    if !opts.uprobes || perf_events::uprobe_pmu().is_none() {
        return vec![];
    }
    let Ok(opened) = libs.get(opts, lib) else { return vec![] };
    let Ok(found) = super::elf::symbols_file_offsets(&opened.data, &opened.file.shown, symbols) else {
        return vec![];
    };
    let offsets: Vec<u64> = found.iter().flat_map(|(_, o)| o.iter().copied()).collect();
    events(progs, &offsets, &opened.file.fd_path()).into_iter().map(|(_, e)| e).collect()
}

/// Each program (entry, then return) at each offset.
fn events<'p>(progs: &[&'p str], offsets: &[u64], target: &std::path::Path) -> Vec<(&'p str, Event)> {
    let mut out = Vec::new();
    for (i, prog) in progs.iter().enumerate() {
        for &offset in offsets {
            out.push((*prog, Event::Uprobe { target: target.to_path_buf(), offset, ret: i == 1 }));
        }
    }
    out
}

/// The loader's uprobes: opened all at once (`perf_events`), then attached. They stay for the
/// run (a copy known from the start is never detached alone); on a failure, none of them stays.
/// Without a uprobe PMU, aya's legacy tracefs path, one after another.
fn attach_started(
    ebpf: &mut Ebpf,
    progs: &[&str],
    offsets: &[u64],
    target: &std::path::Path,
) -> Result<(), String> {
    if perf_events::uprobe_pmu().is_none() {
        for prog in progs {
            attach_at(ebpf, prog, offsets, target)?;
        }
        return Ok(());
    }
    let evs = events(progs, offsets, target);
    perf_events::open_ahead(evs.iter().map(|(_, e)| e.clone()));
    let mut links = Vec::with_capacity(evs.len());
    for (prog, ev) in &evs {
        let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
        let p: &mut UProbe = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
        if p.fd().is_err() {
            p.load().map_err(|e| explain(prog, e))?;
        }
        let fd = p.fd().map_err(|e| explain(prog, e))?;
        let event = perf_events::take(ev).map_err(|e| format!("{prog}: {e}"))?;
        perf_events::attach_to(std::os::fd::AsFd::as_fd(fd), ev, &event)
            .map_err(|e| format!("{prog}: {e}"))?;
        links.push(event);
    }
    links.into_iter().for_each(perf_events::keep);
    Ok(())
}
