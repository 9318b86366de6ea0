//! The GPU↔GPU case of `cargo xtask bench`: what the libcuda uprobes cost a peer-copy loop of
//! small copies (`gdr-cuda-workload peerloop`: 4 KiB `cuMemcpyPeer` calls on the test libcuda,
//! peer access on), untraced and under `gdr-trace attach`. Copies are counted in the kernel at
//! the uprobe (no record per copy), so the difference is mostly the uprobe trap itself: the floor
//! is bpftrace with an empty action on the same uprobe. Rounds rotate the three; each figure is a
//! median. Not a test: nothing here asserts a timing.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use super::{
    looper::{target_dir, Loop},
    report::median,
    tracer::Tracer,
};

/// The CUDA workload and test libcuda the tests crate's build script made (release build).
fn built() -> Result<(PathBuf, PathBuf)> {
    let build = target_dir().join("release").join("build");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&build)
        .with_context(|| format!("reading {}", build.display()))?
        .flatten()
        .map(|e| e.path().join("out").join("gdr-cuda-workload"))
        .filter_map(|p| p.metadata().and_then(|m| m.modified()).ok().map(|t| (t, p)))
        .collect();
    found.sort();
    let (_, workload) = found.pop().context("no gdr-cuda-workload built (tests/build.rs)")?;
    let lib = workload.with_file_name("libcuda").join("libcuda.so.1");
    Ok((workload, lib))
}

/// Runs the case and prints it; writes `dir/p2p.json`.
pub fn measure(gdr: &Path, rounds: usize, calls: u64, dir: &Path) -> Result<()> {
    let (workload, lib) = built()?;
    let mut c = Command::new(&workload);
    c.args(["peerloop", "4096"]);
    let mut lp = Loop::start(c, "gdr-cuda-workload peerloop")?;
    let pid = lp.child.id();
    eprintln!("[bench] p2p: peer-copy loop pid {pid}, {rounds} rounds of {calls} x 4 KiB cuMemcpyPeer");
    const NAMES: [&str; 3] = ["untraced", "gdr-trace attach", "bpftrace empty uprobe (floor)"];
    let mut ns: [Vec<f64>; 3] = [vec![], vec![], vec![]];
    for round in 0..rounds {
        for k in 0..3 {
            let i = (round + k) % 3;
            let tracer = match i {
                1 => {
                    let mut c = Command::new(gdr);
                    c.args([
                        "attach",
                        &pid.to_string(),
                        "--json",
                        "--interval",
                        "0",
                        "--no-storage",
                        "--libcuda",
                    ]);
                    c.arg(&lib);
                    Some(Tracer::start(c, "\"event\":\"hooks\"")?)
                }
                2 => {
                    let mut c = Command::new("bpftrace");
                    c.args(["-e", &format!("uprobe:{}:cuMemcpyPeer {{ }}", lib.display())]);
                    Some(Tracer::start(c, "Attaching")?)
                }
                _ => None,
            };
            let v = lp.ns_per_op(&calls.to_string())?;
            if let Some(t) = tracer {
                t.stop()?;
                // The kernel drops a closed tracer's uprobes a moment after it exits.
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            eprintln!("[bench] p2p round {round} {:<30} {v:>10.1} ns/copy", NAMES[i]);
            ns[i].push(v);
        }
    }
    lp.end();
    let [u, t, f] = ns.map(|v| median(&v));
    println!("\n== GPU↔GPU: 4 KiB cuMemcpyPeer on the test libcuda, median of {rounds} rounds ==");
    for (name, v) in NAMES.iter().zip([u, t, f]) {
        println!("  {name:<30} {v:>10.1} ns/copy");
    }
    println!(
        "  gdr-trace added {:.1} ns per copy; an empty uprobe adds {:.1} ns (ratio {:.2}): copies are counted in the kernel",
        t - u,
        f - u,
        (t - u) / (f - u).max(1.0)
    );
    let json = serde_json::json!({
        "case": "p2p peer-copy loop, 4 KiB cuMemcpyPeer", "rounds": rounds, "calls": calls,
        "untraced_ns_per_copy": u, "traced_ns_per_copy": t, "empty_uprobe_ns_per_copy": f,
        "overhead_ns_per_copy": t - u, "floor_ns_per_copy": f - u,
    });
    std::fs::write(dir.join("p2p.json"), serde_json::to_string_pretty(&json)?)?;
    Ok(())
}
