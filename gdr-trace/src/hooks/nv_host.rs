//! nvidia.ko's rows for CUDA pinned host memory, in the kernel: what tells a host MR's origin
//! while tracing even where libcuda's calls are not seen (a static build, a copy of libcuda
//! not hooked). NVIDIA/open-gpu-kernel-modules at 535.288.01 ... 595.45.04: `os_lock_user_pages`
//! (kernel-open/nvidia/os-mlock.c) is global (NV_API_CALL, not exported) in every branch, so it
//! is in /proc/kallsyms; `nvidia_mmap_sysmem` (kernel-open/nvidia/nv-mmap.c) is static with one
//! call site (nvidia_mmap_helper) in every branch, so a build may inline it: then the row says
//! it is not in /proc/kallsyms and the kernel map read from /proc/PID/maps still tells. nvidia.ko
//! ships no BTF: kprobes only.

use gdr_trace_common::HookId;

use super::{row, Call, CudaOp, Hook, Path, Programs, Role};
use crate::drivers::Branches;

const fn kprobes(kprobe: &'static str, kretprobe: &'static str) -> Programs {
    Programs::Kernel { fentry: None, fexit: None, kprobe: Some(kprobe), kretprobe: Some(kretprobe) }
}

pub const NV_HOST: &[Hook] = &[
    row(
        HookId::OsLockUserPages,
        Role::CudaHostMemory,
        Path::P2p,
        "os_lock_user_pages",
        "nvidia",
        kprobes("p2p_kprobe_os_lock_user_pages", "p2p_kretprobe_os_lock_user_pages"),
        "host_origin of host MRs: cuda-registered by kernel pin (cuMemHostRegister -> RmCreateOsDescriptor)",
    )
    .nvidia(Branches::ALL)
    .op(Call::Cuda(CudaOp::HostRegister)),
    row(
        HookId::NvidiaMmapSysmem,
        Role::CudaHostMemory,
        Path::P2p,
        "nvidia_mmap_sysmem",
        "nvidia (static: may be inlined)",
        kprobes("p2p_kprobe_nvidia_mmap_sysmem", "p2p_kretprobe_nvidia_mmap_sysmem"),
        "host_origin of host MRs: cuda-pinned by kernel map (mmap of /dev/nvidiactl -> vm_insert_page)",
    )
    .nvidia(Branches::ALL)
    .op(Call::Cuda(CudaOp::HostAlloc)),
];
