//! `gdr-trace audit`: every registration attributed to user, process and container, then
//! findings (`crate::audit`); `--fail-on` turns them into an exit code.

use std::{io::BufWriter, path::PathBuf, process::ExitCode};

use crate::{
    audit::Severity,
    options::{exit_for, live_sink, HostArgs, TraceArgs},
    sink::audit::AuditSink,
    trace,
};

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
