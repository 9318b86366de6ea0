//! Command-line interface (clap). Each subcommand's logic lives in `cmd/<name>.rs`.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cmd::{
    audit::AuditArgs, check::CheckArgs, doctor::DoctorArgs, generate::GenerateArgs, record::RecordArgs,
    report::ReportArgs, serve::ServeArgs,
};

#[derive(Debug, Parser)]
#[command(
    name = "gdr-trace",
    version,
    about = "Shows, per process and at the driver level, whether GPU memory really goes straight \
             to the NIC (GPUDirect RDMA) or is silently staged through host memory.",
    after_help = "\
Examples:
  gdr-trace watch                       every RDMA registration and file I/O on this machine, live
  gdr-trace attach 4242 --duration 30   one training process (and children), 30 seconds
  gdr-trace attach 4242 --json | jq .   NDJSON for machines
  gdr-trace attach 4242 --json | jq 'select(.event == \"gds_io\" or .event == \"file_io_summary\")'
                                        GPUDirect Storage or compatibility mode, per cuFile call and file
  gdr-trace probes                      which hooks attach here, how, or why not
  gdr-trace check                       preflight: peermem, PCIe distance, ACS, IOMMU, BAR1, GDS
  gdr-trace audit --duration 60 --fail-on high   security audit with findings; exit 1 if any is high
  gdr-trace record -o trace.ndjson      record the event stream; `gdr-trace report trace.ndjson` replays it
  gdr-trace serve --listen 0.0.0.0:9477 Prometheus metrics for this node

Exit codes: 0 ok, 1 a problem was found (check/doctor; audit/report with --fail-on), 2 could not
run (bad input, unknown PID, missing privilege, a corrupt or truncated recording). Set GDR_TRACE_LOG=debug for internals."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace every process's RDMA memory registrations and file I/O (GDS, page cache), live.
    Watch(TraceArgs),
    /// Trace one process, its threads and the children it forks after attach: registrations and
    /// its storage path (cuFile, nvidia-fs, page cache, O_DIRECT) per file.
    Attach(AttachArgs),
    /// List every hook: how it attached (fentry, kprobe, uprobe) or why it could not.
    Probes(ProbesArgs),
    /// Preflight: check the machine's GPUDirect prerequisites from sysfs and procfs.
    Check(CheckArgs),
    /// Walk the GPUDirect troubleshooting order and print a ranked diagnosis.
    Doctor(DoctorArgs),
    /// Security audit: who exposes GPU memory to NICs, with what access, from which container;
    /// findings with severities, an NDJSON audit log, `--fail-on` for CI.
    Audit(AuditArgs),
    /// Record the event stream to an NDJSON file for `report` (no analysis is lost).
    Record(RecordArgs),
    /// Replay a recording through the same analysis as live mode: summary and findings (no BPF,
    /// no privilege).
    Report(ReportArgs),
    /// Trace continuously and serve Prometheus metrics (/metrics) and /healthz.
    Serve(ServeArgs),
    /// Write shell completions and man pages (for packaging: `cargo xtask dist`).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// How kernel hooks are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum AttachMode {
    /// fentry/fexit where the kernel allows it, else kprobe/kretprobe, decided per hook by trying.
    #[default]
    Auto,
    /// fentry/fexit only (a hook that can't is reported, not replaced).
    Fentry,
    /// kprobe/kretprobe only.
    Kprobe,
}

#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Stream NDJSON records (one per registration/release, summaries at the end) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many seconds (default: until Ctrl-C, or the attached process exits).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Print the per-process summary every this many seconds (0 = only at the end).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub interval: f64,
    /// How kernel hooks are attached.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach_mode: AttachMode,
    /// Don't attach uprobes on libibverbs (kernel hooks only).
    #[arg(long)]
    pub no_uprobes: bool,
    /// Use this libibverbs instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libibverbs: Option<std::path::PathBuf>,
    /// Use this libcuda instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libcuda: Option<std::path::PathBuf>,
    /// Use this libcufile instead of the one the process maps (or the system's).
    #[arg(long, value_name = "PATH")]
    pub libcufile: Option<std::path::PathBuf>,
    /// Leave out the storage hooks (cuFile, nvidia-fs, file I/O, io_uring, page cache). Where
    /// the kernel refuses fentry their syscall tracepoints slow every system call down a little.
    /// (audit, serve and doctor never attach them.)
    #[arg(long)]
    pub no_storage: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// The process to trace.
    pub pid: u32,
    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ProbesArgs {
    /// How kernel hooks are attached.
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    pub attach_mode: AttachMode,
    /// Resolve userspace libraries from this process's memory map.
    #[arg(long, short)]
    pub pid: Option<u32>,
    /// Use this libibverbs instead of the system's.
    #[arg(long, value_name = "PATH")]
    pub libibverbs: Option<std::path::PathBuf>,
    /// Use this libcuda instead of the system's.
    #[arg(long, value_name = "PATH")]
    pub libcuda: Option<std::path::PathBuf>,
    /// Use this libcufile instead of the system's.
    #[arg(long, value_name = "PATH")]
    pub libcufile: Option<std::path::PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}
