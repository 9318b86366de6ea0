//! `gdr-trace check`: preflight from sysfs and procfs (see `crate::preflight`).
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::options::{preflight_report, PreflightArgs};
use crate::preflight;

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub preflight: PreflightArgs,
    /// Print the report as JSON (one object) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Show the evidence (each path read and its value) under every finding.
    #[arg(long, short)]
    pub verbose: bool,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    if args.json {
        return run_to(&args, &mut std::io::stdout().lock());
    }
    run_to(&args, &mut crate::escape::Escaped::new(std::io::stdout().lock()))
}

/// `run`, writing to `out` (tests read it back).
pub fn run_to(args: &CheckArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let report = preflight_report(&args.preflight)?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report).context("writing JSON")?;
        writeln!(out)?;
    } else {
        write!(out, "{}", preflight::report::render(&report, args.verbose))?;
    }
    out.flush()?;
    Ok(ExitCode::from(report.exit_code))
}
