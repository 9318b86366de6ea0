//! Userspace hooks: find each library once (the operator's path, the file the traced process
//! maps, or the system's), open it safely (`crate::libfile`), parse that descriptor for the
//! hooked functions' offsets and attach uprobes through it.

use std::rc::Rc;

use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::{attach::explain, LoadOptions};
use crate::{
    facts::HookStatus,
    hooks::{Hook, Library},
    libfile::LibraryFile,
    procfs,
};

/// A library opened and read once for every hook in it.
pub struct Opened {
    pub file: LibraryFile,
    pub data: Vec<u8>,
}

/// Each library, opened on first use during one load (kept open while its uprobes attach).
#[derive(Default)]
pub struct Libraries(Vec<(Library, Result<Rc<Opened>, String>)>);

impl Libraries {
    fn get(&mut self, opts: &LoadOptions, lib: Library) -> Result<Rc<Opened>, String> {
        if let Some((_, r)) = self.0.iter().find(|(l, _)| *l == lib) {
            return r.clone();
        }
        let r = open_library(opts, lib).and_then(|file| {
            let data = file.read()?;
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

pub fn attach_user(
    ebpf: &mut Ebpf,
    hook: &Hook,
    opts: &LoadOptions,
    libs: &mut Libraries,
    lib: Library,
    progs: &[&str],
    st: &mut HookStatus,
) {
    if !opts.uprobes {
        st.reasons.push("uprobes disabled (--no-uprobes)".into());
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
    let offsets = match super::elf::symbol_file_offsets(&opened.data, &opened.file.shown, hook.function) {
        Ok(o) => o,
        Err(e) => {
            st.reasons.push(format!("uprobe: {e}"));
            return;
        }
    };
    // The kernel resolves this path once per attach: it is our descriptor, the checked file.
    let target = opened.file.fd_path();
    for prog in progs {
        let r = (|| {
            let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
            let p: &mut UProbe = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
            p.load().map_err(|e| explain(prog, e))?;
            // Every symbol version (ibv_reg_mr@IBVERBS_1.0 and @@IBVERBS_1.1), all processes:
            // the in-kernel filter keeps the attached process and its children, including
            // children that map the library after attach.
            for &off in &offsets {
                p.attach(UProbeAttachLocation::AbsoluteOffset(off), &target, UProbeScope::AllProcesses)
                    .map_err(|e| explain(prog, e))?;
            }
            Ok::<_, String>(())
        })();
        if let Err(e) = r {
            st.reasons.push(format!("uprobe: {e}"));
            return;
        }
    }
    if offsets.len() > 1 {
        st.reasons.push(format!("{} symbol versions hooked", offsets.len()));
    }
    st.attached = Some("uprobe+uretprobe".into());
}
