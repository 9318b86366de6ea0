//! `gds_mode` and `compat_reason` for the storage reports (per file and per process), and the
//! hints that say the reasons: `gds_mode` decides, from what the state saw and the facts the
//! live layer read once per cuFile process (`gds_facts::ProcGdsFacts`, carried by snapshots).
//! `aggregate` hands in each file's figures (`FileIn`) and writes the answers back.

use std::collections::BTreeMap;

use gdr_trace_common::storage::GdsOp;

use super::{
    classify::StorageVerdict,
    gds_facts::{fstype_of_dev, ProcGdsFacts},
    gds_mode::{compat_reasons, decide_mode, reason_ids, CompatReason, FallbackFacts, GdsMode, IoEvidence},
};

/// The figures of one file's report that the mode and reasons need.
#[derive(Debug, Clone, Copy)]
pub struct FileIn<'a> {
    pub path: &'a str,
    /// "MAJ:MIN" of its device.
    pub dev: &'a str,
    pub nvfs_bytes: u64,
    pub gds_bytes: &'a BTreeMap<StorageVerdict, u64>,
    /// POSIX bytes read and written, and of those the O_DIRECT ones.
    pub posix_bytes: u64,
    pub direct_bytes: u64,
    pub written: bool,
}

impl<'a> FileIn<'a> {
    pub fn new(
        path: &'a str,
        dev: &'a str,
        nvfs_bytes: u64,
        gds_bytes: &'a BTreeMap<StorageVerdict, u64>,
        posix_bytes: u64,
        direct_bytes: u64,
        written: bool,
    ) -> Self {
        Self { path, dev, nvfs_bytes, gds_bytes, posix_bytes, direct_bytes, written }
    }
}

/// One cuFile call's mode and fallback reasons (None: a call that moves no data).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallMode {
    pub mode: Option<GdsMode>,
    pub compat_reason: Vec<String>,
}

/// The mode of one classified call, from its nested I/O and its descriptor's O_DIRECT flag, and
/// the reasons when it did POSIX I/O: with the call's size and offset (Lustre's minimum size,
/// unaligned writes) and the file's device (`dev`: the kernel's MAJ<<20|MIN). Calls before the
/// process's facts were read get the reasons the state alone gives.
pub fn call_mode(
    call: &crate::events::storage::GdsCall,
    verdict: Option<StorageVerdict>,
    o_direct: Option<bool>,
    dev: Option<u32>,
    facts: Option<&ProcGdsFacts>,
) -> CallMode {
    if verdict.is_none() {
        return CallMode::default();
    }
    let t = &call.tally;
    let posix_calls = u64::from(t.posix_calls);
    let p2pdma_possible = facts.and_then(|x| x.p2pdma()).map(|(y, _)| y);
    let dest_gpu = call.detail.dest_gpu;
    let failed = t.posix_bytes == 0 && t.io_err < 0;
    let ev = IoEvidence {
        nvfs_calls: u64::from(t.nvfs_calls),
        posix_calls,
        o_direct,
        dest_gpu,
        p2pdma_possible,
        failed,
    };
    let mode = if posix_calls == 0 && t.nvfs_calls == 0 {
        // A buffer registration that issued no nvidia-fs MAP: a host bounce buffer only where
        // P2PDMA cannot be the path (it maps no buffer through nvidia-fs either).
        Some(if p2pdma_possible == Some(false) { GdsMode::GdsCompat } else { GdsMode::Unknown })
    } else {
        Some(decide_mode(&ev))
    };
    if posix_calls == 0 || t.nvfs_calls > 0 || mode == Some(GdsMode::GdsP2pdma) {
        return CallMode { mode, compat_reason: Vec::new() };
    }
    let fs_type = facts.zip(dev).and_then(|(x, d)| fstype_of_dev(&x.mounts, d >> 20, d & 0xfffff));
    let reasons = compat_reasons(&FallbackFacts {
        fs_type,
        config: facts.map(|x| &x.config.effective),
        nvidia_fs: facts.and_then(|x| x.nvidia_fs),
        kernel_p2pdma: facts.and_then(|x| x.p2pdma()),
        p2pdma_failed: (failed && dest_gpu == Some(true) && o_direct != Some(false)).then_some(t.io_err),
        o_direct,
        is_write: matches!(call.op, GdsOp::Write | GdsOp::WriteAsync),
        size: Some(call.length),
        offset: u64::try_from(call.file_offset).ok(),
    });
    CallMode { mode, compat_reason: reason_ids(&reasons) }
}

/// What goes back on the reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotated {
    /// Per file, in the order given: its mode (None: cuFile did not use it) and reason ids.
    pub files: Vec<(Option<GdsMode>, Vec<String>)>,
    pub gds_mode: Option<GdsMode>,
    pub compat_reason: Vec<String>,
    pub hints: Vec<String>,
}

fn is_cufile_file(f: &FileIn) -> bool {
    f.nvfs_bytes > 0 || !f.gds_bytes.is_empty()
}

