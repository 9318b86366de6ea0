//! The tracer's own rows: following forks and exits of traced processes, and the library
//! follower's kernel side. Not evidence; without them the trace is narrower, as each says.

use aya::Ebpf;

use super::trampoline::tracepoint;
use crate::{
    facts::HookStatus,
    hooks::{self, Programs, Role, HOOKS},
    procfs,
};

/// Follows forks of traced processes in the kernel. Without it only processes present at
/// attach are traced: stated in the hook list, not fatal.
pub fn fork_tracker(ebpf: &mut Ebpf, tracefs_problem: Option<String>) -> HookStatus {
    let row = hooks::by_role(Role::ForkTracker);
    let Programs::Tracepoint { category, name, program: prog } = row.programs else {
        unreachable!("the fork tracker row is a tracepoint")
    };
    let mut st = HookStatus {
        hook: row.function,
        side: "kernel",
        location: Some("tracepoint".into()),
        attached: None,
        reasons: vec![],
    };
    match tracepoint(ebpf, prog, category, name) {
        Ok(()) => st.attached = Some("tracepoint".into()),
        Err(e) => {
            st.reasons.push(format!("{e} (children forked after attach are not followed)"));
            st.reasons.extend(tracefs_problem);
            return st;
        }
    }
    if let Err(e) = exit_follower(ebpf) {
        st.reasons.push(format!("{e} (exited tasks stay in the traced set until it is full)"));
    }
    st
}

/// Follows exits of traced processes: they leave the in-kernel filter, and userspace hears of
/// each (a `ProcessExit` record) to drop what it keeps per process.
pub fn exit_follower(ebpf: &mut Ebpf) -> Result<(), String> {
    let exit = hooks::by_role(Role::ExitUntracker);
    let Programs::Tracepoint { category, name, program: prog } = exit.programs else {
        unreachable!("the exit follower row is a tracepoint")
    };
    tracepoint(ebpf, prog, category, name)
}

/// The library follower's kernel side: `sys_enter_mmap` marks a traced thread mapping a file
/// executable, `sys_exit_mmap` tells userspace (`loader::follow`). Without it the periodic
/// /proc scan alone finds new library copies (stated on the row).
pub fn library_mapper(ebpf: &mut Ebpf) -> HookStatus {
    let mut st = HookStatus {
        hook: "sys_exit_mmap",
        side: "kernel",
        location: Some("tracepoint".into()),
        attached: None,
        reasons: vec![],
    };
    let fallback = "new library copies are found by the /proc scan alone (every 0.5 s)";
    // The programs read the syscall records at fixed offsets: checked against this kernel's.
    let layout = [("sys_enter_mmap", "prot", 32), ("sys_enter_mmap", "fd", 48), ("sys_exit_mmap", "ret", 16)];
    for (tp, field, want) in layout {
        let got = procfs::tracepoint_field_offset("syscalls", tp, field);
        if got != Some(want) {
            st.reasons.push(format!("syscalls:{tp} has {field} at {got:?}, not {want}: {fallback}"));
            return st;
        }
    }
    for row in HOOKS.iter().filter(|h| h.role == Role::LibraryMapper) {
        let Programs::Tracepoint { category, name, program } = row.programs else {
            unreachable!("the library mapper rows are tracepoints")
        };
        if let Err(e) = tracepoint(ebpf, program, category, name) {
            st.reasons.push(format!("{e}: {fallback}"));
            return st;
        }
    }
    st.attached = Some("tracepoint".into());
    st
}
