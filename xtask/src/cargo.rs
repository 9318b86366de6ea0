//! Running cargo from xtask: builds, and finding the executables it made.

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context, Result};

use crate::sh::workspace_root;

pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

/// Runs cargo with `args`; Ok(true) when it succeeded.
pub fn status(args: &[&str]) -> Result<bool> {
    eprintln!("[xtask] cargo {}", args.join(" "));
    Ok(cargo().args(args).status().context("running cargo")?.success())
}

/// Builds the default members' binaries (gdr-trace, gdr-workload).
pub fn build_bins(release: bool) -> Result<()> {
    let mut args = vec!["build", "--bins"];
    if release {
        args.push("--release");
    }
    if !status(&args)? {
        bail!("cargo build failed");
    }
    Ok(())
}

/// Builds package `package`'s integration test `test` and returns its executable.
pub fn test_executable(package: &str, test: &str) -> Result<PathBuf> {
    let out = cargo()
        .args(["test", "-p", package, "--test", test, "--no-run", "--message-format=json"])
        .output()
        .context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("building test {test} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact" && v["target"]["name"] == test {
            if let Some(exe) = v["executable"].as_str() {
                return Ok(exe.into());
            }
        }
    }
    bail!("cargo made no executable for test {test}")
}

/// target/debug or target/release.
pub fn bin_dir(release: bool) -> PathBuf {
    workspace_root().join("target").join(if release { "release" } else { "debug" })
}