/// A file's cuFile evidence, for its reasons: nvidia-fs seen, cuFile's POSIX I/O seen (in any
/// mode but nvfs), and whether the file's POSIX I/O was O_DIRECT.
pub fn file_evidence(f: &FileIn) -> IoEvidence {
    let nvfs = f.nvfs_bytes + f.gds_bytes.get(&StorageVerdict::GdsNvfs).copied().unwrap_or(0);
    let posix_cufile: u64 =
        f.gds_bytes.iter().filter(|(v, _)| **v != StorageVerdict::GdsNvfs).map(|(_, b)| b).sum();
    let posix = f.posix_bytes;
    IoEvidence {
        nvfs_calls: u64::from(nvfs > 0),
        posix_calls: u64::from(posix_cufile > 0),
        o_direct: (posix > 0).then_some(f.direct_bytes >= posix),
        dest_gpu: None,
        p2pdma_possible: None,
        failed: false,
    }
}

/// A file's mode: its calls' modes (their verdicts), nvidia-fs first, else the one with the
/// most bytes. Calls decided unknown before the process's facts were read are decided again
/// with them (the kernel cannot do P2PDMA: compat), by the same `decide_mode`.
pub fn file_mode(f: &FileIn, facts: Option<&ProcGdsFacts>) -> GdsMode {
    let ev = file_evidence(f);
    if ev.nvfs_calls > 0 {
        return GdsMode::GdsNvfs;
    }
    let again = IoEvidence { p2pdma_possible: facts.and_then(|x| x.p2pdma()).map(|(y, _)| y), ..ev };
    let mut by: Vec<(GdsMode, u64)> = Vec::new();
    for (v, b) in f.gds_bytes {
        let m = match v.mode() {
            Some(GdsMode::Unknown) => decide_mode(&again),
            Some(m) => m,
            None => continue,
        };
        match by.iter_mut().find(|(x, _)| *x == m) {
            Some(e) => e.1 += b,
            None => by.push((m, *b)),
        }
    }
    by.iter().max_by_key(|(m, b)| (*b, std::cmp::Reverse(*m))).map_or(GdsMode::Unknown, |(m, _)| *m)
}

fn dev_of(f: &FileIn) -> Option<(u32, u32)> {
    let (a, b) = f.dev.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn file_reasons(f: &FileIn, facts: Option<&ProcGdsFacts>) -> Vec<CompatReason> {
    let ev = file_evidence(f);
    let fs_type = facts.zip(dev_of(f)).and_then(|(x, (ma, mi))| fstype_of_dev(&x.mounts, ma, mi));
    compat_reasons(&FallbackFacts {
        fs_type,
        config: facts.map(|x| &x.config.effective),
        nvidia_fs: facts.and_then(|x| x.nvidia_fs),
        kernel_p2pdma: facts.and_then(|x| x.p2pdma()),
        p2pdma_failed: None,
        o_direct: ev.o_direct,
        is_write: f.written,
        size: None,
        offset: None,
    })
}

/// The modes and reasons of a process's files and of the process, and the hints that say them.
/// `compat_calls`: the process made cuFile calls classified gds-compat; `nvfs_calls`: gds-nvfs.
pub fn annotate(
    files: &[FileIn],
    compat_calls: bool,
    nvfs_calls: bool,
    facts: Option<&ProcGdsFacts>,
) -> Annotated {
    let mut out = Annotated::default();
    let mut all: Vec<CompatReason> = Vec::new();
    let mut by_mode: Vec<(GdsMode, u64)> = Vec::new();
    let mut maybe_p2pdma: Vec<&str> = Vec::new();
    for f in files {
        if !is_cufile_file(f) {
            out.files.push((None, Vec::new()));
            continue;
        }
        let ev = file_evidence(f);
        let mode = file_mode(f, facts);
        let mut ids = Vec::new();
        if ev.posix_calls > 0 {
            let reasons = file_reasons(f, facts);
            ids = reason_ids(&reasons);
            all.extend(reasons);
            if mode == GdsMode::Unknown && ev.o_direct == Some(true) {
                maybe_p2pdma.push(f.path);
            }
        }
        out.files.push((Some(mode), ids));
        let bytes = f.gds_bytes.values().sum::<u64>() + f.nvfs_bytes;
        match by_mode.iter_mut().find(|(m, _)| *m == mode) {
            Some(e) => e.1 += bytes,
            None => by_mode.push((mode, bytes)),
        }
    }
    if compat_calls {
        // Process-wide reasons hold even for calls whose file is not listed.
        all.extend(compat_reasons(&FallbackFacts {
            config: facts.map(|x| &x.config.effective),
            nvidia_fs: facts.and_then(|x| x.nvidia_fs),
            kernel_p2pdma: facts.and_then(|x| x.p2pdma()),
            ..Default::default()
        }));
    }
    all.sort();
    all.dedup();
    out.compat_reason = reason_ids(&all);
    out.gds_mode = by_mode
        .iter()
        .max_by_key(|(m, b)| (*b, std::cmp::Reverse(*m)))
        .map(|(m, _)| *m)
        .or_else(|| nvfs_calls.then_some(GdsMode::GdsNvfs));
    if !all.is_empty() {
        let why: Vec<String> = all.iter().map(CompatReason::explain).collect();
        out.hints.push(format!("why cuFile falls back to compatibility mode here: {}", why.join("; ")));
    }
    if let Some(e) = facts.and_then(|x| x.config.error.as_ref()) {
        out.hints.push(format!("cuFile configuration not readable as the process sees it: {e}"));
    }
    if !maybe_p2pdma.is_empty() {
        out.hints.push(format!(
            "cuFile's POSIX I/O on {} was O_DIRECT with no nvidia-fs ioctl: it may be PCI P2PDMA straight into \
             GPU memory rather than compatibility mode; where it landed was not seen, so its mode is unknown",
            maybe_p2pdma.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests;
