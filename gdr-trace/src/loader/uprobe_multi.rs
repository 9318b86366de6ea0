//! Library copies found after start hooked through uprobe_multi links (`BPF_TRACE_UPROBE_MULTI`,
//! Linux 6.6+) where the kernel has them. A perf-event uprobe is one hook at one offset, and
//! releasing it waits for RCU grace periods under the kernel's trace-event mutex, one after
//! another whoever asked (docs/performance.md, teardown): a tenant mapping thousands of copies
//! could stall every tracer on the node. Here a copy is at most two links (its entry offsets,
//! its return offsets), each running one program, the dispatcher (`lib_multi_dispatch` in
//! gdr-trace-ebpf/src/uprobe_multi.rs), which tail-calls the hook program whose `LIB_HOOKS` slot
//! is the offset's attach cookie. A link's release waits once for all its offsets, outside that
//! mutex, and links released from several threads wait together.
//!
//! aya 0.14 loads no program for uprobe_multi, so the tracer's loading thread loads the hook
//! programs and the dispatcher itself from the embedded object relocated against the maps
//! (`module_fentry::Relocated`), fills the slots, and hands the follower the dispatcher alone.

use std::{
    collections::BTreeMap,
    ffi::CString,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd},
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
};

use aya_obj::generated::{bpf_attach_type, bpf_cmd};
use gdr_trace_common::{maps::LIB_HOOKS, MULTI_SLOTS};

use super::{
    map_set::{self, MapSet},
    module_fentry::Relocated,
};

/// The program every link runs.
pub const DISPATCHER: &str = "lib_multi_dispatch";

/// `BPF_F_UPROBE_MULTI_RETURN` (include/uapi/linux/bpf.h): the link's offsets are return probes.
const RETURN: u32 = 1;

/// Each hook program's name, whether it is a return probe, and its slot (the attach cookie of
/// its offsets).
pub type Slots = BTreeMap<String, (bool, u32)>;

/// What the loading thread made: the dispatcher and the slots.
pub struct Loaded {
    pub dispatcher: OwnedFd,
    pub slots: Slots,
}

/// Loads every program of `names` (name, is a return probe) for uprobe_multi into its slot of
/// `LIB_HOOKS`, then the dispatcher; `maps` are the object's maps (descriptors of their own).
/// Fails, saying why, where the kernel has no uprobe_multi links or any program does not load
/// (the follower then attaches perf-event uprobes through aya's programs).
pub fn load(maps: &MapSet, names: &[(&'static str, bool)], stop: &AtomicBool) -> Result<Loaded, String> {
    supported()?;
    let fd_of = |n: &str| map_set::data(maps.map(n)?).map(|d| d.fd().as_fd().as_raw_fd());
    let table = fd_of(LIB_HOOKS).ok_or("map LIB_HOOKS not loaded")?;
    let reloc = Relocated::with_maps(fd_of)?;
    let mut slots = BTreeMap::new();
    for (slot, &(name, ret)) in names.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Err("the trace ended first".into());
        }
        let slot =
            u32::try_from(slot).ok().filter(|s| *s < MULTI_SLOTS).ok_or("more hook programs than slots")?;
        let fd = reloc.load_uprobe_multi(name)?;
        set_slot(table, slot, fd.as_raw_fd()).map_err(|e| format!("{LIB_HOOKS}[{slot}] = {name}: {e}"))?;
        slots.insert(name.to_string(), (ret, slot));
    }
    Ok(Loaded { dispatcher: reloc.load_uprobe_multi(DISPATCHER)?, slots })
}

/// Whether this kernel makes uprobe_multi links: a two-instruction program linked at offset 0 of
/// an empty memory file nobody maps (so no breakpoint is written anywhere), then released.
pub fn supported() -> Result<(), String> {
    let prog = super::module_fentry::return_zero_uprobe_multi()
        .map_err(|e| format!("no uprobe_multi programs on this kernel (Linux 6.6+): {e}"))?;
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"gdr-trace-uprobe-multi".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on the descriptor just made.
    if unsafe { libc::ftruncate(file.as_raw_fd(), 4096) } != 0 {
        return Err(format!("ftruncate: {}", std::io::Error::last_os_error()));
    }
    let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    link(prog.as_fd(), &path, false, &[0], &[0])
        .map(drop)
        .map_err(|e| format!("no uprobe_multi links on this kernel (Linux 6.6+): {e}"))
}

/// `LIB_HOOKS[slot] = prog` (BPF_MAP_UPDATE_ELEM).
fn set_slot(table: RawFd, slot: u32, prog: RawFd) -> std::io::Result<()> {
    let value = prog as u32;
    let mut attr = [0u8; 32];
    put(&mut attr, 0, &(table as u32).to_le_bytes());
    put(&mut attr, 8, &(&raw const slot as u64).to_le_bytes());
    put(&mut attr, 16, &(&raw const value as u64).to_le_bytes());
    bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop) // flags 0: BPF_ANY
}

/// One uprobe_multi link of `prog` at `offsets` of the file `target` names, offset i with attach
/// cookie `cookies[i]`, for every process; return probes if `ret`. Dropping it detaches them all.
pub fn link(
    prog: std::os::fd::BorrowedFd<'_>,
    target: &Path,
    ret: bool,
    offsets: &[u64],
    cookies: &[u64],
) -> Result<OwnedFd, String> {
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(offsets.len(), cookies.len(), "one cookie per offset");
    let path = CString::new(target.as_os_str().as_bytes()).map_err(|_| "a NUL in the path")?;
    // union bpf_attr, link_create (include/uapi/linux/bpf.h): prog_fd, target_fd, attach_type,
    // flags, then uprobe_multi { path, offsets, ref_ctr_offsets, cookies, cnt, flags, pid }.
    let mut attr = [0u8; 64];
    put(&mut attr, 0, &(prog.as_raw_fd() as u32).to_le_bytes());
    put(&mut attr, 8, &(bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32).to_le_bytes());
    put(&mut attr, 16, &(path.as_ptr() as u64).to_le_bytes());
    put(&mut attr, 24, &(offsets.as_ptr() as u64).to_le_bytes());
    put(&mut attr, 40, &(cookies.as_ptr() as u64).to_le_bytes());
    put(&mut attr, 48, &(offsets.len() as u32).to_le_bytes());
    put(&mut attr, 52, &(if ret { RETURN } else { 0 }).to_le_bytes());
    let fd = bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
        .map_err(|e| format!("BPF_LINK_CREATE (uprobe_multi): {e}"))?;
    // SAFETY: a fresh descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn put(buf: &mut [u8], at: usize, v: &[u8]) {
    buf[at..at + v.len()].copy_from_slice(v);
}

fn bpf(cmd: bpf_cmd, attr: &mut [u8]) -> std::io::Result<RawFd> {
    super::module_fentry::bpf(cmd, attr.as_mut_ptr(), attr.len())
}
