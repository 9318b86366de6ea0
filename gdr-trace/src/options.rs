//! What several commands share, so that no command imports another: the tracing options
//! (`watch`, `attach`, `audit`, `record`, `serve`) and what they mean to the loader, the live
//! sink they print to, the host facts (`host`) and preflight's options (`preflight_args`).

mod host;
mod preflight_args;

pub use host::{exit_for, HostArgs};
pub use preflight_args::{preflight_report, PreflightArgs};

use clap::Args;

use crate::{
    loader::{AttachMode, LoadOptions},
    sink::{json::JsonSink, text::TextSink, Sink},
    trace::{TraceOptions, MAX_SECS},
};

#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Stream NDJSON records (one per registration/release, summaries at the end) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many seconds (default: until Ctrl-C; with a process to trace, also when
    /// it and its children have exited).
    // A negative number is a value (refused with a reason), not an unknown flag.
    #[arg(long, value_name = "SECS", value_parser = positive_secs, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Print the per-process summary every this many seconds (0 = only at the end).
    #[arg(long, value_name = "SECS", default_value_t = 5.0, value_parser = secs, allow_negative_numbers = true)]
    pub interval: f64,
    /// How kernel hooks are attached.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach_mode: AttachMode,
    /// Don't attach uprobes on libibverbs (kernel hooks only).
    #[arg(long)]
    pub no_uprobes: bool,
    #[command(flatten)]
    pub libs: LibraryArgs,
    /// Leave out the storage hooks (cuFile, nvidia-fs, file I/O, io_uring, page cache). Where
    /// the kernel refuses fentry their syscall tracepoints slow every system call down a little.
    /// (audit and doctor never attach them; serve only where fentry works, or with --storage.)
    #[arg(long)]
    pub no_storage: bool,
    /// Leave out byte counting (the RDMA provider's post/poll functions and the ibv_wr_* SGE
    /// setters): each hooked call costs the traced process a few microseconds, which shows at
    /// high message rates (docs/performance.md). Registrations are still traced; summaries say
    /// bytes were not traced.
    #[arg(long)]
    pub no_bytes: bool,
    /// Records a second each user may send (each cgroup, for processes running as root); a user
    /// over it loses its own records (counted as lost "over budget"), never another user's.
    /// 0: no budget. Default: 20000 tracing the whole node; none for `attach PID`, whose tree
    /// would only hide itself from itself, unless given.
    #[arg(long, value_name = "N")]
    pub events_per_uid: Option<u64>,
    /// Copies of libibverbs, libcuda and libcufile found after start (each a distinct file:
    /// a container's, a wheel's) that one user's processes may have hooked at once (each
    /// cgroup's, for processes running as root); past it a copy is listed as not hooked, with
    /// this reason. Hooking a copy costs an attach, and its release a kernel grace period per
    /// hook: a tenant mapping thousands of copies would otherwise stall the tracer. 0: no cap.
    #[arg(long, value_name = "N", default_value_t = crate::loader::follow::MAX_COPIES_PER_USER)]
    pub max_copies_per_user: usize,
    /// Hooks the copies found after start may hold at once on the whole node, whoever maps
    /// them: perf-event uprobes, or uprobe_multi links where the kernel has them (two a copy);
    /// past it a new copy is listed as not hooked. The per-user cap bounds one tenant, this
    /// bounds many: releasing each hook waits for kernel grace periods (a perf-event uprobe's
    /// about 0.1 s, under a kernel-wide lock), so their number bounds how long detaching takes.
    /// 0: no cap.
    #[arg(long, value_name = "N", default_value_t = crate::loader::follow::MAX_UPROBES)]
    pub max_uprobes: usize,
    /// Hook library copies found after start with a perf-event uprobe per offset even where the
    /// kernel makes uprobe_multi links (Linux 6.6+: at most two links a copy, released without
    /// the kernel's trace-event lock; `probes` shows which each copy got).
    #[arg(long)]
    pub no_uprobe_multi: bool,
}

/// Records a second each user may send when tracing the whole node (`--events-per-uid`).
pub const EVENTS_PER_UID: u64 = 20_000;

