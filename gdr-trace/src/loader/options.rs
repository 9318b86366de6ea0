//! What a load is asked for ([`LoadOptions`], [`AttachMode`]) and the embedded eBPF objects: a
//! leaf every part of the loader uses (`loader.rs` re-exports it).

use std::path::PathBuf;

/// How kernel hooks are attached.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default, serde::Serialize, serde::Deserialize,
)]
pub enum AttachMode {
    /// fentry/fexit where the kernel allows it, else kprobe/kretprobe, decided per hook by trying.
    #[default]
    Auto,
    /// fentry/fexit only (a hook that can't is reported, not replaced).
    Fentry,
    /// kprobe/kretprobe only.
    Kprobe,
}

/// The eBPF object built by aya-build from `gdr-trace-ebpf` (see build.rs).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gdr-trace-ebpf"));

/// The benchmark's floor (`gdr-trace-ebpf/src/bench_floor.rs`): programs that do nothing, for
/// `gdr-bench-floor` only. gdr-trace never loads it (nothing in its binary refers to it).
#[doc(hidden)]
#[cfg(feature = "testkit")]
pub static BENCH_FLOOR_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gdr-bench-floor-ebpf"));

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadOptions {
    /// Trace only this process and its descendants.
    pub filter_pid: Option<u32>,
    pub attach_mode: AttachMode,
    pub uprobes: bool,
    /// Explicit libibverbs path (else the one the process maps, else the system's).
    pub libibverbs: Option<PathBuf>,
    /// Explicit libcuda path, likewise.
    pub libcuda: Option<PathBuf>,
    /// Explicit libcufile path, likewise.
    pub libcufile: Option<PathBuf>,
    /// Attach the storage hooks (cuFile, nvidia-fs, file I/O, page cache).
    pub storage: bool,
    /// With `storage`: only where the kernel allows fentry, so that the file I/O system calls
    /// are hooked cheaply (their tracepoints would cost every system call; `serve`).
    pub storage_if_fentry: bool,
    /// Records a second each user may send (0: no budget; see gdr-trace-ebpf/src/budget.rs).
    pub events_per_uid: u64,
    /// Leave out the work-request hooks (bytes per MR): `--no-bytes`.
    pub no_bytes: bool,
    /// Library copies found after start that one user (one cgroup, for root) may have hooked
    /// at once (0: no cap; `loader::follow`).
    pub max_copies_per_user: usize,
    /// Hooks the copies found after start may hold at once on the whole node (perf-event uprobes,
    /// whoever maps them (0: no cap; `loader::follow`); uprobe_multi links where the kernel has
    /// them.
    pub max_uprobes: usize,
    /// Hook copies found after start with perf-event uprobes even where the kernel makes
    /// uprobe_multi links (`--no-uprobe-multi`).
    pub no_uprobe_multi: bool,
}
