//! libcuda's rows of the hook table (`Path::P2p`): contexts and their device, peer access,
//! GPU↔GPU copies (counted in the kernel), device allocations, CUDA IPC and cuMem handles, and
//! CUDA pinned host memory. The CUDA runtime reaches the driver through `cuGetProcAddress`, so
//! each row hooks every exported variant with the row's signature (plain, `_v2`, `_ptds`,
//! `_ptsz`); the legacy 32-bit ABIs (`cuMemAlloc`, `cuMemcpyDtoD` without `_v2`, ...) are left
//! out: their arguments differ.

use gdr_trace_common::HookId;

use super::{row, Call, CudaOp, Hook, Library, Path, Programs, Role};

const fn call(symbols: &'static [&'static str], uprobe: &'static str, uretprobe: &'static str) -> Programs {
    Programs::UserSymbols { lib: Library::Cuda, symbols, uprobe, uretprobe: Some(uretprobe) }
}

const fn entry(symbols: &'static [&'static str], uprobe: &'static str) -> Programs {
    Programs::UserSymbols { lib: Library::Cuda, symbols, uprobe, uretprobe: None }
}

pub const CUDA: &[Hook] = &[
    row(
        HookId::CuCtxCreate,
        Role::CudaContext,
        Path::P2p,
        "cuCtxCreate",
        "libcuda.so.1",
        call(&["cuCtxCreate", "cuCtxCreate_v2"], "p2p_uprobe_cu_ctx_create", "p2p_uretprobe_cu_ctx_create"),
        "cuda_call: a context and its device (made current on the thread)",
    )
    .op(Call::Cuda(CudaOp::ContextCreate)),
    row(
        HookId::CuCtxCreateV3,
        Role::CudaContext,
        Path::P2p,
        "cuCtxCreate_v3",
        "libcuda.so.1",
        call(&["cuCtxCreate_v3"], "p2p_uprobe_cu_ctx_create_v3", "p2p_uretprobe_cu_ctx_create_v3"),
        "cuda_call: as cuCtxCreate (execution-affinity signature)",
    )
    .op(Call::Cuda(CudaOp::ContextCreate)),
    row(
        HookId::CuCtxCreateV4,
        Role::CudaContext,
        Path::P2p,
        "cuCtxCreate_v4",
        "libcuda.so.1",
        call(&["cuCtxCreate_v4"], "p2p_uprobe_cu_ctx_create_v4", "p2p_uretprobe_cu_ctx_create_v4"),
        "cuda_call: as cuCtxCreate (CUctxCreateParams signature)",
    )
    .op(Call::Cuda(CudaOp::ContextCreate)),
    row(
        HookId::CuDevicePrimaryCtxRetain,
        Role::CudaContext,
        Path::P2p,
        "cuDevicePrimaryCtxRetain",
        "libcuda.so.1",
        call(
            &["cuDevicePrimaryCtxRetain"],
            "p2p_uprobe_cu_device_primary_ctx_retain",
            "p2p_uretprobe_cu_device_primary_ctx_retain",
        ),
        "cuda_call: the primary context of a device (what the CUDA runtime uses)",
    )
    .op(Call::Cuda(CudaOp::PrimaryContextRetain)),
    row(
        HookId::CuCtxSetCurrent,
        Role::CudaCurrentContext,
        Path::P2p,
        "cuCtxSetCurrent",
        "libcuda.so.1",
        entry(&["cuCtxSetCurrent"], "p2p_uprobe_cu_ctx_set_current"),
        "kernel state: the thread's current context (the device of its peer access and allocations)",
    ),
    row(
        HookId::CuCtxPushCurrent,
        Role::CudaCurrentContext,
        Path::P2p,
        "cuCtxPushCurrent",
        "libcuda.so.1",
        entry(&["cuCtxPushCurrent", "cuCtxPushCurrent_v2"], "p2p_uprobe_cu_ctx_push_current"),
        "kernel state: as cuCtxSetCurrent (one level of push remembered)",
    ),
    row(
        HookId::CuCtxPopCurrent,
        Role::CudaCurrentContext,
        Path::P2p,
        "cuCtxPopCurrent",
        "libcuda.so.1",
        entry(&["cuCtxPopCurrent", "cuCtxPopCurrent_v2"], "p2p_uprobe_cu_ctx_pop_current"),
        "kernel state: back to the context current before the push",
    ),
    row(
        HookId::CuCtxEnablePeerAccess,
        Role::PeerAccess,
        Path::P2p,
        "cuCtxEnablePeerAccess",
        "libcuda.so.1",
        call(
            &["cuCtxEnablePeerAccess"],
            "p2p_uprobe_cu_ctx_enable_peer_access",
            "p2p_uretprobe_cu_ctx_enable_peer_access",
        ),
        "cuda_call + kernel state: peer access between two devices (704 already enabled: on)",
    )
    .op(Call::Cuda(CudaOp::PeerEnable)),
    row(
        HookId::CuCtxDisablePeerAccess,
        Role::PeerAccess,
        Path::P2p,
        "cuCtxDisablePeerAccess",
        "libcuda.so.1",
        call(
            &["cuCtxDisablePeerAccess"],
            "p2p_uprobe_cu_ctx_disable_peer_access",
            "p2p_uretprobe_cu_ctx_disable_peer_access",
        ),
        "cuda_call + kernel state: peer access off",
    )
    .op(Call::Cuda(CudaOp::PeerDisable)),
    row(
        HookId::CuDeviceCanAccessPeer,
        Role::PeerAccess,
        Path::P2p,
        "cuDeviceCanAccessPeer",
        "libcuda.so.1",
        call(
            &["cuDeviceCanAccessPeer"],
            "p2p_uprobe_cu_device_can_access_peer",
            "p2p_uretprobe_cu_device_can_access_peer",
        ),
        "cuda_call: whether the driver says two devices can reach each other",
    )
    .op(Call::Cuda(CudaOp::CanAccessPeer)),
    row(
        HookId::CuMemcpyPeer,
        Role::PeerCopy,
        Path::P2p,
        "cuMemcpyPeer",
        "libcuda.so.1",
        entry(
            &["cuMemcpyPeer", "cuMemcpyPeer_ptds", "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"],
            "p2p_uprobe_cu_memcpy_peer",
        ),
        "p2p_summary: copies per device pair, counted in the kernel (p2p-direct / p2p-staged)",
    ),
    row(
        HookId::CuMemcpy,
        Role::PeerCopy,
        Path::P2p,
        "cuMemcpy",
        "libcuda.so.1",
        entry(&["cuMemcpy", "cuMemcpy_ptds", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"], "p2p_uprobe_cu_memcpy"),
        "p2p_summary: unified-address copies between allocations on two devices",
    ),
    row(
        HookId::CuMemcpyDtoD,
        Role::PeerCopy,
        Path::P2p,
        "cuMemcpyDtoD",
        "libcuda.so.1",
        entry(
            &["cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"],
            "p2p_uprobe_cu_memcpy_dtod",
        ),
        "p2p_summary: device-to-device copies between allocations on two devices",
    ),
    row(
        HookId::CuMemcpyDtoH,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemcpyDtoH",
        "libcuda.so.1",
        entry(
            &["cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"],
            "p2p_uprobe_cu_memcpy_dtoh",
        ),
        "staged_bytes: device -> host copies, counted in the kernel by host buffer (dtoh)",
    ),
    row(
        HookId::CuMemcpyHtoD,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemcpyHtoD",
        "libcuda.so.1",
        entry(
            &["cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"],
            "p2p_uprobe_cu_memcpy_htod",
        ),
        "staged_bytes: host -> device copies, counted likewise (htod)",
    ),
    row(
        HookId::CuMemAlloc,
        Role::CudaAlloc,
        Path::P2p,
        "cuMemAlloc",
        "libcuda.so.1",
        call(
            &["cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"],
            "p2p_uprobe_cu_mem_alloc",
            "p2p_uretprobe_cu_mem_alloc",
        ),
        "cuda_call + kernel state: a device allocation and its device",
    )
    .op(Call::Cuda(CudaOp::Alloc)),
    row(
        HookId::CuMemFree,
        Role::CudaAlloc,
        Path::P2p,
        "cuMemFree",
        "libcuda.so.1",
        call(
            &["cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"],
            "p2p_uprobe_cu_mem_free",
            "p2p_uretprobe_cu_mem_free",
        ),
        "cuda_call + kernel state: a device allocation freed",
    )
    .op(Call::Cuda(CudaOp::Free)),
    row(
        HookId::CuIpcGetMemHandle,
        Role::GpuIpc,
        Path::P2p,
        "cuIpcGetMemHandle",
        "libcuda.so.1",
        call(
            &["cuIpcGetMemHandle"],
            "p2p_uprobe_cu_ipc_get_mem_handle",
            "p2p_uretprobe_cu_ipc_get_mem_handle",
        ),
        "gpu_ipc: an export (the 64-byte handle an importer will present)",
    )
    .op(Call::Cuda(CudaOp::IpcExport)),
    row(
        HookId::CuIpcOpenMemHandle,
        Role::GpuIpc,
        Path::P2p,
        "cuIpcOpenMemHandle",
        "libcuda.so.1",
        call(
            &["cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"],
            "p2p_uprobe_cu_ipc_open_mem_handle",
            "p2p_uretprobe_cu_ipc_open_mem_handle",
        ),
        "gpu_ipc: an import (the handle, passed by value on the stack, names the exporter)",
    )
    .op(Call::Cuda(CudaOp::IpcImport)),
    row(
        HookId::CuIpcCloseMemHandle,
        Role::GpuIpc,
        Path::P2p,
        "cuIpcCloseMemHandle",
        "libcuda.so.1",
        call(
            &["cuIpcCloseMemHandle"],
            "p2p_uprobe_cu_ipc_close_mem_handle",
            "p2p_uretprobe_cu_ipc_close_mem_handle",
        ),
        "gpu_ipc: an imported mapping closed",
    )
    .op(Call::Cuda(CudaOp::IpcClose)),
    row(
        HookId::CuMemExportToShareableHandle,
        Role::GpuIpc,
        Path::P2p,
        "cuMemExportToShareableHandle",
        "libcuda.so.1",
        call(&["cuMemExportToShareableHandle"], "p2p_uprobe_cu_mem_export", "p2p_uretprobe_cu_mem_export"),
        "gpu_ipc: a cuMem allocation exported as a shareable handle (POSIX fd: its file)",
    )
    .op(Call::Cuda(CudaOp::MemExport)),
    row(
        HookId::CuMemImportFromShareableHandle,
        Role::GpuIpc,
        Path::P2p,
        "cuMemImportFromShareableHandle",
        "libcuda.so.1",
        call(&["cuMemImportFromShareableHandle"], "p2p_uprobe_cu_mem_import", "p2p_uretprobe_cu_mem_import"),
        "gpu_ipc: a cuMem import (NCCL's P2P/CUMEM; the fd's file names the exporter)",
    )
    .op(Call::Cuda(CudaOp::MemImport)),
    row(
        HookId::CuMemMap,
        Role::GpuIpc,
        Path::P2p,
        "cuMemMap",
        "libcuda.so.1",
        call(&["cuMemMap"], "p2p_uprobe_cu_mem_map", "p2p_uretprobe_cu_mem_map"),
        "cuda_call: a cuMem handle mapped into the address space",
    )
    .op(Call::Cuda(CudaOp::MemMap)),
    row(
        HookId::CuMemSetAccess,
        Role::GpuIpc,
        Path::P2p,
        "cuMemSetAccess",
        "libcuda.so.1",
        call(&["cuMemSetAccess"], "p2p_uprobe_cu_mem_set_access", "p2p_uretprobe_cu_mem_set_access"),
        "cuda_call: which device may access a mapped range",
    )
    .op(Call::Cuda(CudaOp::MemSetAccess)),
    row(
        HookId::CuMemHostAlloc,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemHostAlloc",
        "libcuda.so.1",
        call(&["cuMemHostAlloc"], "p2p_uprobe_cu_mem_host_alloc", "p2p_uretprobe_cu_mem_host_alloc"),
        "host_alloc of host MRs: CUDA pinned host memory (NCCL's buffers with GDR off)",
    )
    .op(Call::Cuda(CudaOp::HostAlloc)),
    row(
        HookId::CuMemAllocHost,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemAllocHost",
        "libcuda.so.1",
        call(&["cuMemAllocHost_v2"], "p2p_uprobe_cu_mem_alloc_host", "p2p_uretprobe_cu_mem_alloc_host"),
        "host_alloc of host MRs: as cuMemHostAlloc",
    )
    .op(Call::Cuda(CudaOp::HostAlloc)),
    row(
        HookId::CuMemHostRegister,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemHostRegister",
        "libcuda.so.1",
        call(
            &["cuMemHostRegister", "cuMemHostRegister_v2"],
            "p2p_uprobe_cu_mem_host_register",
            "p2p_uretprobe_cu_mem_host_register",
        ),
        "host_alloc of host MRs: host memory pinned by CUDA",
    )
    .op(Call::Cuda(CudaOp::HostRegister)),
    row(
        HookId::CuMemFreeHost,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemFreeHost",
        "libcuda.so.1",
        call(&["cuMemFreeHost"], "p2p_uprobe_cu_mem_free_host", "p2p_uretprobe_cu_mem_free_host"),
        "host_alloc: pinned host memory freed",
    )
    .op(Call::Cuda(CudaOp::HostFree)),
    row(
        HookId::CuMemHostUnregister,
        Role::CudaHostMemory,
        Path::P2p,
        "cuMemHostUnregister",
        "libcuda.so.1",
        call(
            &["cuMemHostUnregister"],
            "p2p_uprobe_cu_mem_host_unregister",
            "p2p_uretprobe_cu_mem_host_unregister",
        ),
        "host_alloc: host memory unpinned",
    )
    .op(Call::Cuda(CudaOp::HostUnregister)),
];
