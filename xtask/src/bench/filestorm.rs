//! The storage storm (`cargo xtask bench --storm-only`), on the host, where the storage hooks
//! attach (syscall and filemap tracepoints): under one `gdr-trace watch --json`, one process
//! opens, reads once (4 KiB) and closes each of FILES files whose pages were dropped from the
//! page cache (so each read fills it), then PROCS short processes each read one of them and
//! exit. Twice a second: gdr-trace's resident memory and how full each of its kernel hash maps
//! is. At the end: what gdr-trace reported for those processes and files against what the
//! workload did, and its lost records by reason (from its own `lost` line). Not a test.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::Path,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{
    bpfmaps::{self, Fill},
    watch::{OnLine, Stall, Watch},
};

/// What watch reported, folded as its lines come.
#[derive(Default)]
struct Reported {
    /// (pid, path) -> the largest (reads, bytes_read) any summary gave.
    files: HashMap<(u64, String), (u64, u64)>,
    /// pid -> the largest (reads, bytes_read, files_folded) of its storage_summary lines.
    procs: HashMap<u64, (u64, u64, u64)>,
    lines: u64,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

fn workload(bin: &Path, args: &[&str]) -> Result<Value> {
    let out = Command::new(bin).args(args).output().with_context(|| format!("{} {args:?}", bin.display()))?;
    if !out.status.success() {
        bail!("gdr-filestorm {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Samples every 500 ms: (seconds, RSS KiB, map fills).
type Samples = Arc<Mutex<Vec<(f64, u64, BTreeMap<String, Fill>)>>>;

fn sampler(pid: u32, samples: Samples, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let t0 = Instant::now();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let s = (t0.elapsed().as_secs_f64(), rss_kib(pid), bpfmaps::fills(pid));
            samples.lock().expect("not poisoned").push(s);
            std::thread::sleep(Duration::from_millis(500));
        }
    })
}

pub fn measure(bins: &Path, files: u64, procs: u64, interval: u32, dir: &Path) -> Result<()> {
    let bin = bins.join("gdr-filestorm");
    let data = dir.join("filestorm");
    let _ = std::fs::remove_dir_all(&data);
    let d = data.display().to_string();
    eprintln!("[bench] storage storm: creating {files} files of 4 KiB in {d}");
    workload(&bin, &["create", &d, &files.to_string()])?;

    let reported = Arc::new(Mutex::new(Reported::default()));
    let r = reported.clone();
    let on_line: OnLine = Box::new(move |v| {
        let mut r = r.lock().expect("not poisoned");
        r.lines += 1;
        let (pid, reads, bytes) = (
            v["pid"].as_u64().unwrap_or(0),
            v["reads"].as_u64().unwrap_or(0),
            v["bytes_read"].as_u64().unwrap_or(0),
        );
        match v["event"].as_str() {
            Some("file_io_summary") => {
                let e = r.files.entry((pid, v["path"].as_str().unwrap_or("").to_string())).or_default();
                *e = (e.0.max(reads), e.1.max(bytes));
            }
            Some("storage_summary") => {
                let folded = v["files_folded"].as_u64().unwrap_or(0);
                let e = r.procs.entry(pid).or_default();
                *e = (e.0.max(reads), e.1.max(bytes), e.2.max(folded));
            }
            _ => {}
        }
    });
    let iv = interval.to_string();
    let w = Watch::start(&bins.join("gdr-trace"), &["--files", "--interval", &iv], Stall::No, on_line)?;
    let samples: Samples = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let th = sampler(w.pid(), samples.clone(), stop.clone());
    std::thread::sleep(Duration::from_secs(1));
    let rss_start = rss_kib(w.pid());
    eprintln!("[bench] storage storm: one process reads {files} files once");
    let read = workload(&bin, &["read", &d, &files.to_string()])?;
    workload(&bin, &["drop", &d, &procs.to_string()])?;
    eprintln!("[bench] storage storm: {procs} short processes read one file each");
    let spawn = workload(&bin, &["spawn", &d, &procs.to_string()])?;
    // Two summary ticks: the last processes' exits are seen and their kernel entries dropped.
    std::thread::sleep(Duration::from_secs(u64::from(interval.clamp(1, 5)) * 2 + 1));
    let rss_end = rss_kib(w.pid());
    let maps_end = bpfmaps::fills(w.pid());
    stop.store(true, Ordering::Relaxed);
    let _ = th.join();
    let said = w.stop()?;
    let _ = std::fs::remove_dir_all(&data);

    let rep = reported.lock().expect("not poisoned");
    let reader = read["pid"].as_u64().unwrap_or(0);
    // The storm's files (the loader's own reads of ld.so.cache and libc are not the workload's).
    let ours = |p: &str| p.starts_with(d.as_str());
    let reader_files: Vec<&(u64, u64)> =
        rep.files.iter().filter(|((p, path), _)| *p == reader && ours(path)).map(|(_, v)| v).collect();
    let reader_reads: u64 = reader_files.iter().map(|v| v.0).sum();
    let reader_bytes: u64 = reader_files.iter().map(|v| v.1).sum();
    let kids: HashSet<u64> = read_pids(&spawn);
    let kids_seen: Vec<&(u64, u64, u64)> =
        rep.procs.iter().filter(|(p, _)| kids.contains(p)).map(|(_, v)| v).collect();
    let samples = samples.lock().expect("not poisoned");
    let rss_max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let mut map_max: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (_, _, fills) in samples.iter() {
        for (name, f) in fills {
            let e = map_max.entry(name.clone()).or_default();
            *e = (e.0.max(f.entries), f.max_entries);
        }
    }
    let by_reason = &said.lost["by_reason"];
    let v = json!({
        "files": files, "processes": procs, "interval": interval,
        "read": { "seconds": read["seconds"], "bytes": read["bytes"] },
        "spawn": { "seconds": spawn["seconds"] },
        "reported": {
            "reader_files": reader_files.len(), "reader_reads": reader_reads, "reader_bytes": reader_bytes,
            "reader_summary": rep.procs.get(&reader).map(|v| json!({"reads": v.0, "bytes_read": v.1, "files_folded": v.2})),
            "processes_seen": kids_seen.len(),
            "processes_with_one_read": kids_seen.iter().filter(|v| v.0 == 1 && v.1 == 4096).count(),
            "lines": rep.lines,
        },
        "lost": { "delivered": said.delivered(), "total": said.lost_total(), "by_reason": by_reason },
        "rss_kib": { "attached": rss_start, "max": rss_max, "end": rss_end },
        "maps_max": map_max.iter().map(|(k, (n, m))| (k.clone(), json!({"max_seen": n, "max_entries": m}))).collect::<serde_json::Map<_, _>>(),
        "maps_end": maps_end.iter().map(|(k, f)| (k.clone(), json!(f.entries))).collect::<serde_json::Map<_, _>>(),
    });
    print(&v);
    std::fs::write(dir.join("filestorm.json"), serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

fn read_pids(spawn: &Value) -> HashSet<u64> {
    spawn["pids"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default()
}

fn print(v: &Value) {
    let r = &v["reported"];
    println!("\n== storage storm on the host: gdr-trace watch --json --interval {} ==", v["interval"]);
    println!(
        "  {} files opened, read once (4 KiB, cold) and closed by one process in {} s: gdr-trace's summary of it \
         says {} reads, {} bytes (its loader's own included); {} files listed, {} folded into those totals",
        v["files"],
        v["read"]["seconds"],
        r["reader_summary"]["reads"],
        r["reader_summary"]["bytes_read"],
        r["reader_files"],
        r["reader_summary"]["files_folded"]
    );
    println!(
        "  {} short processes (one 4 KiB read each) in {} s: gdr-trace reports {} of them, {} with exactly that read",
        v["processes"], v["spawn"]["seconds"], r["processes_seen"], r["processes_with_one_read"]
    );
    println!(
        "  lost records {} by reason {} ({} delivered)",
        v["lost"]["total"], v["lost"]["by_reason"], v["lost"]["delivered"]
    );
    println!(
        "  gdr-trace RSS: {} KiB attached, {} KiB at most, {} KiB at the end",
        v["rss_kib"]["attached"], v["rss_kib"]["max"], v["rss_kib"]["end"]
    );
    println!("  kernel hash maps (most entries seen / capacity; at the end):");
    if let Some(m) = v["maps_max"].as_object() {
        for (name, x) in m {
            println!(
                "    {name:<16} {:>7} / {:<7} end {}",
                x["max_seen"], x["max_entries"], v["maps_end"][name]
            );
        }
    }
}
