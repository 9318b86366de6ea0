//! What loading found: the running kernel's facts and how each hook attached. A leaf (imports
//! nothing of this crate): the loader fills these, sinks and recordings show them.

use serde::Serialize;

/// How a hook's reasons begin when fentry/fexit is refused kernel-wide (`probes` and the
/// `watch` banner state the fact once and mark the rows it explains).
pub const FENTRY_UNAVAILABLE: &str = "fentry unavailable on this kernel";
/// How a hook's reasons begin when kprobes are unavailable kernel-wide.
pub const KPROBE_UNAVAILABLE: &str = "kprobe unavailable on this kernel";
/// The reason on every row attached through syscall tracepoints.
pub const SYSCALL_TRACEPOINT_COST: &str =
    "syscall tracepoints put every system call of every process on the slow path while attached";

/// How a hook's reasons begin when it was left out on purpose (`--no-storage`, or `serve`
/// without `--storage` where fentry is refused): not attached, and not missing either.
pub const LEFT_OUT: &str = "storage hooks left out";
/// How a work-request row's reasons begin with `--no-bytes`.
pub const BYTES_LEFT_OUT: &str = "byte counting left out";

/// Whether a hook's first reason says it was left out on purpose.
pub fn is_left_out(first_reason: &str) -> bool {
    first_reason.starts_with(LEFT_OUT) || first_reason.starts_with(BYTES_LEFT_OUT)
}

/// How one hook ended up.
#[derive(Debug, Clone, Serialize)]
pub struct HookStatus {
    pub hook: &'static str,
    /// "kernel" or "user".
    pub side: &'static str,
    /// Where the function was found: "vmlinux", a module name, or a library path.
    pub location: Option<String>,
    /// "fexit", "fentry", "kprobe+kretprobe", "kprobe", "uprobe+uretprobe"; None: not attached.
    pub attached: Option<String>,
    /// Why a preferred mode was not used, or why nothing attached (program, symbol, errno).
    pub reasons: Vec<String>,
}

impl HookStatus {
    /// Left out on purpose (the user asked, or a command does not use it): not "unattached".
    pub fn left_out(&self) -> bool {
        self.attached.is_none() && self.reasons.first().is_some_and(|r| is_left_out(r))
    }

    fn left_out_as(&self, why: &str) -> bool {
        self.attached.is_none() && self.reasons.first().is_some_and(|r| r.starts_with(why))
    }
}

/// How a hook's reason ends when what it watches is not on this host (not a blindness).
pub const NOTHING_TO_WATCH: &str = "nothing to watch";

/// The reason on user-space rows with `--no-uprobes`.
pub const UPROBES_DISABLED: &str = "uprobes disabled (--no-uprobes)";

/// The tracer's own rows a command may list (the fork follower of `attach PID`, the library
/// follower's mmap watch): its machinery, not hooks that observe, so in no hook total (`watch`
/// has no fork follower: its total would differ from `attach`'s by one).
pub const TRACER_ROWS: [&str; 2] = ["sched_process_fork", "sys_exit_mmap"];

/// How many hooks attached, out of how many: the one count every banner, `probes`, `doctor`,
/// `report` and `/healthz` state. The total is every hook that observes (the tracer's own rows
/// out) less those left out on purpose (`--no-storage`, `audit`): neither attached nor missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookCount {
    pub attached: usize,
    pub total: usize,
    pub left_out: usize,
}

impl HookCount {
    /// `rows`: each hook's name, whether it attached, and its first reason.
    pub fn of<'a>(rows: impl IntoIterator<Item = (&'a str, bool, Option<&'a str>)>) -> Self {
        let mut c = Self::default();
        for (hook, attached, first_reason) in rows {
            if TRACER_ROWS.contains(&hook) {
                continue;
            }
            if !attached && first_reason.is_some_and(is_left_out) {
                c.left_out += 1;
                continue;
            }
            c.total += 1;
            c.attached += usize::from(attached);
        }
        c
    }

    pub fn statuses(hooks: &[HookStatus]) -> Self {
        Self::of(hooks.iter().map(|h| (h.hook, h.attached.is_some(), h.reasons.first().map(String::as_str))))
    }
}

/// Whether the storage hooks were left out on purpose (`--no-storage`): "not traced", never
/// "no file I/O seen".
pub fn storage_left_out(hooks: &[HookStatus]) -> bool {
    hooks.iter().any(|h| h.left_out_as(LEFT_OUT))
}

