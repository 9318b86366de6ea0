//! The tracer's own rows of the hook table: the process filter's fork and exit followers, the
//! library follower's mmap watch, the fentry capability probe.

use gdr_trace_common::HookId;

use super::{row, Hook, Path, Programs, Role};

/// The tracer's own programs (`Path::Tracer`): attached by the loader when needed, not listed
/// among the hooks.
pub const TRACER: &[Hook] = &[
    row(
        HookId::SchedProcessFork,
        Role::ForkTracker,
        Path::Tracer,
        "sched_process_fork",
        "tracepoint sched",
        Programs::Tracepoint {
            category: "sched",
            name: "sched_process_fork",
            program: "track_sched_process_fork",
        },
        "the process filter: children forked after attach are traced too (attach PID only)",
    ),
    row(
        HookId::SchedProcessExit,
        Role::ExitUntracker,
        Path::Tracer,
        "sched_process_exit",
        "tracepoint sched",
        Programs::Tracepoint {
            category: "sched",
            name: "sched_process_exit",
            program: "untrack_sched_process_exit",
        },
        "exited tasks leave the process filter (attach PID); a traced process's end is sent to userspace, \
         which drops what it kept for it",
    ),
    row(
        HookId::SysEnterMmap,
        Role::LibraryMapper,
        Path::Tracer,
        "sys_enter_mmap",
        "tracepoint syscalls",
        Programs::Tracepoint { category: "syscalls", name: "sys_enter_mmap", program: "libs_sys_enter_mmap" },
        "the library follower: marks a traced thread mapping a file executable",
    ),
    row(
        HookId::SysExitMmap,
        Role::LibraryMapper,
        Path::Tracer,
        "sys_exit_mmap",
        "tracepoint syscalls",
        Programs::Tracepoint { category: "syscalls", name: "sys_exit_mmap", program: "libs_sys_exit_mmap" },
        "the library follower: tells userspace which process to look at for a new library copy",
    ),
    row(
        HookId::CapabilityFentry,
        Role::CapabilityProbe,
        Path::Tracer,
        "vfs_read",
        "vmlinux",
        Programs::Kernel { fentry: Some("capability_fentry"), fexit: None, kprobe: None, kretprobe: None },
        "loaded, never attached: whether this kernel allows fentry/fexit (the kernel facts)",
    ),
];
