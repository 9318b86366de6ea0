//! In-kernel BPF time per 4 KiB pread for each tracer of the pread bench (gdr-trace, bpftrace and
//! the two empty-program floors), from the programs' own run counters.

use std::path::Path;

use anyhow::{Context, Result};

use super::{
    configs::{tracer_cmd, Config},
    looper::Loop,
    tracer::Tracer,
};

/// BPF run time and runs of every program a process holds, from /proc/PID/fdinfo.
fn prog_runs(pid: u32) -> Vec<(String, u64, u64)> {
    let mut out = vec![];
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        let field =
            |k: &str| text.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok()));
        if let (Some(id), Some(cnt), Some(ns)) = (field("prog_id:"), field("run_cnt:"), field("run_time_ns:"))
        {
            out.push((id.to_string(), cnt, ns));
        }
    }
    out
}

/// In-kernel BPF time per 4 KiB pread for each tracer, with kernel.bpf_stats_enabled on.
pub(super) fn prog_stats(
    lp: &mut Loop,
    gdr: &Path,
    floor: &Path,
    pid: u32,
    fexit: bool,
    n: u64,
) -> Result<Vec<(Config, f64)>> {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let before = std::fs::read_to_string(KNOB).unwrap_or_else(|_| "0".into());
    std::fs::write(KNOB, "1").context("enabling kernel.bpf_stats_enabled")?;
    let r = (|| {
        let mut out = vec![];
        for config in [Config::GdrTrace, Config::Bpftrace, Config::EmptyProgram, Config::BpftraceEmpty] {
            let (cmd, marker) = tracer_cmd(config, gdr, floor, pid, fexit).expect("a tracer");
            let t = Tracer::start(cmd, marker)?;
            let a = prog_runs(t.0.id());
            lp.ns_per_op(&format!("4k {n}"))?;
            let b = prog_runs(t.0.id());
            t.stop()?;
            let ns: u64 =
                b.iter().map(|(id, _, ns)| ns - a.iter().find(|x| &x.0 == id).map_or(0, |x| x.2)).sum();
            out.push((config, ns as f64 / n as f64));
        }
        Ok(out)
    })();
    std::fs::write(KNOB, before.trim())?;
    r
}
