//! gdr-bench-teardown: how long detaching N uprobes takes, the cost behind a stalled
//! teardown (a tracer's exit waiting on the kernel while holding its event mutex).
//!
//!   gdr-bench-teardown perf FILE N    N perf-event uprobes (one per function entry of FILE, the
//!                                     way gdr-trace attaches each hook of each library copy):
//!                                     the floor's empty program, attached with aya
//!   gdr-bench-teardown multi FILE N   one uprobe_multi link (BPF_TRACE_UPROBE_MULTI, kernel
//!                                     6.6+) over the same N offsets: a two-instruction program
//!                                     loaded and linked with the bpf(2) system call
//!   gdr-bench-teardown multi-each FILE N
//!                                     N uprobe_multi links of one offset each (one program per
//!                                     hook, as gdr-trace's are, cannot share a link)
//!
//!   gdr-bench-teardown copies FILE N  N copies of FILE (sparse files of its size, beside it),
//!                                     each hooked as the library follower hooks a copy where
//!                                     the kernel has uprobe_multi: two links (9 entry and 9
//!                                     return offsets, as a libibverbs copy), all released at
//!                                     once from 256 threads, as the follower does at its end
//!   gdr-bench-teardown copies-serial FILE N
//!                                     the same, released one link after another
//!
//! Prints one JSON line: {"mode", "uprobes", "attach_s", "detach_s", "kernel"}, or {"mode",
//! "kernel", "error"} where the kernel refused it. No process runs FILE's functions meanwhile:
//! only the mechanism is measured.

use std::{ffi::CString, os::fd::RawFd, time::Instant};

use anyhow::{bail, Context, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        UProbe,
    },
    EbpfLoader,
};
use gdr_trace::loader::BENCH_FLOOR_OBJECT;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// File offsets of up to `n` distinct function entries of `file`.
fn function_offsets(file: &str, n: usize) -> Result<Vec<u64>> {
    let data = std::fs::read(file).with_context(|| format!("reading {file}"))?;
    let elf = object::File::parse(&*data).with_context(|| format!("{file} is not an ELF file"))?;
    let segments: Vec<(u64, u64, u64)> =
        elf.segments().map(|s| (s.address(), s.file_range().0, s.file_range().1)).collect();
    let mut addrs: Vec<u64> = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() > 0)
        .map(|s| s.address())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let offsets: Vec<u64> = addrs
        .into_iter()
        .filter_map(|a| {
            segments.iter().find(|(va, _, size)| a >= *va && a < va + size).map(|(va, off, _)| a - va + off)
        })
        .take(n)
        .collect();
    if offsets.len() < n {
        bail!("{file} has {} function entries, {n} asked", offsets.len());
    }
    Ok(offsets)
}

fn perf(file: &str, offsets: &[u64]) -> Result<(f64, f64)> {
    let mut ebpf = EbpfLoader::new().load(BENCH_FLOOR_OBJECT)?;
    let p: &mut UProbe = ebpf.program_mut("bench_floor_uprobe").context("in the object")?.try_into()?;
    p.load()?;
    let t = Instant::now();
    for &off in offsets {
        p.attach(UProbeAttachLocation::AbsoluteOffset(off), file, UProbeScope::AllProcesses)
            .with_context(|| format!("uprobe at {file}+{off:#x}"))?;
    }
    let attach = t.elapsed().as_secs_f64();
    let t = Instant::now();
    drop(ebpf);
    Ok((attach, t.elapsed().as_secs_f64()))
}

fn bpf(cmd: libc::c_long, attr: &[u8]) -> std::io::Result<RawFd> {
    // SAFETY: attr is a readable buffer of its length, laid out as the command's bpf_attr part.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as RawFd)
}