/// Whether byte counting was left out on purpose (`--no-bytes`): bytes "not traced", never 0.
pub fn bytes_left_out(hooks: &[HookStatus]) -> bool {
    hooks.iter().any(|h| h.left_out_as(BYTES_LEFT_OUT))
}

/// One copy of a hooked library (a distinct file: device and inode as /proc/PID/maps shows
/// them), wherever processes map it: what `probes` lists and `library_copy` records say.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct LibraryCopy {
    /// The soname it stands for ("libcufile.so.0").
    pub library: String,
    /// "attached" (its hooks are in place), "failed" (see `reasons`), "detached" (the last
    /// process mapping it exited).
    pub state: String,
    /// The path as a process that maps it sees it (inside its own root).
    pub path: String,
    /// `major:minor` of the file's device, as the maps show it.
    pub dev: String,
    pub inode: u64,
    /// The mount namespace of the first process found mapping it (`mnt:[N]`), and whether it
    /// is the tracer's own.
    pub mnt_ns: Option<u64>,
    pub own_mnt_ns: bool,
    /// That process's cgroup (the unified hierarchy's path; a container runtime's is there).
    pub cgroup: Option<String>,
    /// How many traced processes map it now, and the first few of them.
    pub processes: usize,
    pub pids: Vec<u32>,
    /// Functions hooked in it.
    pub hooked: Vec<String>,
    /// Why a function or the whole copy was not hooked.
    pub reasons: Vec<String>,
    /// Found at start (the operator's path, or the system's copy): kept until the end.
    pub from_start: bool,
    /// How long opening, parsing and attaching it took (milliseconds), when it attached.
    pub attach_ms: Option<f64>,
    /// How its hooks are attached, for a copy found after start: "uprobe_multi" (at most two
    /// links, Linux 6.6+) or "perf_event" (a uprobe per offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct KernelFacts {
    pub kernel: String,
    pub vmlinux_btf: bool,
    /// `struct ib_device.name` offset, when BTF describes it.
    pub ib_device_name_off: Option<u32>,
    /// Whether BTF describes the dma-buf exporter chain (else: "exporter unknown (no BTF)").
    pub dmabuf_exporter_readable: bool,
    /// Why kprobes can't be used here (None: they can).
    pub kprobe_unavailable: Option<String>,
    /// Why fentry/fexit can't be used here (None: a test program loaded).
    pub fentry_unavailable: Option<String>,
    /// Storage-program offsets this kernel's BTF / tracepoint formats didn't give (what needs
    /// them is skipped, and `probes` says so on the rows concerned).
    pub storage_offsets_unknown: Vec<&'static str>,
    /// nvidia-peermem's client layout, read where its get_pages callbacks live (None: the
    /// module was not found, so the persistent client's name is not known).
    pub peermem: Option<Peermem>,
    /// The NVIDIA driver branch found and the nvidia-peermem flow expected there.
    pub driver: Option<crate::drivers::Detected>,
    /// Where the facts that need a kernel struct come from on this kernel: BTF, or the
    /// fallback used where a module ships none (MLNX_OFED's DKMS builds). `probes` lists them.
    #[serde(default)]
    pub fact_sources: Vec<FactSource>,
}

/// One fact and where it is read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FactSource {
    pub fact: &'static str,
    pub source: String,
    /// Not the first choice (its BTF is missing).
    pub fallback: bool,
}

impl FactSource {
    /// The device of a kernel pin: `ib_device.name` by BTF, else the uverbs file's number.
    pub fn device(name_off: bool, uverbs_walk: bool) -> Self {
        let (source, fallback) = match (name_off, uverbs_walk) {
            (true, _) => ("ib_device.name (BTF of ib_core)", false),
            (false, true) => (
                "the uverbs file's device number -> /sys/class/infiniband_verbs (no BTF for struct ib_device)",
                true,
            ),
            (false, false) => (
                "libibverbs' ibv_context where its registration calls are hooked; queue pins' device unknown",
                true,
            ),
        };
        Self { fact: "RDMA device of a pin", source: source.into(), fallback }
    }

    /// A dma-buf registration's exporter: through the umem by BTF, else through its fd.
    pub fn exporter(umem_chain: bool, fd_walk: bool) -> Self {
        let (source, fallback) = match (umem_chain, fd_walk) {
            (true, _) => ("ib_umem_dmabuf->attach->dmabuf->exp_name (BTF of ib_core)", false),
            (false, true) => (
                "the registration's fd -> file->private_data -> dma_buf.exp_name (vmlinux BTF; no BTF for struct ib_umem_dmabuf)",
                true,
            ),
            (false, false) => ("unknown: dma-buf MRs' exporter cannot be read (no BTF)", true),
        };
        Self { fact: "dma-buf exporter", source: source.into(), fallback }
    }
}

