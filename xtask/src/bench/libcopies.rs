//! Library copies: how long from a process mapping a new copy of a hooked library (`dlopen` of
//! its own libcufile) to gdr-trace having hooked it, for the first copy and for later ones, and
//! what each copy costs the follower process in resident memory. `gdr-trace watch` runs while
//! copies at new paths (new files) are dlopened one after another by the storage workload; the
//! time runs from the workload's line after its `dlopen` returned to the tracer's
//! `library_copy` line for that path. Kernel memory of the uprobes is not in these figures.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::report::median;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The tracer's library follower: a child of the thread that loaded its programs, running
/// `gdr-trace follow-libraries` (it starts once they are loaded: waited for, 30 s at most).
fn follower_of(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let found = tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).collect::<Vec<_>>())
            .find(|c| {
                std::fs::read_to_string(format!("/proc/{c}/cmdline"))
                    .is_ok_and(|l| l.contains("follow-libraries"))
            });
        if found.is_some() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The test libcufile tests/build.rs made (the newest, if several builds left one).
fn test_libcufile(target: &Path) -> Result<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = vec![];
    for profile in ["release", "debug"] {
        for e in std::fs::read_dir(target.join(profile).join("build")).into_iter().flatten().flatten() {
            let p = e.path().join("out/libcufile.so.0");
            if let Ok(m) = std::fs::metadata(&p).and_then(|m| m.modified()) {
                found.push((m, p));
            }
        }
    }
    found.sort();
    found.pop().map(|(_, p)| p).context("no test libcufile built (cargo build -p gdr-trace-tests)")
}

pub struct Figures {
    pub first_ms: f64,
    pub later_ms: f64,
    pub attach_ms: f64,
    pub rss_kib_per_copy: f64,
    pub copies: usize,
}

pub fn measure(bins: &Path, target: &Path, copies: usize, dir: &Path) -> Result<Figures> {
    let lib = test_libcufile(target)?;
    let mut tracer = Command::new(bins.join("gdr-trace"))
        .args(["watch", "--json", "--interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = BufReader::new(tracer.stdout.take().context("stdout")?);
    let (tx, rx) = mpsc::channel::<(Instant, serde_json::Value)>();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                let _ = tx.send((Instant::now(), v));
            }
        }
    });
    let wait_for = |pred: &dyn Fn(&serde_json::Value) -> bool| -> Result<(Instant, serde_json::Value)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Ok((t, v)) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if pred(&v) {
                return Ok((t, v));
            }
        }
        bail!("gdr-trace said nothing expected within 60 s")
    };
    wait_for(&|v| v["event"] == "hooks")?;
    std::thread::sleep(Duration::from_millis(500));
    let follower = follower_of(tracer.id()).context("no follower process")?;
    let rss0 = rss_kib(follower);
    let mut workloads: Vec<Child> = vec![];
    let (mut lat, mut attach) = (vec![], vec![]);
    for i in 0..copies {
        let d = dir.join(format!("libcopy-{i}"));
        std::fs::create_dir_all(&d)?;
        let copy = d.join("libcufile.so.0");
        std::fs::copy(&lib, &copy)?;
        let path = copy.display().to_string();
        let mut w = Command::new(bins.join("gdr-storage-workload"))
            .args(["go".to_string(), format!("dlopen:{path}"), "sleep:600000".into()])
            .env("GDR_CUFILE_LATE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut wout = BufReader::new(w.stdout.take().context("stdout")?);
        let mut line = String::new();
        wout.read_line(&mut line)?; // ready
        writeln!(w.stdin.as_mut().context("stdin")?, "go")?;
        line.clear();
        wout.read_line(&mut line)?; // the dlopen step, after it returned
        let t0 = Instant::now();
        if !line.contains("dlopen") {
            bail!("workload said {line:?}");
        }
        let (t1, v) = wait_for(&|v| v["event"] == "library_copy" && v["path"] == path.as_str())?;
        if v["state"] != "attached" {
            bail!("copy {path} not hooked: {v}");
        }
        lat.push((t1 - t0).as_secs_f64() * 1e3);
        attach.push(v["attach_ms"].as_f64().unwrap_or(0.0));
        eprintln!("[bench] library copy {i}: mapped -> hooked {:.1} ms (attach {:.1} ms)", lat[i], attach[i]);
        workloads.push(w);
    }
    let rss1 = rss_kib(follower);
    for mut w in workloads {
        let _ = w.kill();
        let _ = w.wait();
    }
    let _ = Command::new("kill").args(["-INT", &tracer.id().to_string()]).status();
    let _ = tracer.wait();
    for i in 0..copies {
        let _ = std::fs::remove_dir_all(dir.join(format!("libcopy-{i}")));
    }
    Ok(Figures {
        first_ms: lat[0],
        later_ms: median(&lat[1..]),
        attach_ms: median(&attach),
        rss_kib_per_copy: rss1.saturating_sub(rss0) as f64 / copies as f64,
        copies,
    })
}

pub fn print(f: &Figures) {
    println!(
        "\nlibrary copies ({} copies of the test libcufile dlopened one after another, watch)",
        f.copies
    );
    println!("mapped -> hooked: first copy {:.1} ms, later copies (median) {:.1} ms", f.first_ms, f.later_ms);
    println!("open + parse + attach of a copy (median): {:.1} ms", f.attach_ms);
    println!("follower resident memory per copy: {:.0} KiB", f.rss_kib_per_copy);
}

pub fn json(f: &Figures) -> serde_json::Value {
    serde_json::json!({
        "copies": f.copies, "first_mapped_to_hooked_ms": f.first_ms, "later_mapped_to_hooked_ms": f.later_ms,
        "attach_ms": f.attach_ms, "follower_rss_kib_per_copy": f.rss_kib_per_copy,
    })
}
