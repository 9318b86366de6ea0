//! gdr-soak: a week of `gdr-trace serve` in a few minutes. Starts `serve --storage --top N`,
//! then, round after round, churns short-lived processes through its hooks — half register a
//! 4 KiB MR through the real libibverbs (gdr-workload), half open, read once and close files of
//! their own — and after each round reads what a DaemonSet's owner watches: resident memory,
//! the number of series in /metrics, how long a scrape takes, lost events. Prints one line per
//! round and a closing JSON object; `cargo xtask bench --soak` runs it in the VM. A bench, not a
//! test: it asserts nothing about time and says whether each figure stayed flat.
//!
//!   gdr-soak --gdr-trace PATH [--workload PATH] [--rounds R] [--procs P] [--files F] [--top N]
//!   gdr-soak read DIR FROM TO      (a churned process: reads DIR/f<FROM..TO> once each)

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use gdr_trace_tests::prom::{free_port, http_get, samples};

struct Args {
    gdr_trace: PathBuf,
    workload: Option<PathBuf>,
    rounds: usize,
    /// Processes per round.
    procs: usize,
    /// Files per round.
    files: usize,
    top: usize,
}

fn parse() -> Result<Args> {
    let mut a =
        Args { gdr_trace: PathBuf::new(), workload: None, rounds: 10, procs: 1000, files: 10_000, top: 20 };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().with_context(|| format!("{k} needs a value"));
        match k.as_str() {
            "--gdr-trace" => a.gdr_trace = v()?.into(),
            "--workload" => a.workload = Some(v()?.into()),
            "--rounds" => a.rounds = v()?.parse()?,
            "--procs" => a.procs = v()?.parse()?,
            "--files" => a.files = v()?.parse()?,
            "--top" => a.top = v()?.parse()?,
            _ => bail!("unknown argument {k}"),
        }
    }
    if a.gdr_trace.as_os_str().is_empty() {
        bail!("--gdr-trace PATH is required");
    }
    Ok(a)
}

/// The churned process that reads files: open, read to the end, close, for each.
fn read_files(dir: &Path, from: usize, to: usize) -> Result<()> {
    let mut buf = Vec::new();
    for i in from..to {
        buf.clear();
        std::fs::File::open(dir.join(format!("f{i}")))?.read_to_end(&mut buf)?;
    }
    Ok(())
}

/// What one round left behind, read from the running `serve`.
#[derive(Debug, Clone)]
struct Round {
    round: usize,
    processes: usize,
    files: usize,
    rss_kib: u64,
    /// The most resident memory so far (VmHWM): start-up's, or a round's if it went higher.
    peak_kib: u64,
    series: usize,
    scrape_ms: f64,
    registrations_seen: f64,
    registrations_made: usize,
    lost: f64,
    /// Lost events by reason, where any.
    lost_by: String,
}

impl Round {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "round": self.round, "processes": self.processes, "files": self.files,
            "rss_kib": self.rss_kib, "peak_kib": self.peak_kib, "series": self.series, "scrape_ms": self.scrape_ms,
            "registrations_seen": self.registrations_seen,
            "registrations_made": self.registrations_made, "lost": self.lost,
            "lost_by_reason": self.lost_by,
        })
    }
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Three scrapes: the median time, and the last body.
fn scrape(addr: &str) -> Result<(f64, String)> {
    let mut times = Vec::new();
    let mut body = String::new();
    for _ in 0..3 {
        let t = Instant::now();
        let (status, _, b) = http_get(addr, "/metrics")?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        body = b;
    }
    times.sort_by(f64::total_cmp);
    Ok((times[1], body))
}

fn sum(text: &str, name: &str) -> f64 {
    samples(text, name).iter().fold(0.0, |a, (_, v)| a + v)
}

/// Runs `cmds` at most `width` at a time; whether each exited 0, in order.
fn churn(cmds: Vec<Command>, width: usize) -> Result<Vec<bool>> {
    let mut running: std::collections::VecDeque<Child> = Default::default();
    let mut ok = Vec::with_capacity(cmds.len());
    for mut c in cmds {
        if running.len() >= width {
            let first = running.pop_front().context("running")?;
            ok.push(first.wait_with_output()?.status.success());
        }
        running.push_back(c.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?);
    }
    for c in running {
        ok.push(c.wait_with_output()?.status.success());
    }
    Ok(ok)
}

