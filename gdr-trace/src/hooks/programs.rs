//! The hook table's program column: which eBPF programs implement a hook, and where a
//! userspace hook's library is found.

/// A userspace library hooked with uprobes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Library {
    Ibverbs,
    Cuda,
    /// GPUDirect Storage's userspace library.
    Cufile,
}

impl Library {
    /// The soname looked up on the system when no process is attached.
    pub const fn soname(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so.1",
            Self::Cuda => "libcuda.so.1",
            Self::Cufile => "libcufile.so.0",
        }
    }
    /// Prefix matched against the file names in /proc/PID/maps.
    pub const fn map_prefix(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so",
            Self::Cuda => "libcuda.so",
            Self::Cufile => "libcufile.so",
        }
    }
}

/// Which eBPF programs implement a hook, by program (function) name in `gdr-trace-ebpf`.
#[derive(Debug, Clone, Copy)]
pub enum Programs {
    /// A kernel function: BTF programs (fentry and/or fexit, all or none) where the kernel
    /// allows them, else probe programs (kprobe and/or kretprobe).
    Kernel {
        fentry: Option<&'static str>,
        fexit: Option<&'static str>,
        kprobe: Option<&'static str>,
        kretprobe: Option<&'static str>,
    },
    /// A userspace function with arguments and return value: uprobe + uretprobe.
    UserReturn { lib: Library, uprobe: &'static str, uretprobe: &'static str },
    /// A userspace function exported under several names (libcuda's plain, `_v2`, `_ptds`,
    /// `_ptsz` variants with one signature): the same programs at every one of `symbols` the
    /// library exports; the uretprobe only where the return value is needed.
    UserSymbols {
        lib: Library,
        symbols: &'static [&'static str],
        uprobe: &'static str,
        uretprobe: Option<&'static str>,
    },
    /// System calls, hooked at exit (arguments and result in one program): fexit on each call's
    /// kernel entry point (`__x64_sys_<name>`, fires only for that call), else its
    /// `syscalls:sys_exit_<name>` tracepoint. `names`, `fexit`, `tracepoint` run in parallel.
    Syscalls {
        names: &'static [&'static str],
        fexit: &'static [&'static str],
        tracepoint: &'static [&'static str],
    },
    /// A function of the RDMA provider library (librxe, libmlx5 ...), not exported: found per
    /// process in its `ibv_context.ops` table at `slot` (`gdr_trace_common::mr::bytes::OPS_*`) and
    /// hooked there by the library follower (`loader::provider`).
    Provider { slot: u64, uprobe: &'static str, uretprobe: Option<&'static str> },
    /// A kernel tracepoint.
    Tracepoint { category: &'static str, name: &'static str, program: &'static str },
    /// Kernel functions that mean one thing (a verb's handlers: its write command's and its
    /// ioctl method's; one job's functions in several drivers): the same kprobe and kretprobe at
    /// every one of `symbols` the running kernel has. Cold paths, so kprobes only.
    KernelSymbols { symbols: &'static [&'static str], kprobe: &'static str, kretprobe: &'static str },
}

impl Programs {
    /// Whether a userspace library is hooked (uprobes), not the kernel.
    pub const fn is_user(&self) -> bool {
        matches!(self, Self::UserReturn { .. } | Self::UserSymbols { .. } | Self::Provider { .. })
    }
    /// The library a userspace hook is in.
    pub const fn library(&self) -> Option<Library> {
        match self {
            Self::UserReturn { lib, .. } | Self::UserSymbols { lib, .. } => Some(*lib),
            _ => None,
        }
    }
    /// Needs arguments and the return value: fexit, or kprobe + kretprobe.
    pub const fn kernel_return(fexit: &'static str, kprobe: &'static str, kretprobe: &'static str) -> Self {
        Self::Kernel { fentry: None, fexit: Some(fexit), kprobe: Some(kprobe), kretprobe: Some(kretprobe) }
    }
    /// Needs arguments only: fentry, or kprobe.
    pub const fn kernel_entry(fentry: &'static str, kprobe: &'static str) -> Self {
        Self::Kernel { fentry: Some(fentry), fexit: None, kprobe: Some(kprobe), kretprobe: None }
    }
    /// Marks the call in progress at entry and reports at return.
    pub const fn kernel_both(
        fentry: &'static str,
        fexit: &'static str,
        kprobe: &'static str,
        kretprobe: &'static str,
    ) -> Self {
        Self::Kernel {
            fentry: Some(fentry),
            fexit: Some(fexit),
            kprobe: Some(kprobe),
            kretprobe: Some(kretprobe),
        }
    }
}

/// An eBPF program's kind, as the object's section names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramKind {
    Fentry,
    Fexit,
    Kprobe,
    Kretprobe,
    Uprobe,
    Uretprobe,
    Tracepoint,
}

impl Programs {
    /// Every program of the row, with its kind.
    pub fn each(&self) -> Vec<(&'static str, ProgramKind)> {
        use ProgramKind as K;
        match *self {
            Self::Kernel { fentry, fexit, kprobe, kretprobe } => {
                [(fentry, K::Fentry), (fexit, K::Fexit), (kprobe, K::Kprobe), (kretprobe, K::Kretprobe)]
                    .into_iter()
                    .filter_map(|(p, k)| p.map(|p| (p, k)))
                    .collect()
            }
            Self::UserReturn { uprobe, uretprobe, .. } => {
                vec![(uprobe, K::Uprobe), (uretprobe, K::Uretprobe)]
            }
            Self::UserSymbols { uprobe, uretprobe, .. } | Self::Provider { uprobe, uretprobe, .. } => {
                std::iter::once((uprobe, K::Uprobe)).chain(uretprobe.map(|p| (p, K::Uretprobe))).collect()
            }
            Self::Syscalls { fexit, tracepoint, .. } => fexit
                .iter()
                .map(|p| (*p, K::Fexit))
                .chain(tracepoint.iter().map(|p| (*p, K::Tracepoint)))
                .collect(),
            Self::Tracepoint { program, .. } => vec![(program, K::Tracepoint)],
            Self::KernelSymbols { kprobe, kretprobe, .. } => {
                vec![(kprobe, K::Kprobe), (kretprobe, K::Kretprobe)]
            }
        }
    }
}
