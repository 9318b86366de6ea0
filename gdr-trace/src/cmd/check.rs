//! `gdr-trace check` (issue: Preflight and diagnosis).
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {}

pub fn run(_args: CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("check: not implemented yet")
}