fn serve(a: &Args, addr: &str) -> Result<Child> {
    let child = Command::new(&a.gdr_trace)
        .args(["serve", "--storage", "--interval", "1", "--listen", addr, "--top", &a.top.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start gdr-trace serve")?;
    let until = Instant::now() + Duration::from_secs(180);
    while !http_get(addr, "/healthz").is_ok_and(|r| r.0 == 200) {
        if Instant::now() > until {
            bail!("serve not healthy after 180 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(child)
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("read") {
        let n = |i: usize| argv.get(i).context("read DIR FROM TO")?.parse::<usize>().context("a number");
        return read_files(Path::new(&argv[2]), n(3)?, n(4)?);
    }
    let a = parse()?;
    let me = std::env::current_exe()?;
    let addr = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let mut server = serve(&a, &addr)?;
    let pid = server.id();
    eprintln!(
        "[soak] serve up in {:.1} s (peak resident {:.1} MiB so far); {} rounds of {} processes and {} files",
        started.elapsed().as_secs_f64(),
        status_kib(pid, "VmHWM:") as f64 / 1024.0,
        a.rounds,
        a.procs,
        a.files
    );
    println!(
        "round  processes      files   rss MiB  peak MiB  series  scrape ms  registrations seen/made  lost"
    );
    let dir = Scratch(std::env::temp_dir().join(format!("gdr-soak-{}", std::process::id())));
    std::fs::create_dir_all(dir.path())?;
    let (mut procs, mut files, mut made) = (0, 0, 0);
    let mut rounds = Vec::new();
    for r in 1..=a.rounds {
        if let Some(code) = server.try_wait()? {
            bail!("serve exited during round {r}: {code}");
        }
        for i in files..files + a.files {
            std::fs::write(dir.path().join(format!("f{i}")), [b'x'; 4096])?;
        }
        let readers = a.procs / if a.workload.is_some() { 2 } else { 1 };
        let per = a.files.div_ceil(readers.max(1));
        let mut cmds = Vec::new();
        for k in 0..a.procs {
            let from = files + (k.min(readers) * per).min(a.files);
            let to = files + ((k.min(readers) + 1) * per).min(a.files);
            match &a.workload {
                Some(w) if k >= readers => {
                    let mut c = Command::new(w);
                    c.arg("4096:1");
                    cmds.push(c);
                }
                _ => {
                    let mut c = Command::new(&me);
                    c.arg("read").arg(dir.path()).arg(from.to_string()).arg(to.to_string());
                    cmds.push(c);
                }
            }
        }
        // The registering processes are the last `procs - readers`: those that succeeded.
        made += churn(cmds, 16)?.iter().skip(readers).filter(|ok| **ok).count();
        for i in files..files + a.files {
            std::fs::remove_file(dir.path().join(format!("f{i}")))?;
        }
        procs += a.procs;
        files += a.files;
        // Two metric refreshes (--interval 1) so the round's processes are in what is scraped.
        std::thread::sleep(Duration::from_millis(2500));
        let (scrape_ms, body) = scrape(&addr)?;
        let row = Round {
            round: r,
            processes: procs,
            files,
            rss_kib: status_kib(pid, "VmRSS:"),
            peak_kib: status_kib(pid, "VmHWM:"),
            series: body.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).count(),
            scrape_ms,
            registrations_seen: sum(&body, "gdr_trace_registrations_total"),
            registrations_made: made,
            lost: sum(&body, "gdr_trace_lost_events_total"),
            lost_by: samples(&body, "gdr_trace_lost_events_total")
                .iter()
                .filter(|(_, v)| *v > 0.0)
                .map(|(l, v)| format!("{}={v}", l.get("reason").map_or("?", |s| s.as_str())))
                .collect::<Vec<_>>()
                .join(","),
        };
        println!(
            "{:>5}  {:>9}  {:>9}  {:>8.1}  {:>8.1}  {:>6}  {:>9.1}  {:>11} / {:<11}  {} {}",
            row.round,
            row.processes,
            row.files,
            row.rss_kib as f64 / 1024.0,
            row.peak_kib as f64 / 1024.0,
            row.series,
            row.scrape_ms,
            row.registrations_seen,
            row.registrations_made,
            row.lost,
            row.lost_by
        );
        rounds.push(row);
    }
    let peak = status_kib(pid, "VmHWM:");
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let status = server.wait()?;
    let (first, last) = (rounds.first().context("no round")?, rounds.last().context("no round")?);
    let ratio = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::NAN };
    let summary = serde_json::json!({
        "rounds": rounds.iter().map(Round::json).collect::<Vec<_>>(),
        "peak_rss_kib": peak,
        "rss_last_over_first": ratio(first.rss_kib as f64, last.rss_kib as f64),
        "series_last_over_first": ratio(first.series as f64, last.series as f64),
        "scrape_last_over_first": ratio(first.scrape_ms, last.scrape_ms),
        "serve_exit": status.code(),
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("{summary}");
    Ok(())
}
