//! `cargo xtask bench --storm-only`: gdr-trace under load. Registrations in the VM
//! (bench/regstorm.rs), files and short processes on the host (bench/filestorm.rs).

use std::path::Path;

use anyhow::Result;

use super::{filestorm, regstorm};

#[derive(clap::Args, Debug)]
pub struct StormArgs {
    /// Only the storms: registrations in the VM (bench/regstorm.rs), files and processes on the
    /// host (bench/filestorm.rs).
    #[arg(long)]
    pub storm_only: bool,
    /// ibv_reg_mr + ibv_dereg_mr pairs a run of the registration storm (0: skip it).
    #[arg(long, default_value_t = 3000)]
    pub storm_iterations: u64,
    /// Rounds of the registration storm (each: one untraced run, one traced).
    #[arg(long, default_value_t = 5)]
    pub storm_rounds: usize,
    /// Files of the storage storm (0: skip it), and short processes after them.
    #[arg(long, default_value_t = 100_000)]
    pub storm_files: u64,
    #[arg(long, default_value_t = 10_000)]
    pub storm_procs: u64,
    /// `watch --interval` of the storage storm (its summaries list every file of a process).
    #[arg(long, default_value_t = 5)]
    pub storm_interval: u32,
}

pub fn run(args: &StormArgs, bins: &Path, dir: &Path) -> Result<()> {
    if args.storm_files > 0 {
        filestorm::measure(bins, args.storm_files, args.storm_procs.max(1), args.storm_interval, dir)?;
    }
    if args.storm_iterations > 0 {
        regstorm::measure(bins, args.storm_iterations, args.storm_rounds.max(1), dir)?;
    }
    Ok(())
}
