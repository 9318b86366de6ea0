//! Reading the kernel, for every family: loader-patched offsets (`global`), `read_kernel`, and
//! what a descriptor is (the current task's fd -> `struct file` walk and the file's flags,
//! inode, mode and device: `FileFacts`), used by the storage family (the descriptors of POSIX
//! I/O) and the P2P family (the file behind a libcuda call's descriptor).
//!
//! Every offset is resolved by userspace from the running kernel's BTF and patched in before
//! load; `OFFSET_UNKNOWN` disables the walk (`walk_known`).

use aya_ebpf::helpers::{
    bpf_get_current_task, bpf_probe_read_kernel,
    generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
};
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
/// `inode.i_rdev` (a device node's number) and `file.private_data` (a dma-buf's `struct dma_buf`).
#[unsafe(no_mangle)]
static INODE_RDEV_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static FILE_PRIVATE_DATA_OFF: u32 = OFFSET_UNKNOWN;
/// Syscall argument registers in `struct pt_regs` (x86-64: di, si, dx, r10).
#[unsafe(no_mangle)]
static REGS_ARG0_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static REGS_ARG1_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static REGS_ARG2_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static REGS_ARG3_OFF: u32 = OFFSET_UNKNOWN;

/// The current task's saved user registers (what the syscall was called with), as the
/// BTF-typed `struct pt_regs *` the helper returns.
#[inline(always)]
pub fn current_regs() -> *const u8 {
    // SAFETY: helpers with no preconditions; the task pointer is the current task's.
    unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u8 }
}

/// Syscall argument `n` (0..=3) from saved registers, or None when its offset is unknown.
///
/// `regs` is a BTF-typed `struct pt_regs *` (from `bpf_task_pt_regs` or an fexit argument) and
/// the offset a load-time constant, so this is one load the verifier checks against BTF and
/// the JIT guards against faults: no helper call on the hot path.
#[inline(always)]
pub fn regs_arg(regs: *const u8, n: u32) -> Option<u64> {
    let off = match n {
        0 => global(&REGS_ARG0_OFF),
        1 => global(&REGS_ARG1_OFF),
        2 => global(&REGS_ARG2_OFF),
        _ => global(&REGS_ARG3_OFF),
    };
    if off == OFFSET_UNKNOWN {
        return None;
    }
    // SAFETY: see above; a bad address reads as 0 instead of faulting.
    Some(unsafe { core::ptr::read_volatile(regs.add(off as usize) as *const u64) })
}

/// A read-only global patched by the loader.
#[inline(always)]
pub fn global(g: &u32) -> u32 {
    // SAFETY: reading a static the loader set before load; never written at run time.
    unsafe { core::ptr::read_volatile(g) }
}

/// `*addr`, or zero where it cannot be read, without a branch: the helper zeroes its buffer on
/// failure, so no path splits on the outcome. (A split per read that joins again right after —
/// `read_kernel(..).unwrap_or(0)` — multiplies the paths 6.1's verifier walks: 100-400k
/// instructions for a registration hook and seconds of start-up, where 6.12 needs 4-8k.)
#[inline(always)]
pub fn read_kernel_or_zero<T: Copy + Default>(addr: u64) -> T {
    let mut v = T::default();
    // SAFETY: probe_read tolerates any address; `v` is a plain value of its size.
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            (&raw mut v).cast(),
            core::mem::size_of::<T>() as u32,
            addr as *const core::ffi::c_void,
        )
    };
    v
}

/// `*addr` in user memory, or zero where it faults, without a branch (as above).
#[inline(always)]
pub fn read_user_or_zero<T: Copy + Default>(addr: u64) -> T {
    let mut v = T::default();
    // SAFETY: probe_read of user memory (a fault is an error, not a crash) into a plain value.
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_user(
            (&raw mut v).cast(),
            core::mem::size_of::<T>() as u32,
            addr as *const core::ffi::c_void,
        )
    };
    v
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

/// current->files->fdt->fd[fd]: the open `struct file` (None: no such descriptor, or the
/// walk's offsets are unknown).
#[inline(always)]
pub fn file_of(fd: u64) -> Option<u64> {
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
    (file != 0).then_some(file)
}

/// The file's flags, inode number, mode and device, for descriptor `fd`.
#[inline(always)]
pub fn file_facts(fd: u64) -> Option<FileFacts> {
    facts_of_file(file_of(fd)?)
}

/// The device number of the node a descriptor is open on (`file->f_inode->i_rdev`, as
/// `MKDEV`: major << 20 | minor), 0 when unknown.
#[inline(always)]
pub fn rdev_of(fd: u64) -> u32 {
    let (inode_off, rdev_off) = (global(&FILE_INODE_OFF), global(&INODE_RDEV_OFF));
    if inode_off == OFFSET_UNKNOWN || rdev_off == OFFSET_UNKNOWN {
        return 0;
    }
    let Some(file) = file_of(fd) else { return 0 };
    let Some(inode) = read_kernel::<u64>(file + inode_off as u64) else { return 0 };
    read_kernel_or_zero::<u32>(inode + rdev_off as u64)
}

/// `file->private_data` of descriptor `fd` (a dma-buf's `struct dma_buf`), 0 when unknown.
#[inline(always)]
pub fn private_data_of(fd: u64) -> u64 {
    let off = global(&FILE_PRIVATE_DATA_OFF);
    if off == OFFSET_UNKNOWN {
        return 0;
    }
    file_of(fd).and_then(|f| read_kernel::<u64>(f + off as u64)).unwrap_or(0)
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
    let magic: u64 = if magic_off == OFFSET_UNKNOWN { 0 } else { read_kernel_or_zero(sb + magic_off as u64) };
    // Unrolled by the compiler: a constant array of 16.
    let pseudo = magic != 0 && gdr_trace_common::storage::PSEUDO_FS.contains(&magic);
    Some(FileFacts { ino, dev, f_flags, mode: mode as u32, pseudo })
}
