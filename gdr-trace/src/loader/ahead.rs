//! What start-up does ahead and all at once rather than hook by hook: the tracepoints the load
//! will attach (their perf events are opened on threads, `perf_events`), and their programs,
//! verified on threads side by side (on a busy machine the verifier is most of the attach's
//! CPU time).

use aya::{programs::Program, Ebpf};

use super::{
    options::{AttachMode, LoadOptions},
    perf_events::Event,
    storage_attach, storage_kernel,
};
use crate::{
    hooks::{Programs, Role, HOOKS},
    procfs,
};

/// The tracepoints this load will attach if nothing fails, with their programs: the process
/// filter's, the library follower's, and the storage hooks' where they go through tracepoints
/// (no fentry, or `--attach-mode kprobe`). An event the attach then does not use is released
/// with the hooks.
pub fn tracepoints(opts: &LoadOptions, fentry_refused: bool) -> Vec<(&'static str, Event)> {
    let mut out = Vec::new();
    let mut row = |role: Role| {
        for h in HOOKS.iter().filter(|h| h.role == role) {
            if let Programs::Tracepoint { category, name, program } = h.programs {
                out.push((program, Event::tracepoint(category, name)));
            }
        }
    };
    row(Role::ExitUntracker);
    if opts.filter_pid.is_some() {
        row(Role::ForkTracker);
    }
    if opts.uprobes {
        row(Role::LibraryMapper);
    }
    if !opts.storage {
        return out;
    }
    let syscall_tps = match opts.attach_mode {
        AttachMode::Kprobe => true,
        AttachMode::Auto => fentry_refused,
        AttachMode::Fentry => false,
    };
    for h in HOOKS.iter().filter(|h| storage_attach::is_storage(h)) {
        match h.programs {
            Programs::Syscalls { names: ["ioctl"], .. } => {}
            Programs::Syscalls { names, tracepoint, .. } if syscall_tps => {
                for (n, prog) in names.iter().zip(tracepoint) {
                    out.push((*prog, Event::tracepoint("syscalls", &format!("sys_exit_{n}"))));
                }
            }
            Programs::Tracepoint { category: "io_uring", name, program } => {
                let name = storage_kernel::uring_tracepoint(name);
                if procfs::tracepoint_field_offset("io_uring", name, "req").is_some() {
                    out.push((program, Event::tracepoint("io_uring", name)));
                }
            }
            Programs::Tracepoint { category, name, program } => {
                out.push((program, Event::tracepoint(category, name)))
            }
            _ => {}
        }
    }
    out
}

/// Loads (verifies) these programs on as many threads as there are CPUs. A program that fails
/// here is loaded again where it is attached, which then says why.
pub fn load_programs<'a>(ebpf: &mut Ebpf, names: impl IntoIterator<Item = &'a str>) {
    let names: std::collections::HashSet<&str> = names.into_iter().collect();
    let mut progs: Vec<&mut Program> =
        ebpf.programs_mut().filter(|(n, p)| names.contains(n) && p.fd().is_err()).map(|(_, p)| p).collect();
    if progs.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 8);
    let per = progs.len().div_ceil(threads);
    std::thread::scope(|s| {
        for chunk in progs.chunks_mut(per) {
            s.spawn(move || {
                for p in chunk.iter_mut() {
                    let _ = match &mut **p {
                        Program::TracePoint(p) => p.load(),
                        Program::UProbe(p) => p.load(),
                        Program::KProbe(p) => p.load(),
                        _ => Ok(()),
                    };
                }
            });
        }
    });
}
