//! Teardown: how long the kernel takes to release N uprobes, on this machine's kernel and the
//! VM's (Debian 6.1, 6.12). Three ways (tests/bench/teardown.rs, `gdr-bench-teardown`): N
//! perf-event uprobes as gdr-trace attaches its hooks; one uprobe_multi link over the N offsets
//! (kernel 6.6+); N uprobe_multi links of one offset each. The offsets are function entries of
//! a copy of the C library that no process runs (uprobes are per file: the system's libc is
//! left alone); the programs do nothing: only the mechanism is measured.

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

fn on_host(bin: &Path, target: &Path, n: usize) -> Result<Vec<Value>> {
    MODES
        .iter()
        .map(|m| {
            let out = std::process::Command::new(bin).arg(m).arg(target).arg(n.to_string()).output()?;
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            Ok(parse(m, &text))
        })
        .collect()
}

fn in_vm(bin: &Path, target: &Path, n: usize, kernel: Kernel) -> Result<Vec<Value>> {
    let out = crate::vm::share_dir().join(format!("teardown-{kernel}.txt"));
    let _ = std::fs::remove_file(&out);
    let script = format!(
        "for m in {}; do {} $m {} {n} >> {o} 2>&1; done; true",
        MODES.join(" "),
        bin.display(),
        target.display(),
        o = out.display()
    );
    let opts =
        crate::vm::VmOptions { kernel, timeout: std::time::Duration::from_secs(1800), ..Default::default() };
    let rc = crate::vm::run(&opts, &["sh".into(), "-c".into(), script])?;
    if rc != 0 {
        bail!("the teardown measurement in the {kernel} VM failed (exit {rc})");
    }
    let text = std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    Ok(MODES.iter().map(|m| parse(m, &text)).collect())
}

/// Measures on this machine and in both VM kernels; prints a table and writes teardown.json.
pub fn run(bins: &Path, n: usize, dir: &Path) -> Result<()> {
    let bin = bins.join("gdr-bench-teardown");
    let target = dir.join("teardown-libc.so.6");
    std::fs::copy(LIBC, &target).with_context(|| format!("copying {LIBC}"))?;
    let mut rows = on_host(&bin, &target, n)?;
    for k in Kernel::ALL {
        rows.extend(in_vm(&bin, &target, n, k)?);
    }
    println!("\nTeardown: releasing {n} uprobes (kernel, how attached: seconds, ms per uprobe)");
    for r in &rows {
        match r["detach_s"].as_f64() {
            Some(s) => println!(
                "  {:<24} {:<11} {:>8.3} s {:>9.3} ms",
                r["kernel"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                s,
                s * 1000.0 / n as f64
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
