//! A `gdr-trace watch --json` run for the storm benches, whose output is kept: its final `lost`
//! line (records lost by reason, and delivered) is read from gdr-trace's own JSON. It can stall
//! its reader on purpose (`Stall::Yes`): stdout stops being read after the `hooks` line until
//! [`Watch::resume`], so gdr-trace blocks writing, stops draining its ring buffer, and the ring
//! overflows — the case where every lost record must still be counted. Lines are handled as
//! they come (a storage storm writes hundreds of thousands), never all kept.

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    No,
    Yes,
}

/// Called with every line watch writes, parsed, on the reader's thread.
pub type OnLine = Box<dyn FnMut(&serde_json::Value) + Send>;

pub struct Watch {
    child: Child,
    ready: mpsc::Receiver<()>,
    go: Option<mpsc::Sender<()>>,
    reader: Option<std::thread::JoinHandle<serde_json::Value>>,
}

/// What one watch run said at its end: its final `lost` line (`by_reason`, `total`,
/// `delivered`).
#[derive(Debug, Default, Clone)]
pub struct Said {
    pub lost: serde_json::Value,
}

impl Said {
    pub fn lost_total(&self) -> u64 {
        self.lost["total"].as_u64().unwrap_or(0)
    }
    pub fn delivered(&self) -> u64 {
        self.lost["delivered"].as_u64().unwrap_or(0)
    }
}

impl Watch {
    /// Starts `gdr watch --json ARGS`, hands every line to `on_line`, and waits until it has
    /// attached (its `hooks` line).
    pub fn start(gdr: &Path, args: &[&str], stall: Stall, mut on_line: OnLine) -> Result<Self> {
        let mut child = Command::new(gdr)
            .args(["watch", "--json"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .context("starting gdr-trace watch")?;
        let out = BufReader::new(child.stdout.take().context("stdout")?);
        let (ready_tx, ready) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut stalled = stall == Stall::Yes;
            let mut lost = serde_json::Value::Null;
            for line in out.lines().map_while(Result::ok) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
                if v["event"] == "lost" {
                    lost = v.clone();
                }
                on_line(&v);
                if v["event"] == "hooks" {
                    let _ = ready_tx.send(());
                    if stalled {
                        let _ = go_rx.recv();
                        stalled = false;
                    }
                }
            }
            lost
        });
        let w = Self { child, ready, go: Some(go_tx), reader: Some(reader) };
        match w.ready.recv_timeout(Duration::from_secs(180)) {
            Ok(()) => Ok(w),
            Err(_) => bail!("gdr-trace watch did not attach (no hooks line within 180 s)"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets a stalled reader read again.
    pub fn resume(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// SIGINT (as Ctrl-C), then its final `lost` line once it has written everything.
    pub fn stop(mut self) -> Result<Said> {
        self.resume();
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("gdr-trace watch did not end within 300 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let lost = self.reader.take().map(|r| r.join().unwrap_or_default()).unwrap_or_default();
        if lost.is_null() {
            bail!("gdr-trace watch wrote no lost line at its end");
        }
        Ok(Said { lost })
    }
}

/// Sum of `recursion_misses` over the BPF programs process `pid` holds (fdinfo): program runs
/// the kernel skipped — records that were never made, so never counted as lost by gdr-trace.
pub fn recursion_misses(pid: u32) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        if !text.contains("prog_id:") {
            continue;
        }
        n += text
            .lines()
            .find_map(|l| l.strip_prefix("recursion_misses:").and_then(|v| v.trim().parse::<u64>().ok()))
            .unwrap_or(0);
    }
    n
}

/// CPU seconds (user + system) process `pid` has used so far, from /proc/PID/stat.
pub fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // After the command name's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    f.iter().sum::<u64>() as f64 / hz
}
