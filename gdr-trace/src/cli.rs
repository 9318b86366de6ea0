//! Command-line interface (clap). Each subcommand's logic lives in `cmd/<name>.rs`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cmd::{
    self,
    args::{AttachArgs, TraceArgs},
    audit::AuditArgs,
    check::CheckArgs,
    doctor::DoctorArgs,
    generate::GenerateArgs,
    probes::ProbesArgs,
    record::RecordArgs,
    report::ReportArgs,
    serve::ServeArgs,
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
  gdr-trace serve --listen 127.0.0.1:9477
                                        Prometheus metrics for this node (this host only; see
                                        the README before listening on other addresses)

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
    /// Internal: the RDMA providers' post/poll functions of this machine's devices, one JSON
    /// line each (run by the loader as a child without capabilities).
    #[command(hide = true)]
    ProviderOps,
}

impl Cli {
    /// Whether the command runs the trace loop (it then ends cleanly on SIGINT, SIGTERM,
    /// SIGHUP and a closed output, start-up included: `stop::install`).
    pub fn traces(&self) -> bool {
        match &self.command {
            Command::Watch(_)
            | Command::Attach(_)
            | Command::Audit(_)
            | Command::Record(_)
            | Command::Serve(_) => true,
            Command::Doctor(a) => a.pid.is_some(),
            Command::Probes(_)
            | Command::Check(_)
            | Command::Report(_)
            | Command::Generate(_)
            | Command::ProviderOps => false,
        }
    }
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Watch(args) => cmd::watch::run(cmd::watch::Target::All, args),
        Command::Attach(args) if args.expect.is_some() => {
            cmd::watch::gate(args.pid, args.within.unwrap_or(60.0), args.trace)
        }
        Command::Attach(args) => cmd::watch::run(cmd::watch::Target::Pid(args.pid), args.trace),
        Command::Probes(args) => cmd::probes::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Audit(args) => cmd::audit::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Generate(args) => cmd::generate::run(args, &<Cli as clap::CommandFactory>::command()),
        Command::ProviderOps => Ok(ExitCode::from(crate::loader::provider_ops::run_child())),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[test]
    fn a_negative_duration_is_a_clear_error_and_record_takes_dash_p() {
        for cmd in ["watch", "record"] {
            let args: &[&str] = if cmd == "record" { &["-o", "f"] } else { &[] };
            let mut argv = vec!["gdr-trace", cmd];
            argv.extend(args);
            argv.extend(["--duration", "-1"]);
            let e = Cli::try_parse_from(argv).unwrap_err().to_string();
            assert!(e.contains("must be 0 or more seconds, not -1"), "{cmd}: {e}");
            assert!(!e.contains("unexpected argument"), "{cmd}: {e}");
        }
        let cli = Cli::try_parse_from(["gdr-trace", "record", "-o", "f", "-p", "42"]).expect("-p");
        let Command::Record(r) = cli.command else { panic!("record") };
        assert_eq!(r.pid, Some(42));
    }

    #[test]
    fn the_help_example_serves_on_localhost() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("serve --listen 127.0.0.1:9477"), "{help}");
        assert!(!help.contains("0.0.0.0"), "{help}");
    }
}
