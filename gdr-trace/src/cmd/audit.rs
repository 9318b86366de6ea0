//! `gdr-trace audit`: every registration attributed to user, process and container, then
//! findings (`crate::audit`); `--fail-on` turns them into an exit code.

use std::{
    io::BufWriter,
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    audit::{identity, Posture, Severity},
    cmd::{args::TraceArgs, watch::live_sink},
    exit, preflight,
    sink::audit::AuditSink,
    trace,
};

/// Where process and machine facts come from (shared by `audit`, `record` and `serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// User names from this passwd file (a DaemonSet mounts the host's).
    #[arg(long, value_name = "FILE", default_value = "/etc/passwd")]
    pub passwd: PathBuf,
    /// Rate the P2P posture (ACS, IOMMU) from this sysfs tree.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// ... and this procfs tree.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
}

impl HostArgs {
    pub fn posture(&self) -> Posture {
        let opts = preflight::Options {
            sysfs_root: self.sysfs_root.clone(),
            proc_root: self.proc_root.clone(),
            ..Default::default()
        };
        Posture::read(&opts)
    }

    pub fn resolver(&self) -> identity::Resolver {
        identity::Resolver::new(&self.passwd)
    }

    /// Signs that this machine runs containers (runtime sockets, Kubernetes cgroups).
    pub fn container_host_markers(&self) -> Vec<String> {
        identity::container_host_markers(Path::new("/"))
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Also write the NDJSON audit log (registrations, findings, audit summary) to FILE, a new
    /// file of mode 0600 (an existing name, or a symlink, is refused).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Exit 1 when a finding at or above this severity exists.
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub fail_on: Option<Severity>,
    #[command(flatten)]
    pub host: HostArgs,
}

/// The exit code for the worst finding under `--fail-on`.
pub fn exit_for(worst: Option<Severity>, fail_on: Option<Severity>) -> ExitCode {
    match (worst, fail_on) {
        (Some(w), Some(f)) if w >= f => ExitCode::from(exit::FINDING),
        _ => ExitCode::from(exit::OK),
    }
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let json = args.trace.json;
    let out: Box<dyn std::io::Write> = if json {
        Box::new(std::io::stdout())
    } else {
        Box::new(crate::escape::Escaped::new(std::io::stdout()))
    };
    let mut sink = AuditSink::new(live_sink(json, Default::default()), out, json, args.host.posture())
        .resolving(args.host.resolver(), args.host.container_host_markers());
    if let Some(path) = &args.log {
        let f = crate::outfile::create_private(path, "the audit log")?;
        sink = sink.log_to(Box::new(BufWriter::new(f)));
    }
    // The audit is about memory exposed to NICs: no storage hooks (no cost for nothing).
    trace::run(&args.trace.trace_options_no_storage(), &mut sink)?;
    Ok(exit_for(sink.worst(), args.fail_on))
}