/// Little-endian fields at their bpf_attr offsets (include/uapi/linux/bpf.h).
fn put(buf: &mut [u8], at: usize, v: &[u8]) {
    buf[at..at + v.len()].copy_from_slice(v);
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;

/// A two-instruction program (r0 = 0; exit) for uprobe_multi links.
fn multi_program() -> Result<RawFd> {
    let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = CString::new("GPL")?;
    let mut load = [0u8; 72];
    put(&mut load, 0, &BPF_PROG_TYPE_KPROBE.to_le_bytes());
    put(&mut load, 4, &2u32.to_le_bytes());
    put(&mut load, 8, &(insns.as_ptr() as u64).to_le_bytes());
    put(&mut load, 16, &(license.as_ptr() as u64).to_le_bytes());
    put(&mut load, 68, &BPF_TRACE_UPROBE_MULTI.to_le_bytes()); // expected_attach_type
    bpf(BPF_PROG_LOAD, &load).context("loading a uprobe_multi program (kernel 6.6+)")
}

/// One uprobe_multi link of `prog` over `offsets` of `file`.
fn multi_link(prog: RawFd, file: &CString, offsets: &[u64]) -> Result<RawFd> {
    multi_link_flags(prog, file, offsets, 0)
}

/// The same with uprobe_multi `flags` (1: return probes).
fn multi_link_flags(prog: RawFd, file: &CString, offsets: &[u64], flags: u32) -> Result<RawFd> {
    let mut link = [0u8; 64];
    put(&mut link, 52, &flags.to_le_bytes());
    put(&mut link, 0, &(prog as u32).to_le_bytes());
    put(&mut link, 8, &BPF_TRACE_UPROBE_MULTI.to_le_bytes()); // attach_type
    put(&mut link, 16, &(file.as_ptr() as u64).to_le_bytes());
    put(&mut link, 24, &(offsets.as_ptr() as u64).to_le_bytes());
    put(&mut link, 48, &(offsets.len() as u32).to_le_bytes()); // cnt
    bpf(BPF_LINK_CREATE, &link).context("creating a uprobe_multi link")
}

/// `per_link` offsets in each link: all of them, or one.
fn multi(file: &str, offsets: &[u64], per_link: usize) -> Result<(f64, f64)> {
    let prog = multi_program()?;
    let path = CString::new(file)?;
    let t = Instant::now();
    let links: Vec<RawFd> =
        offsets.chunks(per_link).map(|o| multi_link(prog, &path, o)).collect::<Result<_>>()?;
    let attach = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for fd in links {
        // SAFETY: an fd this function opened and nothing else holds.
        unsafe { libc::close(fd) };
    }
    let detach = t.elapsed().as_secs_f64();
    // SAFETY: likewise.
    unsafe { libc::close(prog) };
    Ok((attach, detach))
}

/// Offsets a copy's links hold: 9 functions, entry and return (a libibverbs copy holds 18).
const OFFSETS_PER_COPY: usize = 9;
/// Threads the links are released from (the follower's `FOLLOWER_RELEASE_THREADS`).
const RELEASE_THREADS: usize = gdr_trace::teardown::FOLLOWER_RELEASE_THREADS;

/// `n` copies of `file`, two uprobe_multi links each, released from `threads` threads.
fn copies(file: &str, n: usize, threads: usize) -> Result<(f64, f64)> {
    let offsets = function_offsets(file, OFFSETS_PER_COPY)?;
    let dir = std::path::PathBuf::from(format!("{file}.copies.{}", std::process::id()));
    std::fs::create_dir(&dir).with_context(|| format!("making {}", dir.display()))?;
    let made = copies_in(&dir, file, &offsets, n, threads);
    let _ = std::fs::remove_dir_all(&dir);
    made
}

fn copies_in(
    dir: &std::path::Path,
    file: &str,
    offsets: &[u64],
    n: usize,
    threads: usize,
) -> Result<(f64, f64)> {
    let size = std::fs::metadata(file)?.len();
    raise_open_files(2 * n as u64 + 64);
    let prog = multi_program()?;
    let t = Instant::now();
    let mut links = Vec::with_capacity(2 * n);
    for i in 0..n {
        let path = dir.join(format!("copy{i}.so"));
        std::fs::File::create(&path)?.set_len(size)?;
        let path = CString::new(path.display().to_string())?;
        links.push(multi_link_flags(prog, &path, offsets, 0)?);
        links.push(multi_link_flags(prog, &path, offsets, 1)?); // BPF_F_UPROBE_MULTI_RETURN
    }
    let attach = t.elapsed().as_secs_f64();
    let t = Instant::now();
    std::thread::scope(|s| {
        for share in links.chunks(links.len().div_ceil(threads).max(1)) {
            s.spawn(move || {
                for &fd in share {
                    // SAFETY: an fd this function opened and nothing else holds.
                    unsafe { libc::close(fd) };
                }
            });
        }
    });
    let detach = t.elapsed().as_secs_f64();
    // SAFETY: likewise.
    unsafe { libc::close(prog) };
    Ok((attach, detach))
}

/// Room for `want` descriptors: that many where this process may raise its hard limit (root
/// with CAP_SYS_RESOURCE, as in the VM), else the hard limit.
fn raise_open_files(want: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        let raised = libc::rlimit { rlim_cur: want.max(lim.rlim_cur), rlim_max: want.max(lim.rlim_max) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(file), Some(n)) = (args.first(), args.get(1), args.get(2)) else {
        bail!("usage: gdr-bench-teardown perf|multi|multi-each|copies|copies-serial FILE N");
    };
    let n: usize = n.parse().context("N")?;
    let measured = match mode.as_str() {
        "copies" => copies(file, n, args.get(3).and_then(|t| t.parse().ok()).unwrap_or(RELEASE_THREADS)),
        "copies-serial" => copies(file, n, 1),
        _ => {
            let offsets = function_offsets(file, n)?;
            match mode.as_str() {
                "perf" => perf(file, &offsets),
                "multi" => multi(file, &offsets, offsets.len()),
                "multi-each" => multi(file, &offsets, 1),
                m => bail!("unknown mode {m}: perf, multi, multi-each, copies or copies-serial"),
            }
        }
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    // A kernel without uprobe_multi (before 6.6) refuses it: said, not a failure of the run.
    let line = match measured {
        Ok((attach, detach)) if mode.starts_with("copies") => serde_json::json!({
            "mode": mode, "copies": n, "links": 2 * n, "uprobes": 2 * OFFSETS_PER_COPY * n,
            "attach_s": attach, "detach_s": detach, "kernel": kernel.trim(),
        }),
        Ok((attach, detach)) => serde_json::json!({
            "mode": mode, "uprobes": n, "attach_s": attach, "detach_s": detach,
            "kernel": kernel.trim(),
        }),
        Err(e) => serde_json::json!({ "mode": mode, "kernel": kernel.trim(), "error": format!("{e:#}") }),
    };
    println!("{line}");
    Ok(())
}
