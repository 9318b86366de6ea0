//! Attaching the storage hooks of the hook table: system calls (fexit on the kernel entry point
//! where the kernel allows it, else the `sys_exit` tracepoint) and plain tracepoints. cuFile
//! uprobes and the nvidia-fs kernel hooks go through the common paths in `loader::attach`.

use aya::Ebpf;

use gdr_trace_common::HookId;

use super::{
    options::{AttachMode, LoadOptions},
    storage_kernel::{syscall_symbol, uring_tracepoint},
    trampoline::{tracepoint as attach_tracepoint, Trampolines},
};
use crate::{
    facts::{HookStatus, KernelFacts, FENTRY_UNAVAILABLE, SYSCALL_TRACEPOINT_COST},
    hooks::{Hook, Path, Programs},
};

/// Whether a row of the hook table belongs to the storage path.
pub fn is_storage(hook: &Hook) -> bool {
    hook.path == Path::Storage
}

/// How a row's first attach pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Done,
    /// Decided after every other row: the `ioctl` row waits for `nvfs_ioctl` (see [`finish`]).
    AfterAll,
}

pub fn attach(
    ebpf: &mut Ebpf,
    hook: &Hook,
    opts: &LoadOptions,
    facts: &KernelFacts,
    tramp: &mut Trampolines,
    st: &mut HookStatus,
) -> Pass {
    match hook.programs {
        Programs::Syscalls { names: ["ioctl"], .. } => return Pass::AfterAll,
        Programs::Syscalls { names, fexit, tracepoint } => {
            syscalls(ebpf, names, fexit, tracepoint, opts.attach_mode, facts, tramp, st)
        }
        Programs::Tracepoint { category, name, program } => {
            let name = if category == "io_uring" { uring_tracepoint(name) } else { name };
            st.location = Some(format!("tracepoint {category}:{name}"));
            // io_uring requests are followed by their `req` pointer, which older records lack.
            if category == "io_uring"
                && crate::procfs::tracepoint_field_offset(category, name, "req").is_none()
            {
                st.reasons.push(format!(
                    "tracepoint {category}:{name} is missing or has no `req` field on this kernel: io_uring \
                     I/O can't be followed request by request (it is not counted)"
                ));
                return Pass::Done;
            }
            match attach_tracepoint(ebpf, program, category, name) {
                Ok(()) => st.attached = Some("tracepoint".into()),
                Err(e) => st.reasons.push(e),
            }
        }
        _ => unreachable!("storage_attach handles Syscalls and Tracepoint rows only"),
    }
    Pass::Done
}

/// Attaches `ioctl` (nvidia-fs ioctls from the system call) only where the driver's own
/// `nvfs_ioctl` could not be hooked and an nvidia-fs device exists: the system call hook runs
/// for every ioctl of every process, the driver hook only for nvidia-fs.
/// `deferred`: the rows whose first pass said [`Pass::AfterAll`] (indexes into `statuses`, which
/// follow the hook table).
pub fn finish(
    ebpf: &mut Ebpf,
    opts: &LoadOptions,
    facts: &KernelFacts,
    tramp: &mut Trampolines,
    statuses: &mut [HookStatus],
    deferred: &[usize],
) {
    // The rows by id: their names live in the hook table only.
    let (driver, syscall) = (crate::hooks::by_id(HookId::NvfsIoctl), crate::hooks::by_id(HookId::SysIoctl));
    let driver_hooked = statuses.iter().any(|s| s.hook == driver.function && s.attached.is_some());
    let Some(&i) = deferred.iter().find(|&&i| statuses[i].hook == syscall.function) else { return };
    let st = &mut statuses[i];
    if driver_hooked {
        st.reasons
            .push("not needed: nvfs_ioctl is hooked in the driver (it fires only for nvidia-fs)".into());
        return;
    }
    if !nvidia_fs_present() {
        st.reasons.push(format!(
            "no nvidia-fs here (no /dev/nvidia-fs*, no nvfs_ioctl): {}",
            crate::facts::NOTHING_TO_WATCH
        ));
        return;
    }
    let Programs::Syscalls { names, fexit, tracepoint } = syscall.programs else {
        return;
    };
    syscalls(ebpf, names, fexit, tracepoint, opts.attach_mode, facts, tramp, st);
}

fn nvidia_fs_present() -> bool {
    std::fs::read_dir("/dev")
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("nvidia-fs")))
        .unwrap_or(false)
}

#[allow(clippy::too_many_arguments)] // one row's programs, and what the kernel allows
fn syscalls(
    ebpf: &mut Ebpf,
    names: &[&str],
    fexit: &[&str],
    tracepoint: &[&str],
    mode: AttachMode,
    facts: &KernelFacts,
    tramp: &mut Trampolines,
    st: &mut HookStatus,
) {
    st.location = Some("syscall".into());
    // The descriptor is read from the saved registers: without their layout nothing is counted.
    if facts.storage_offsets_unknown.contains(&gdr_trace_common::storage::globals::REGS_ARG0_OFF) {
        st.reasons.push(
            "struct pt_regs is not in this kernel's BTF: syscall arguments can't be read, nothing would be \
             counted"
                .into(),
        );
        return;
    }
    let (mut by_fexit, mut by_tp) = (0, 0);
    for ((name, fx), tp) in names.iter().zip(fexit).zip(tracepoint) {
        let mut done = false;
        if mode != AttachMode::Kprobe {
            let sym = syscall_symbol(name);
            let r = match &facts.fentry_unavailable {
                Some(why) => Err(format!("{FENTRY_UNAVAILABLE}: {why}")),
                None => tramp.attach(ebpf, fx, true, &sym, None),
            };
            match r {
                Ok(()) => {
                    by_fexit += 1;
                    done = true;
                }
                // Said once for the row, not once per call.
                Err(e) if st.reasons.iter().any(|r| r.contains(&e)) => {}
                Err(e) => st.reasons.push(format!("fexit {sym}: {e}")),
            }
        }
        if !done && mode != AttachMode::Fentry {
            let tp_name = format!("sys_exit_{name}");
            match attach_tracepoint(ebpf, tp, "syscalls", &tp_name) {
                Ok(()) => by_tp += 1,
                Err(e) => st.reasons.push(format!("tracepoint syscalls:{tp_name}: {e}")),
            }
        }
    }
    let n = names.len();
    st.attached = match (by_fexit, by_tp) {
        (0, 0) => None,
        (f, 0) if f == n => Some("fexit".into()),
        (0, t) if t == n => Some("tracepoint".into()),
        (f, t) => Some(format!("fexit {f}/{n}, tracepoint {t}/{n}")),
    };
    if by_tp > 0 {
        st.reasons.push(SYSCALL_TRACEPOINT_COST.into());
    }
}
