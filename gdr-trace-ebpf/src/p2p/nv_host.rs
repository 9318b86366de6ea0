//! nvidia.ko, in the kernel: CUDA pinned host memory made and pinned. One record per call, at
//! return (`CudaEvent`, as libcuda's control calls: userspace folds both into the host ranges a
//! host MR's origin is read from).
//!
//! NVIDIA/open-gpu-kernel-modules (535.288.01 ... 595.45.04):
//!   kernel-open/nvidia/os-mlock.c
//!     NV_STATUS NV_API_CALL os_lock_user_pages(void *address, NvU64 page_count,
//!                                              void **page_array, NvU32 flags)
//!     (cuMemHostRegister: escape.c RmCreateOsDescriptor; global, in /proc/kallsyms)
//!   kernel-open/nvidia/nv-mmap.c
//!     static int nvidia_mmap_sysmem(struct vm_area_struct *vma, nv_alloc_t *at,
//!                                   NvU64 page_index, NvU64 pages)
//!     (cuMemHostAlloc's mmap of /dev/nvidiactl; static with one call site: a build may inline it)

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    p2p::{CudaEvent, CudaStash, DEVICE_UNKNOWN, IPC_HANDLE_LEN},
    AttachKind, EventKind, HookId,
};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key, EVENTS},
    p2p::state::CU_STASH,
    record::fill_header,
};

const PAGE_SIZE: u64 = 4096;

/// Stashes (address, bytes) at entry for the return probe.
#[inline(always)]
fn stash(hook: HookId, addr: u64, bytes: u64) {
    if current_traced().is_none() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let st = CudaStash {
        args: [addr, bytes, 0, 0, 0, 0],
        device: DEVICE_UNKNOWN,
        peer_device: DEVICE_UNKNOWN,
        handle: [0; IPC_HANDLE_LEN],
    };
    if CU_STASH.insert(&stash_key(hook as u32, pid_tgid as u32), &st, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
}

/// At return: the record, with the return value (NV_STATUS or errno; 0 = success).
#[inline(always)]
fn returned(hook: HookId, ret: i64) {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    // SAFETY: map lookup; the value is copied out before the entry is removed.
    let Some(st) = (unsafe { CU_STASH.get(&key) }).copied() else { return };
    let _ = CU_STASH.remove(&key);
    let Some(mut entry) = EVENTS.reserve::<CudaEvent>(0) else {
        count_lost(lost::RINGBUF_FULL);
        return;
    };
    // SAFETY: reserved ring-buffer memory of the right size; every field is written below.
    let ev = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(&mut ev.hdr, EventKind::CudaCall, hook, AttachKind::Kretprobe);
    ev.addr = st.args[0];
    ev.length = st.args[1];
    ev.flags = 0;
    ev.aux = 0;
    ev.ret = ret;
    ev.device = DEVICE_UNKNOWN;
    ev.peer_device = DEVICE_UNKNOWN;
    ev.handle = [0; IPC_HANDLE_LEN];
    ev.file_ino = 0;
    ev.file_dev = 0;
    ev._pad0 = 0;
    entry.submit(0);
}

#[kprobe]
pub fn p2p_kprobe_os_lock_user_pages(ctx: ProbeContext) -> u32 {
    let addr = ctx.arg::<u64>(0).unwrap_or(0);
    let pages = ctx.arg::<u64>(1).unwrap_or(0);
    stash(HookId::OsLockUserPages, addr, pages.saturating_mul(PAGE_SIZE));
    0
}

#[kretprobe]
pub fn p2p_kretprobe_os_lock_user_pages(ctx: RetProbeContext) -> u32 {
    // NV_STATUS: NV_OK = 0.
    returned(HookId::OsLockUserPages, ctx.ret::<u32>() as i64);
    0
}

#[kprobe]
pub fn p2p_kprobe_nvidia_mmap_sysmem(ctx: ProbeContext) -> u32 {
    let vma = ctx.arg::<u64>(0).unwrap_or(0);
    let pages = ctx.arg::<u64>(3).unwrap_or(0);
    // vm_area_struct.vm_start is its first member (6.1; 6.12: in the first union's struct).
    // SAFETY: a kernel pointer argument, read through probe_read_kernel.
    let start = unsafe { bpf_probe_read_kernel(vma as *const u64) }.unwrap_or(0);
    stash(HookId::NvidiaMmapSysmem, start, pages.saturating_mul(PAGE_SIZE));
    0
}

#[kretprobe]
pub fn p2p_kretprobe_nvidia_mmap_sysmem(ctx: RetProbeContext) -> u32 {
    returned(HookId::NvidiaMmapSysmem, ctx.ret::<i32>() as i64);
    0
}