/// nvidia-peermem's mode, which names its persistent client (`nv_mem_get_pages_nc`'s owner):
/// open-gpu-kernel-modules 560+ registers one client `nv_mem` by default and, with
/// `persistent_api_support=0`, two: `nv_mem` (invalidatable) and `nv_mem_nc` (persistent).
/// Versions before the parameter existed always registered both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeermemMode {
    /// One client, `nv_mem`, pinning with the persistent API.
    Persistent,
    /// Two clients: `nv_mem` (invalidatable) and `nv_mem_nc` (persistent).
    Legacy,
}

/// Where the mode was read, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Peermem {
    /// The module the peer client's callbacks were found in (`nvidia_peermem` on a GPU node).
    pub module: String,
    /// The file read: `/sys/module/<module>/parameters/persistent_api_support`.
    pub param: String,
    /// The parameter's value (None: the file is absent, a version before 560 = legacy).
    pub persistent_api_support: Option<i32>,
    pub mode: PeermemMode,
}

impl Peermem {
    /// Reads the mode of `module` under `sys_module` (`/sys/module` on a live system).
    pub fn read(sys_module: &std::path::Path, module: &str) -> Result<Self, String> {
        let dir = sys_module.join(module);
        if !dir.is_dir() {
            return Err(format!("{} does not exist", dir.display()));
        }
        let param = dir.join("parameters/persistent_api_support");
        let value = match std::fs::read_to_string(&param) {
            Ok(text) => Some(
                text.trim()
                    .parse::<i32>()
                    .map_err(|e| format!("{}: {e} ({:?})", param.display(), text.trim()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", param.display())),
        };
        let mode = match value {
            Some(0) | None => PeermemMode::Legacy,
            Some(_) => PeermemMode::Persistent,
        };
        Ok(Self {
            module: module.into(),
            param: param.display().to_string(),
            persistent_api_support: value,
            mode,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A /sys/module tree of its own under the target dir (no temp-file crate needed).
    fn sys_module(name: &str, param: Option<&str>) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("gdr-facts-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("nvidia_peermem/parameters");
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(v) = param {
            std::fs::write(dir.join("persistent_api_support"), v).unwrap();
        }
        root
    }

    #[test]
    fn peermem_mode_comes_from_the_module_parameter() {
        for (name, param, value, mode) in [
            ("default", Some("1\n"), Some(1), PeermemMode::Persistent),
            ("legacy", Some("0\n"), Some(0), PeermemMode::Legacy),
            ("before-560", None, None, PeermemMode::Legacy),
        ] {
            let root = sys_module(name, param);
            let p = Peermem::read(&root, "nvidia_peermem").unwrap();
            assert_eq!((p.persistent_api_support, p.mode), (value, mode), "{name}");
            assert_eq!(p.module, "nvidia_peermem");
            assert!(p.param.ends_with("nvidia_peermem/parameters/persistent_api_support"), "{}", p.param);
            std::fs::remove_dir_all(root).unwrap();
        }
    }

    #[test]
    fn an_unreadable_mode_says_why() {
        let root = sys_module("bad", Some("yes"));
        let err = Peermem::read(&root, "nvidia_peermem").unwrap_err();
        assert!(err.contains("persistent_api_support") && err.contains("\"yes\""), "{err}");
        let err = Peermem::read(&root, "gdrsim").unwrap_err();
        assert!(err.ends_with("gdrsim does not exist"), "{err}");
        std::fs::remove_dir_all(root).unwrap();
    }

    /// One count for every command: `attach`'s fork follower and the library follower's row
    /// are the tracer's, hooks left out on purpose are neither attached nor missing.
    #[test]
    fn the_hook_count_leaves_out_the_tracers_rows_and_what_was_left_out_on_purpose() {
        let left = format!("{LEFT_OUT} (--no-storage)");
        let watch = [("ib_umem_get", false, None), ("ibv_reg_mr", true, None), ("sys_exit_mmap", true, None)];
        let mut attach = watch.to_vec();
        attach.push(("sched_process_fork", true, None));
        let (w, a) = (HookCount::of(watch), HookCount::of(attach));
        assert_eq!(w, HookCount { attached: 1, total: 2, left_out: 0 });
        assert_eq!(a, w, "attach's fork follower is not a hook");
        let no_storage = HookCount::of([("ibv_reg_mr", true, None), ("close", false, Some(left.as_str()))]);
        assert_eq!(no_storage, HookCount { attached: 1, total: 1, left_out: 1 });
    }
}
