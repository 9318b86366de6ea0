//! THE hook table: every function gdr-trace hooks, where it lives, which eBPF programs hook
//! it, what it feeds, and whether tracing can go on without it. The attach strategy
//! (`loader::attach`), `gdr-trace probes` and the start-up warnings all come from this table.
//! Adding a hook is one row here plus one eBPF function in `gdr-trace-ebpf`.

use gdr_trace_common::HookId;

/// A userspace library hooked with uprobes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Ibverbs,
}

impl Library {
    /// The soname looked up on the system when no process is attached.
    pub const fn soname(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so.1",
        }
    }
    /// Prefix matched against the file names in /proc/PID/maps.
    pub const fn map_prefix(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so",
        }
    }
}

/// Which eBPF programs implement a hook, by program (function) name in `gdr-trace-ebpf`.
#[derive(Debug, Clone, Copy)]
pub enum Programs {
    /// Needs arguments and return value: one fexit program, or a kprobe+kretprobe pair.
    KernelReturn { fexit: &'static str, kprobe: &'static str, kretprobe: &'static str },
    /// Needs arguments only: one fentry program, or one kprobe.
    KernelEntry { fentry: &'static str, kprobe: &'static str },
    /// A userspace function with arguments and return value: uprobe + uretprobe.
    UserReturn { lib: Library, uprobe: &'static str, uretprobe: &'static str },
}

#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub id: HookId,
    /// Kernel symbol or library function.
    pub function: &'static str,
    /// Where it is usually found (documentation; the real place is looked up at attach time).
    pub usual_home: &'static str,
    pub programs: Programs,
    /// What its records feed.
    pub feeds: &'static str,
    /// Tracing goes on without it (every hook is optional today: any one source is enough).
    pub optional: bool,
}

impl Hook {
    pub const fn is_kernel(&self) -> bool {
        !matches!(self.programs, Programs::UserReturn { .. })
    }
}

pub const HOOKS: &[Hook] = &[
    Hook {
        id: HookId::IbUmemGet,
        function: "ib_umem_get",
        usual_home: "ib_uverbs (Debian 6.1/6.12), ib_core elsewhere",
        programs: Programs::KernelReturn {
            fexit: "mr_fexit_ib_umem_get",
            kprobe: "mr_kprobe_ib_umem_get",
            kretprobe: "mr_kretprobe_ib_umem_get",
        },
        feeds: "mr_register: pinned user pages (verdict host), errno on failure, device",
        optional: true,
    },
    Hook {
        id: HookId::IbUmemRelease,
        function: "ib_umem_release",
        usual_home: "ib_uverbs / ib_core",
        programs: Programs::KernelEntry {
            fentry: "mr_fentry_ib_umem_release",
            kprobe: "mr_kprobe_ib_umem_release",
        },
        feeds: "mr_release: live pinned bytes per process",
        optional: true,
    },
    Hook {
        id: HookId::IbvRegMr,
        function: "ibv_reg_mr",
        usual_home: "libibverbs.so.1",
        programs: Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr",
            uretprobe: "mr_uretprobe_ibv_reg_mr",
        },
        feeds: "mr_register from userspace (second source; the only one if kernel hooks fail)",
        optional: true,
    },
    Hook {
        id: HookId::IbvRegMrIova2,
        function: "ibv_reg_mr_iova2",
        usual_home: "libibverbs.so.1",
        programs: Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr_iova2",
            uretprobe: "mr_uretprobe_ibv_reg_mr_iova2",
        },
        feeds: "mr_register from userspace (NCCL's relaxed-ordering path)",
        optional: true,
    },
    Hook {
        id: HookId::IbvDeregMr,
        function: "ibv_dereg_mr",
        usual_home: "libibverbs.so.1",
        programs: Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_dereg_mr",
            uretprobe: "mr_uretprobe_ibv_dereg_mr",
        },
        feeds: "mr_release from userspace",
        optional: true,
    },
];

/// The process filter's fork follower (attached only by `attach`).
pub const FORK_TRACKER: (&str, &str, &str) = ("track_sched_process_fork", "sched", "sched_process_fork");

pub fn by_id(id: HookId) -> &'static Hook {
    HOOKS.iter().find(|h| h.id == id).expect("every HookId has a row in HOOKS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_id_has_one_row() {
        for v in 1..=5 {
            let id = HookId::from_u32(v).unwrap();
            assert_eq!(HOOKS.iter().filter(|h| h.id == id).count(), 1, "{id:?}");
        }
    }
}
