//! Teardown: how long the kernel takes to release N uprobes, on this machine's kernel and the
//! VM's (Debian 6.1, 6.12). Three ways (tests/bench/teardown.rs, `gdr-bench-teardown`): N
//! perf-event uprobes as gdr-trace attached every hook of a library copy before uprobe_multi;
//! one uprobe_multi link over the N offsets (kernel 6.6+); N uprobe_multi links of one offset
//! each. Then C library copies hooked the way the follower hooks them where the kernel has
//! uprobe_multi (two links a copy, 18 offsets) and released as it releases them (256 threads at
//! once), and for comparison 100 copies released one link after another. The offsets are
//! function entries of a copy of the C library that no process runs (uprobes are per file: the
//! system's libc is left alone); the programs do nothing: only the mechanism is measured.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::kernel::Kernel;

const MODES: [&str; 3] = ["perf", "multi", "multi-each"];
const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

/// One line per mode: the tool's JSON, or `{"mode", "error"}` where the kernel refused it.
fn parse(mode: &str, out: &str) -> Value {
    out.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok().filter(|v| v["mode"] == mode))
        .unwrap_or_else(
            || serde_json::json!({ "mode": mode, "error": out.lines().last().unwrap_or("no output") }),
        )
}

/// Copies released one link after another, for comparison (each link waits for its own grace
/// period: 10,000 would take over 15 minutes).
const SERIAL_COPIES: usize = 100;

/// The runs: (mode, N) for N uprobes, then `copies` copies (0: none).
fn runs(n: usize, copies: usize) -> Vec<(&'static str, usize)> {
    let mut r: Vec<(&str, usize)> = MODES.iter().map(|m| (*m, n)).collect();
    if copies > 0 {
        r.extend([("copies", copies), ("copies-serial", SERIAL_COPIES.min(copies))]);
    }
    r
}

/// Copies this process may hold links for: two descriptors each, under the hard open-file
/// limit (raising it needs CAP_SYS_RESOURCE, which the VM's root has and this machine's not).
fn host_copies(want: usize) -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on a local struct.
    let hard =
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_max } else { 1024 };
    want.min((hard.saturating_sub(64) / 2) as usize)
}

fn on_host(bin: &Path, target: &Path, n: usize, copies: usize) -> Result<Vec<Value>> {
    runs(n, host_copies(copies))
        .into_iter()
        .map(|(m, n)| {
            let out = std::process::Command::new(bin).arg(m).arg(target).arg(n.to_string()).output()?;
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            Ok(parse(m, &text))
        })
        .collect()
}

fn in_vm(bin: &Path, target: &Path, n: usize, copies: usize, kernel: Kernel) -> Result<Vec<Value>> {
    let out = crate::vm::share_dir().join(format!("teardown-{kernel}.txt"));
    let _ = std::fs::remove_file(&out);
    // Copies only where the kernel has uprobe_multi (6.1 refuses it: one line says so).
    let copies = if kernel == Kernel::V6_1 { copies.min(1) } else { copies };
    let lines: Vec<String> = runs(n, copies)
        .into_iter()
        .map(|(m, n)| {
            format!("{} {m} {} {n} >> {o} 2>&1;", bin.display(), target.display(), o = out.display())
        })
        .collect();
    let script = format!("{} true", lines.join(" "));
    let modes: Vec<&str> = runs(n, copies).into_iter().map(|(m, _)| m).collect();
    let opts =
        crate::vm::VmOptions { kernel, timeout: std::time::Duration::from_secs(1800), ..Default::default() };
    let rc = crate::vm::run(&opts, &["sh".into(), "-c".into(), script])?;
    if rc != 0 {
        bail!("the teardown measurement in the {kernel} VM failed (exit {rc})");
    }
    let text = std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    Ok(modes.iter().map(|m| parse(m, &text)).collect())
}

/// Measures on this machine and in both VM kernels; prints a table and writes teardown.json.
pub fn run(bins: &Path, n: usize, copies: usize, dir: &Path) -> Result<()> {
    let bin = bins.join("gdr-bench-teardown");
    let target = dir.join("teardown-libc.so.6");
    std::fs::copy(LIBC, &target).with_context(|| format!("copying {LIBC}"))?;
    let mut rows = on_host(&bin, &target, n, copies)?;
    for k in Kernel::ALL {
        rows.extend(in_vm(&bin, &target, n, copies, k)?);
    }
    println!("\nTeardown: releasing uprobes (kernel, how attached, how many: seconds, ms per release)");
    for r in &rows {
        // A copy is released as two links; the other modes as uprobes or links of the N offsets.
        let (what, count) = match (r["copies"].as_u64(), r["uprobes"].as_u64()) {
            (Some(c), _) => ("copies", c),
            (None, Some(u)) => ("uprobes", u),
            _ => ("", 0),
        };
        match r["detach_s"].as_f64() {
            Some(s) => println!(
                "  {:<24} {:<13} {:>6} {what:<7} {:>8.3} s {:>9.3} ms each",
                r["kernel"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                count,
                s,
                s * 1000.0 / count.max(1) as f64
            ),
            None => println!(
                "  {:<24} {:<11} not possible: {}",
                "",
                r["mode"].as_str().unwrap_or("?"),
                r["error"]
            ),
        }
    }
    std::fs::write(dir.join("teardown.json"), serde_json::to_string_pretty(&rows)?)?;
    Ok(())
}
