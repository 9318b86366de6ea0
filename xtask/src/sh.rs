//! Running commands and finding the workspace: the leaf every other xtask module uses.

use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (the parent of xtask's manifest dir), not CARGO_TARGET_DIR.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// Runs a command, failing with its name and status if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

/// Runs a command and returns its stdout, failing with its stderr if it fails.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out =
        cmd.stderr(Stdio::piped()).output().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
