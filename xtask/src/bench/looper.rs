//! What every case shares: the measuring loop programs, where the builds are, this binary's path.

use std::{
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{Child, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::sh::workspace_root;

pub(super) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// A measuring loop program: prints "ready", then answers each line on its stdin with one JSON
/// line (gdr-preadloop, gdr-cuda-workload peerloop, gdr-regstorm).
pub(super) struct Loop {
    pub(super) child: Child,
    out: BufReader<ChildStdout>,
}

impl Loop {
    pub(super) fn start(mut cmd: Command, what: &str) -> Result<Self> {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.contains("ready") {
            bail!("{what} did not start: {line:?}");
        }
        Ok(Self { child, out })
    }

    /// Sends one line; the JSON answer.
    pub(super) fn ask(&mut self, ask: &str) -> Result<serde_json::Value> {
        let stdin = self.child.stdin.as_mut().context("stdin")?;
        writeln!(stdin, "{ask}")?;
        stdin.flush()?;
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        serde_json::from_str(&line).with_context(|| format!("loop said {line:?}"))
    }

    /// The answer's `ns_per_op`.
    pub(super) fn ns_per_op(&mut self, ask: &str) -> Result<f64> {
        self.ask(ask)?["ns_per_op"].as_f64().context("no ns_per_op")
    }

    /// Closes its stdin (it ends) and waits.
    pub(super) fn end(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// This xtask binary's path for the VM to run: rebuilt while a bench runs, the running one is
/// "(deleted)" and the path names the new build.
pub(super) fn guest_exe() -> Result<String> {
    let exe = std::env::current_exe()?.display().to_string();
    Ok(exe.strip_suffix(" (deleted)").map(str::to_string).unwrap_or(exe))
}
