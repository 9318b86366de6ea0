//! libcuda, from userspace: GPU↔GPU (P2P) and CUDA host memory. Copies (`cuMemcpyPeer*`,
//! `cuMemcpy*` across devices) are classified and counted in the kernel at entry
//! (`state`); control calls (contexts, peer access, allocations, CUDA IPC, cuMem handles,
//! pinned host memory) go through the ring buffer one by one, at return. One program pair per
//! function; the loader attaches it at every exported variant (plain, `_v2`, `_ptds`, `_ptsz`).
//!
//! match-proto:cuda.h (12.x):
//!   CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
//!   CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev)
//!   CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
//!   CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
//!   CUresult cuCtxSetCurrent(CUcontext ctx) / cuCtxPushCurrent_v2(CUcontext ctx) / cuCtxPopCurrent_v2(CUcontext *pctx)
//!   CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) / cuCtxDisablePeerAccess(CUcontext peerContext)
//!   CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
//!   CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n)
//!   CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) / cuMemcpyDtoD_v2(dst, src, n)
//!   CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
//!   CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
//!   CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) / cuMemFree_v2(CUdeviceptr dptr)
//!   CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
//!   CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
//!   CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
//!   CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t, unsigned long long flags)
//!   CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *osHandle, CUmemAllocationHandleType t)
//!   CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags)
//!   CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
//!   CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) / cuMemAllocHost_v2(void **pp, size_t bytesize)
//!   CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
//!   CUresult cuMemFreeHost(void *p) / cuMemHostUnregister(void *p)

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    p2p::{
        staged_dir, CudaEvent, CudaStash, DEVICE_UNKNOWN, HANDLE_TYPE_POSIX_FD, IPC_HANDLE_LEN,
        PEER_ACCESS_ALREADY_ENABLED,
    },
    AttachKind, EventKind, HookId,
};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key, EVENTS},
    p2p::state::*,
    record::fill_header,
};

