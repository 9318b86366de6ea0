//! Reading the kernel, for every family: loader-patched offsets (`global`), `read_kernel`, and
//! what a descriptor is (the current task's fd -> `struct file` walk and the file's flags,
//! inode, mode and device: `FileFacts`), used by the storage family (the descriptors of POSIX
//! I/O) and the P2P family (the file behind a libcuda call's descriptor).
//!
//! Every offset is resolved by userspace from the running kernel's BTF and patched in before
//! load; `OFFSET_UNKNOWN` disables the walk (`walk_known`).

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gdr_trace_common::OFFSET_UNKNOWN;

#[unsafe(no_mangle)]
static TASK_FILES_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FILES_FDT_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FDT_MAX_FDS_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FDT_FD_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FILE_FLAGS_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FILE_INODE_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static INODE_MODE_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static INODE_INO_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static INODE_SB_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static SB_DEV_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static SB_MAGIC_OFF: u32 = OFFSET_UNKNOWN;

/// A read-only global patched by the loader.
#[inline(always)]
pub fn global(g: &u32) -> u32 {
    // SAFETY: reading a static the loader set before load; never written at run time.
    unsafe { core::ptr::read_volatile(g) }
}

#[inline(always)]
pub fn read_kernel<T: Copy>(addr: u64) -> Option<T> {
    // SAFETY: probe_read tolerates any address (a bad one is an error, not a fault).
    unsafe { bpf_probe_read_kernel(addr as *const T) }.ok()
}

/// What a descriptor is: from its `struct file`.
#[derive(Clone, Copy)]
pub struct FileFacts {
    pub ino: u64,
    pub dev: u32,
    pub f_flags: u32,
    pub mode: u32,
    /// On a synthetic filesystem (procfs, sysfs...: `PSEUDO_FS`).
    pub pseudo: bool,
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;

impl FileFacts {
    pub const UNKNOWN: FileFacts = FileFacts { ino: 0, dev: 0, f_flags: 0, mode: 0, pseudo: false };

    /// A regular file of a filesystem that stores data: storage I/O.
    pub fn is_storage(&self) -> bool {
        self.mode & S_IFMT == S_IFREG && !self.pseudo
    }
}

/// Whether the fd -> file walk can run on this kernel (every offset resolved).
#[inline(always)]
pub fn walk_known() -> bool {
    [
        &TASK_FILES_OFF,
        &FILES_FDT_OFF,
        &FDT_MAX_FDS_OFF,
        &FDT_FD_OFF,
        &FILE_FLAGS_OFF,
        &FILE_INODE_OFF,
        &INODE_MODE_OFF,
        &INODE_INO_OFF,
        &INODE_SB_OFF,
        &SB_DEV_OFF,
    ]
    .iter()
    .all(|g| global(g) != OFFSET_UNKNOWN)
}

/// current->files->fdt->fd[fd], then the file's flags, inode number, mode and device.
#[inline(always)]
pub fn file_facts(fd: u64) -> Option<FileFacts> {
    let files_off = global(&TASK_FILES_OFF);
    let fdt_off = global(&FILES_FDT_OFF);
    let max_off = global(&FDT_MAX_FDS_OFF);
    let fd_off = global(&FDT_FD_OFF);
    if files_off == OFFSET_UNKNOWN
        || fdt_off == OFFSET_UNKNOWN
        || max_off == OFFSET_UNKNOWN
        || fd_off == OFFSET_UNKNOWN
    {
        return None;
    }
    // SAFETY: a helper with no preconditions.
    let task = unsafe { bpf_get_current_task() };
    let files: u64 = read_kernel(task + files_off as u64)?;
    let fdt: u64 = read_kernel(files + fdt_off as u64)?;
    let max: u32 = read_kernel(fdt + max_off as u64)?;
    if fd >= max as u64 {
        return None;
    }
    let fds: u64 = read_kernel(fdt + fd_off as u64)?;
    let file: u64 = read_kernel(fds + fd * 8)?;
    if file == 0 {
        return None;
    }
    facts_of_file(file)
}

#[inline(always)]
pub fn facts_of_file(file: u64) -> Option<FileFacts> {
    let offs = [
        global(&FILE_FLAGS_OFF),
        global(&FILE_INODE_OFF),
        global(&INODE_MODE_OFF),
        global(&INODE_INO_OFF),
        global(&INODE_SB_OFF),
        global(&SB_DEV_OFF),
    ];
    if offs.iter().any(|&o| o == OFFSET_UNKNOWN) {
        return None;
    }
    let f_flags: u32 = read_kernel(file + offs[0] as u64)?;
    let inode: u64 = read_kernel(file + offs[1] as u64)?;
    let mode: u16 = read_kernel(inode + offs[2] as u64)?;
    let ino: u64 = read_kernel(inode + offs[3] as u64)?;
    let sb: u64 = read_kernel(inode + offs[4] as u64)?;
    let dev: u32 = read_kernel(sb + offs[5] as u64)?;
    let magic_off = global(&SB_MAGIC_OFF);
    let magic: u64 =
        if magic_off == OFFSET_UNKNOWN { 0 } else { read_kernel(sb + magic_off as u64).unwrap_or(0) };
    // Unrolled by the compiler: a constant array of 16.
    let pseudo = magic != 0 && gdr_trace_common::storage::PSEUDO_FS.contains(&magic);
    Some(FileFacts { ino, dev, f_flags, mode: mode as u32, pseudo })
}
