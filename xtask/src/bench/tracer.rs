//! A tracer process of the benches (gdr-trace, bpftrace, the floor program): started, ready
//! once it printed its marker, its output drained, stopped with SIGINT.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// A tracer, ready once it printed `ready_marker`; stopped with SIGINT.
pub(super) struct Tracer(pub(super) Child);

impl Tracer {
    pub(super) fn start(mut cmd: Command, ready_marker: &str) -> Result<Self> {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let started = Instant::now();
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line)? == 0 {
                bail!("{cmd:?} exited before it was ready");
            }
            if line.contains(ready_marker) {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                bail!("{cmd:?} not ready after 120 s");
            }
        }
        // Keep draining so the tracer never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        Ok(Self(child))
    }

    pub(super) fn stop(mut self) -> Result<()> {
        // SIGINT, as Ctrl-C: both tracers detach and exit cleanly on it.
        let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.0.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                self.0.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}
