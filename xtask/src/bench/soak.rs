//! A week of `serve` in a few minutes (`cargo xtask bench --soak-only`): tests/bench/soak.rs
//! (`gdr-soak`) runs in the VM (rxe0, so half the churned processes register an MR through the
//! real libibverbs) against the release `gdr-trace serve --storage`, and prints per round the
//! resident memory, series count, scrape time and lost events; the closing JSON object goes to
//! target/bench/soak.json. The VM's emulated CPU makes the times slow in absolute terms: what
//! matters is whether they stay flat from the first round to the last.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::vm::{self, Kernel, VmOptions};

pub struct SoakArgs {
    pub kernel: Kernel,
    pub rounds: usize,
    pub procs: usize,
    pub files: usize,
    pub top: usize,
}

pub fn run(bins: &Path, a: &SoakArgs, dir: &Path) -> Result<()> {
    let opts =
        VmOptions { kernel: a.kernel, timeout: std::time::Duration::from_secs(3600), ..Default::default() };
    let path = |b: &str| bins.join(b).display().to_string();
    let cmd: Vec<String> = vec![
        path("gdr-soak"),
        "--gdr-trace".into(),
        path("gdr-trace"),
        "--workload".into(),
        path("gdr-workload"),
        "--rounds".into(),
        a.rounds.to_string(),
        "--procs".into(),
        a.procs.to_string(),
        "--files".into(),
        a.files.to_string(),
        "--top".into(),
        a.top.to_string(),
    ];
    eprintln!("[bench] soak in the VM (kernel {}): {}", a.kernel, cmd.join(" "));
    let (rc, out) = vm::run_capture(&opts, &cmd)?;
    if rc != 0 {
        bail!("gdr-soak failed in the VM (exit {rc})");
    }
    let summary = out.lines().rev().find(|l| l.starts_with('{')).context("gdr-soak printed no summary")?;
    let v: serde_json::Value = serde_json::from_str(summary.trim())?;
    std::fs::write(dir.join("soak.json"), serde_json::to_string_pretty(&v)?)?;
    eprintln!(
        "[bench] soak: resident memory last/first round {:.2}, series {:.2}, scrape time {:.2}; peak {:.1} MiB (target/bench/soak.json)",
        v["rss_last_over_first"].as_f64().unwrap_or(f64::NAN),
        v["series_last_over_first"].as_f64().unwrap_or(f64::NAN),
        v["scrape_last_over_first"].as_f64().unwrap_or(f64::NAN),
        v["peak_rss_kib"].as_f64().unwrap_or(0.0) / 1024.0
    );
    Ok(())
}