/// Explicit userspace libraries (else the one the traced process maps, else the system's).
#[derive(Debug, Clone, Default, Args)]
pub struct LibraryArgs {
    /// Use this libibverbs instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libibverbs: Option<std::path::PathBuf>,
    /// Use this libcuda instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libcuda: Option<std::path::PathBuf>,
    /// Use this libcufile instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libcufile: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// The process to trace.
    pub pid: u32,
    /// A gate: exit 0 as soon as the process moves bytes through GPU memory, 1 (with a one-line
    /// reason) when it moves them through host memory or moves nothing, 2 when it cannot tell.
    #[arg(long, value_enum, value_name = "WHAT", conflicts_with = "no_bytes")]
    pub expect: Option<crate::gate::Expect>,
    /// With --expect: how long to wait for the answer (60s, 2m, 500ms or seconds).
    #[arg(long, value_name = "DURATION", value_parser = crate::gate::parse_within, requires = "expect")]
    pub within: Option<f64>,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub view: ViewArgs,
}

/// How much the text shows (`watch`, `attach`, `record`).
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct ViewArgs {
    /// Every process's per-file storage table, or with --json a `file_io_summary` per file
    /// (by default only processes that used cuFile or nvidia-fs have them; the others a line,
    /// or a `storage_summary`, each).
    #[arg(long)]
    pub files: bool,
    /// A status view: at each summary one line per process (its registrations and its storage
    /// side by side), and no line per event.
    #[arg(long, conflicts_with_all = ["json", "files"])]
    pub compact: bool,
}

impl ViewArgs {
    pub fn view(self) -> crate::sink::text::View {
        crate::sink::text::View { files: self.files, compact: self.compact }
    }
}

impl TraceArgs {
    /// The trace loop's options (`filter_pid`: trace only that process and its children).
    pub fn trace_options(&self, filter_pid: Option<u32>) -> TraceOptions {
        TraceOptions { load: self.load_options(filter_pid), duration: self.duration, interval: self.interval }
    }

    /// As [`Self::trace_options`], without the storage hooks (`audit`: what it reports is
    /// registrations; file I/O hooks would only cost).
    pub fn trace_options_no_storage(&self) -> TraceOptions {
        let mut o = self.trace_options(None);
        o.load.storage = false;
        o
    }

    /// What the loader is asked to do (`filter_pid`: trace only that process and its children).
    pub fn load_options(&self, filter_pid: Option<u32>) -> LoadOptions {
        LoadOptions {
            filter_pid,
            attach_mode: self.attach_mode,
            uprobes: !self.no_uprobes,
            libibverbs: self.libs.libibverbs.clone(),
            libcuda: self.libs.libcuda.clone(),
            libcufile: self.libs.libcufile.clone(),
            storage: !self.no_storage,
            storage_if_fentry: false,
            events_per_uid: self.events_per_uid.unwrap_or(match filter_pid {
                // Attached to one process tree, a flood only hides that tree from itself.
                Some(_) => 0,
                None => EVENTS_PER_UID,
            }),
            max_copies_per_user: self.max_copies_per_user,
            max_uprobes: self.max_uprobes,
            no_uprobe_multi: self.no_uprobe_multi,
            no_bytes: self.no_bytes,
        }
    }
}

/// A number of seconds, 0 included (`--interval`): finite, not negative, at most [`MAX_SECS`].
pub fn secs(s: &str) -> Result<f64, String> {
    seconds(s, 0.0..=MAX_SECS, "0 or more")
}

/// A positive number of seconds (`--duration`): `-3` and `0` get the same answer.
pub fn positive_secs(s: &str) -> Result<f64, String> {
    seconds(s, f64::MIN_POSITIVE..=MAX_SECS, "more than 0")
}

/// A count that must be 1 or more (`serve --top`): 0 is refused, not quietly made 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be 1 or more, not 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("not a whole number: {s:?}")),
    }
}

fn seconds(s: &str, range: std::ops::RangeInclusive<f64>, least: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("not a number of seconds: {s:?}"))?;
    if v.is_nan() || v < *range.start() {
        return Err(format!("must be {least} seconds, not {s}"));
    }
    if v > *range.end() {
        return Err(format!("at most {MAX_SECS:e} seconds, not {s}"));
    }
    Ok(v)
}

/// What people (text, control characters escaped: `crate::escape`) or machines (`--json`:
/// NDJSON) read on stdout.
pub fn live_sink(json: bool, view: ViewArgs) -> Box<dyn Sink> {
    if json {
        Box::new(JsonSink::new(std::io::stdout()).files(view.files))
    } else {
        Box::new(TextSink::new(crate::escape::Escaped::new(std::io::stdout())).view(view.view()))
    }
}
