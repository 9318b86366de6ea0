//! Attaching one kernel program: fentry/fexit through [`Trampolines`] (vmlinux by aya, module
//! functions by `module_fentry`) and tracepoints through the perf events opened ahead. A leaf of
//! the loader's attach steps (`attach`, `storage_attach`, `own_rows`).

use std::os::fd::OwnedFd;

use aya::{
    programs::{FEntry, FExit, TracePoint},
    Ebpf,
};

use super::{btf::KernelBtf, explain::explain, module_fentry};

/// fentry/fexit programs: on module functions loaded by `module_fentry` (aya 0.14 can't target
/// module BTF); on vmlinux functions by aya, whose program load carries the object's BTF
/// (`func_info`, which programs with global subprograms need), with aya's parse of vmlinux BTF
/// made on the first one only (never where the kernel refuses fentry) and dropped after the
/// attach.
pub struct Trampolines<'a> {
    pub kbtf: &'a KernelBtf,
    /// The object relocated against our maps (made once, where the first module fentry is tried).
    relocated: Option<module_fentry::Relocated>,
    /// aya's parse of vmlinux BTF, made where the first vmlinux fentry is tried.
    aya_btf: Option<Result<aya::Btf, String>>,
    /// The links made: dropping one detaches its program.
    links: &'a mut Vec<OwnedFd>,
}

impl<'a> Trampolines<'a> {
    pub fn new(kbtf: &'a KernelBtf, links: &'a mut Vec<OwnedFd>) -> Self {
        Self { kbtf, relocated: None, aya_btf: None, links }
    }

    /// Loads and attaches fentry (`is_exit` false) or fexit program `prog` on `function` of
    /// `module` (None: vmlinux).
    pub fn attach(
        &mut self,
        ebpf: &mut Ebpf,
        prog: &str,
        is_exit: bool,
        function: &str,
        module: Option<&str>,
    ) -> Result<(), String> {
        let Some(module) = module else {
            let btf = self
                .aya_btf
                .get_or_insert_with(|| {
                    let t = std::time::Instant::now();
                    let btf = aya::Btf::from_sys_fs().map_err(|e| format!("no vmlinux BTF: {e}"));
                    tracing::debug!("aya's vmlinux BTF parse took {:?}", t.elapsed());
                    btf
                })
                .as_ref()
                .map_err(Clone::clone)?;
            return vmlinux_trampoline(ebpf, btf, prog, is_exit, function);
        };
        let t = std::time::Instant::now();
        let id = self.kbtf.func_id(function, Some(module))?;
        let relocated = match &mut self.relocated {
            Some(r) => r,
            None => self.relocated.insert(module_fentry::Relocated::new(ebpf)?),
        };
        let ready = t.elapsed();
        self.links.push(relocated.load_and_attach(prog, is_exit, Some(module), id)?);
        tracing::debug!(
            "{prog}: id and object in {ready:?}, loaded and attached in {:?}",
            t.elapsed() - ready
        );
        Ok(())
    }
}

/// Loads and attaches fentry (`is_exit` false) or fexit program `prog` on vmlinux `function`.
fn vmlinux_trampoline(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    prog: &str,
    is_exit: bool,
    function: &str,
) -> Result<(), String> {
    let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
    let t = std::time::Instant::now();
    let loaded = if is_exit {
        let p: &mut FExit = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
        p.load(function, btf).map_err(|e| explain(prog, e))?;
        let loaded = t.elapsed();
        p.attach().map_err(|e| explain(prog, e))?;
        loaded
    } else {
        let p: &mut FEntry = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
        p.load(function, btf).map_err(|e| explain(prog, e))?;
        let loaded = t.elapsed();
        p.attach().map_err(|e| explain(prog, e))?;
        loaded
    };
    tracing::debug!("{prog}: loaded in {loaded:?}, attached in {:?}", t.elapsed() - loaded);
    Ok(())
}

/// Loads and attaches tracepoint program `prog` on `category:name`.
pub fn tracepoint(ebpf: &mut Ebpf, prog: &str, category: &str, name: &str) -> Result<(), String> {
    let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
    let p: &mut TracePoint = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
    // Loaded already where `ahead::load_programs` verified it.
    if p.fd().is_err() {
        p.load().map_err(|e| explain(prog, e))?;
    }
    let fd = p.fd().map_err(|e| explain(prog, e))?;
    // Through the perf event opened ahead (`perf_events`), not aya's attach (one open at a time).
    let ev = super::perf_events::Event::tracepoint(category, name);
    super::perf_events::attach(std::os::fd::AsFd::as_fd(fd), &ev).map_err(|e| format!("{prog}: {e}"))
}
