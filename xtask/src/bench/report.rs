//! The storage benchmark's report: medians, added costs, the ratios the targets
//! are set on, and the in-kernel time per call; printed and written to `target/bench/storage.json`.

use std::path::Path;

use anyhow::Result;

use super::configs::{floor_args, floor_script, Config};

pub(super) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(super) fn report(
    small: &[Vec<f64>],
    large: &[Vec<f64>],
    per_call: &[(Config, f64)],
    fexit: bool,
    dir: &Path,
) -> Result<()> {
    let m = |v: &[Vec<f64>], c: Config| median(&v[Config::ALL.iter().position(|&x| x == c).unwrap()]);
    let base = m(small, Config::Untraced);
    let added = |c: Config| m(small, c) - base;
    println!("\nstorage benchmark (medians; added = median - untraced median)");
    println!(
        "{:<32} {:>12} {:>10} {:>12} {:>12}",
        "configuration", "4 KiB pread", "added", "1 MiB pread", "vs untraced"
    );
    for c in Config::ALL {
        println!(
            "{:<32} {:>9.1} ns {:>7.1} ns {:>9.1} ns {:>12.4}",
            c.name(),
            m(small, c),
            added(c),
            m(large, c),
            m(large, c) / m(large, Config::Untraced)
        );
    }
    let vs_floor = added(Config::GdrTrace) / added(Config::EmptyProgram);
    let vs_bpftrace = added(Config::GdrTrace) / added(Config::Bpftrace);
    let big = m(large, Config::GdrTrace) / m(large, Config::Untraced);
    println!("\ngdr-trace added cost / empty program's: {vs_floor:.2} (target <= 1.5)");
    println!("gdr-trace added cost / bpftrace's:      {vs_bpftrace:.2} (target <= 0.5)");
    println!("1 MiB reads, traced / untraced:         {big:.4} (target <= 1.01)");
    println!(
        "floor: gdr-bench-floor {} (an empty program, loaded and attached as gdr-trace does); also \
         measured: an empty bpftrace action on {} (added {:.1} ns)",
        floor_args(fexit).join(" "),
        floor_script(fexit),
        added(Config::BpftraceEmpty)
    );
    if !per_call.is_empty() {
        println!(
            "\nin-kernel BPF time per 4 KiB pread (kernel.bpf_stats_enabled, includes its own clock reads):"
        );
        for (c, ns) in per_call {
            println!("  {:<32} {ns:>7.1} ns", c.name());
        }
    }
    let json = serde_json::json!({
        "case": "storage",
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "floor": format!("gdr-bench-floor {}", floor_args(fexit).join(" ")),
        "ns_4k": Config::ALL.iter().map(|&c| (c.name(), m(small, c))).collect::<std::collections::BTreeMap<_, _>>(),
        "ns_1m": Config::ALL.iter().map(|&c| (c.name(), m(large, c))).collect::<std::collections::BTreeMap<_, _>>(),
        "samples_4k": small, "samples_1m": large,
        "bpf_ns_per_pread": per_call.iter().map(|(c, ns)| (c.name(), *ns)).collect::<std::collections::BTreeMap<_, _>>(),
        "gdr_added_vs_floor": vs_floor, "gdr_added_vs_bpftrace": vs_bpftrace, "traced_vs_untraced_1m": big,
    });
    let path = dir.join("storage.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    println!("(all samples: {})", path.display());
    Ok(())
}