/// The `CUipcMemHandle` passed by value: x86-64 passes a 64-byte struct in memory, right
/// above the return address at entry (and the next integer argument in the 2nd register).
#[inline(always)]
fn by_value_handle(ctx: &ProbeContext, out: &mut [u8; IPC_HANDLE_LEN]) {
    #[cfg(bpf_target_arch = "x86_64")]
    // SAFETY: pt_regs of this probe; the user stack is read through probe_read_user.
    unsafe {
        let sp = (*ctx.regs).rsp;
        if let Ok(h) = bpf_probe_read_user((sp + 8) as *const [u8; IPC_HANDLE_LEN]) {
            *out = h;
        }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    let _ = (ctx, out);
}

/// The file behind the shareable handle's fd in `ev.aux` (what ties an import to its export).
#[inline(always)]
fn shareable_file(ev: &mut CudaEvent) {
    if ev.aux <= i32::MAX as u64 {
        if let Some(f) = crate::kernel_read::file_facts(ev.aux) {
            ev.file_ino = f.ino;
            ev.file_dev = f.dev;
        }
    }
}

#[inline(always)]
fn user<T>(p: u64) -> Option<T> {
    // SAFETY: a user pointer the caller passed, read through probe_read_user.
    unsafe { bpf_probe_read_user(p as *const T) }.ok()
}

#[inline(always)]
fn entry(hook: HookId, ctx: &ProbeContext) {
    let Some(tgid) = current_traced() else { return };
    let pid_tgid = bpf_get_current_pid_tgid();
    let a = |n| ctx.arg::<u64>(n).unwrap_or(0);
    match hook {
        HookId::CuCtxSetCurrent => return set_current(pid_tgid, a(0)),
        HookId::CuCtxPushCurrent => return push_current(pid_tgid, a(0)),
        HookId::CuCtxPopCurrent => return pop_current(pid_tgid),
        HookId::CuMemcpyPeer => {
            return count_copy(tgid, ctx_device(tgid, a(3)), ctx_device(tgid, a(1)), a(4))
        }
        // cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr src, size_t n) / cuMemcpyHtoD_v2(CUdeviceptr
        // dst, const void *srcHost, size_t n), and the _ptds / Async variants (same first three).
        HookId::CuMemcpyDtoH => return crate::p2p::staged::count_staged(tgid, staged_dir::DTOH, a(0), a(2)),
        HookId::CuMemcpyHtoD => return crate::p2p::staged::count_staged(tgid, staged_dir::HTOD, a(1), a(2)),
        HookId::CuMemcpy | HookId::CuMemcpyDtoD => {
            let (dst, src) = (alloc_device(tgid, a(0)), alloc_device(tgid, a(1)));
            // Same device, or memory not allocated through cuMemAlloc (host, unseen): not P2P.
            if dst != src && dst != DEVICE_UNKNOWN && src != DEVICE_UNKNOWN {
                count_copy(tgid, src, dst, a(2));
            }
            return;
        }
        _ => {}
    }
    let mut st = CudaStash {
        args: [a(0), a(1), a(2), a(3), a(4), a(5)],
        device: current_device(pid_tgid),
        peer_device: DEVICE_UNKNOWN,
        handle: [0; IPC_HANDLE_LEN],
    };
    match hook {
        HookId::CuIpcOpenMemHandle => by_value_handle(ctx, &mut st.handle),
        HookId::CuCtxEnablePeerAccess | HookId::CuCtxDisablePeerAccess => {
            st.peer_device = ctx_device(tgid, a(0))
        }
        HookId::CuIpcGetMemHandle => st.device = alloc_device(tgid, a(1)),
        HookId::CuMemFree => alloc_forget(tgid, a(0)),
        _ => {}
    }
    if CU_STASH.insert(&stash_key(hook as u32, pid_tgid as u32), &st, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
}

#[inline(always)]
fn ret(hook: HookId, ctx: &RetProbeContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = stash_key(hook as u32, pid_tgid as u32);
    // SAFETY: map lookup; the value is copied out before the entry is removed.
    let Some(st) = (unsafe { CU_STASH.get(&key) }).copied() else {
        if current_traced().is_some() {
            count_lost(lost::STASH_MISS);
        }
        return;
    };
    let _ = CU_STASH.remove(&key);
    let tgid = (pid_tgid >> 32) as u32;
    // CUresult: 0 = CUDA_SUCCESS.
    let r = ctx.ret::<u32>() as i64;
    let ok = r == 0;
    let a = st.args;
    if !crate::budget::admit() {
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<CudaEvent>(0) else {
        count_lost(lost::RINGBUF_FULL);
        return;
    };
    // SAFETY: reserved ring-buffer memory of the right size; every field is written below.
    let ev = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(&mut ev.hdr, EventKind::CudaCall, hook, AttachKind::Uretprobe);
    ev.addr = a[0];
    ev.length = 0;
    ev.flags = 0;
    ev.aux = 0;
    ev.ret = r;
    ev.device = st.device;
    ev.peer_device = st.peer_device;
    ev.handle = st.handle;
    ev.file_ino = 0;
    ev.file_dev = 0;
    ev._pad0 = 0;
    match hook {
        HookId::CuCtxCreate
        | HookId::CuCtxCreateV3
        | HookId::CuCtxCreateV4
        | HookId::CuDevicePrimaryCtxRetain => {
            let dev = match hook {
                HookId::CuCtxCreate => a[2],
                HookId::CuCtxCreateV3 => a[4],
                HookId::CuCtxCreateV4 => a[3],
                _ => a[1],
            } as u32;
            ev.device = dev;
            ev.addr = 0;
            if ok {
                let c: u64 = user(a[0]).unwrap_or(0);
                ev.addr = c;
                if c != 0 {
                    let _ =
                        CU_CTX_DEV.insert(&gdr_trace_common::p2p::CtxKey { tgid, _pad0: 0, ctx: c }, &dev, 0);
                    // A created context is pushed on the calling thread; a retained one is not.
                    if hook != HookId::CuDevicePrimaryCtxRetain {
                        push_current(pid_tgid, c);
                    }
                }
            }
        }
        HookId::CuCtxEnablePeerAccess => {
            ev.flags = a[1];
            // Already enabled (704) is not a failure: peer access is on.
            if ok || r == PEER_ACCESS_ALREADY_ENABLED {
                set_peer(tgid, st.device, st.peer_device, true);
            }
        }
        HookId::CuCtxDisablePeerAccess => {
            if ok {
                set_peer(tgid, st.device, st.peer_device, false);
            }
        }
        HookId::CuDeviceCanAccessPeer => {
            ev.addr = 0;
            ev.device = a[1] as u32;
            ev.peer_device = a[2] as u32;
            ev.aux = if ok { user::<i32>(a[0]).unwrap_or(0) as u64 } else { 0 };
        }
        HookId::CuMemAlloc => {
            ev.length = a[1];
            ev.addr = if ok { user(a[0]).unwrap_or(0) } else { 0 };
            if ev.addr != 0 {
                alloc_add(tgid, ev.addr, a[1], st.device);
            }
        }
        HookId::CuIpcGetMemHandle => {
            ev.addr = a[1];
            ev.length = alloc_size(tgid, a[1]);
            if ok {
                ev.handle = user(a[0]).unwrap_or([0; IPC_HANDLE_LEN]);
            }
        }
        HookId::CuIpcOpenMemHandle => {
            ev.addr = if ok { user(a[0]).unwrap_or(0) } else { 0 };
            ev.flags = a[1];
        }
        HookId::CuMemExportToShareableHandle => {
            ev.addr = a[1];
            ev.flags = a[2];
            ev.aux = u64::MAX;
            if ok && a[2] == HANDLE_TYPE_POSIX_FD {
                ev.aux = user::<i32>(a[0]).map_or(u64::MAX, |fd| fd as i64 as u64);
                shareable_file(ev);
            }
        }
        HookId::CuMemImportFromShareableHandle => {
            ev.addr = if ok { user(a[0]).unwrap_or(0) } else { 0 };
            ev.flags = a[2];
            ev.aux = if a[2] == HANDLE_TYPE_POSIX_FD { a[1] as i32 as i64 as u64 } else { u64::MAX };
            shareable_file(ev);
        }
        HookId::CuMemMap => {
            ev.length = a[1];
            ev.aux = a[3];
            ev.flags = a[4];
        }
        HookId::CuMemSetAccess => {
            ev.length = a[1];
            ev.flags = a[3];
            // CUmemAccessDesc { CUmemLocation { int type; int id; }; flags }: the first grantee.
            ev.peer_device = user::<i32>(a[2] + 4).map_or(DEVICE_UNKNOWN, |d| d as u32);
        }
        HookId::CuMemHostAlloc | HookId::CuMemAllocHost => {
            ev.addr = if ok { user(a[0]).unwrap_or(0) } else { 0 };
            ev.length = a[1];
            ev.flags = if hook == HookId::CuMemHostAlloc { a[2] } else { 0 };
        }
        HookId::CuMemHostRegister => {
            ev.length = a[1];
            ev.flags = a[2];
        }
        _ => {}
    }
    entry.submit(0);
}

/// An entry-only hook (counted or tracked in the kernel, never sent).
macro_rules! cuda_entry {
    ($uprobe:ident, $hook:ident) => {
        #[uprobe]
        pub fn $uprobe(ctx: ProbeContext) -> u32 {
            entry(HookId::$hook, &ctx);
            0
        }
    };
}

/// A control call: arguments at entry, one record at return.
macro_rules! cuda_call {
    ($uprobe:ident, $uretprobe:ident, $hook:ident) => {
        cuda_entry!($uprobe, $hook);
        #[uretprobe]
        pub fn $uretprobe(ctx: RetProbeContext) -> u32 {
            ret(HookId::$hook, &ctx);
            0
        }
    };
}

cuda_call!(p2p_uprobe_cu_ctx_create, p2p_uretprobe_cu_ctx_create, CuCtxCreate);
cuda_call!(p2p_uprobe_cu_ctx_create_v3, p2p_uretprobe_cu_ctx_create_v3, CuCtxCreateV3);
cuda_call!(p2p_uprobe_cu_ctx_create_v4, p2p_uretprobe_cu_ctx_create_v4, CuCtxCreateV4);
cuda_call!(
    p2p_uprobe_cu_device_primary_ctx_retain,
    p2p_uretprobe_cu_device_primary_ctx_retain,
    CuDevicePrimaryCtxRetain
);
cuda_entry!(p2p_uprobe_cu_ctx_set_current, CuCtxSetCurrent);
cuda_entry!(p2p_uprobe_cu_ctx_push_current, CuCtxPushCurrent);
cuda_entry!(p2p_uprobe_cu_ctx_pop_current, CuCtxPopCurrent);
cuda_call!(
    p2p_uprobe_cu_ctx_enable_peer_access,
    p2p_uretprobe_cu_ctx_enable_peer_access,
    CuCtxEnablePeerAccess
);
cuda_call!(
    p2p_uprobe_cu_ctx_disable_peer_access,
    p2p_uretprobe_cu_ctx_disable_peer_access,
    CuCtxDisablePeerAccess
);
cuda_call!(
    p2p_uprobe_cu_device_can_access_peer,
    p2p_uretprobe_cu_device_can_access_peer,
    CuDeviceCanAccessPeer
);
cuda_entry!(p2p_uprobe_cu_memcpy_peer, CuMemcpyPeer);
cuda_entry!(p2p_uprobe_cu_memcpy, CuMemcpy);
cuda_entry!(p2p_uprobe_cu_memcpy_dtod, CuMemcpyDtoD);
cuda_entry!(p2p_uprobe_cu_memcpy_dtoh, CuMemcpyDtoH);
cuda_entry!(p2p_uprobe_cu_memcpy_htod, CuMemcpyHtoD);
cuda_call!(p2p_uprobe_cu_mem_alloc, p2p_uretprobe_cu_mem_alloc, CuMemAlloc);
cuda_call!(p2p_uprobe_cu_mem_free, p2p_uretprobe_cu_mem_free, CuMemFree);
cuda_call!(p2p_uprobe_cu_ipc_get_mem_handle, p2p_uretprobe_cu_ipc_get_mem_handle, CuIpcGetMemHandle);
cuda_call!(p2p_uprobe_cu_ipc_open_mem_handle, p2p_uretprobe_cu_ipc_open_mem_handle, CuIpcOpenMemHandle);
cuda_call!(p2p_uprobe_cu_ipc_close_mem_handle, p2p_uretprobe_cu_ipc_close_mem_handle, CuIpcCloseMemHandle);
cuda_call!(p2p_uprobe_cu_mem_export, p2p_uretprobe_cu_mem_export, CuMemExportToShareableHandle);
cuda_call!(p2p_uprobe_cu_mem_import, p2p_uretprobe_cu_mem_import, CuMemImportFromShareableHandle);
cuda_call!(p2p_uprobe_cu_mem_map, p2p_uretprobe_cu_mem_map, CuMemMap);
cuda_call!(p2p_uprobe_cu_mem_set_access, p2p_uretprobe_cu_mem_set_access, CuMemSetAccess);
cuda_call!(p2p_uprobe_cu_mem_host_alloc, p2p_uretprobe_cu_mem_host_alloc, CuMemHostAlloc);
cuda_call!(p2p_uprobe_cu_mem_alloc_host, p2p_uretprobe_cu_mem_alloc_host, CuMemAllocHost);
cuda_call!(p2p_uprobe_cu_mem_host_register, p2p_uretprobe_cu_mem_host_register, CuMemHostRegister);
cuda_call!(p2p_uprobe_cu_mem_free_host, p2p_uretprobe_cu_mem_free_host, CuMemFreeHost);
cuda_call!(p2p_uprobe_cu_mem_host_unregister, p2p_uretprobe_cu_mem_host_unregister, CuMemHostUnregister);
