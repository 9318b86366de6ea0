//! `gdr-trace doctor` (issue: Preflight and diagnosis).
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

pub fn run(_args: DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("doctor: not implemented yet")
}
