//! `cargo xtask dist`: the release tarball for GPU nodes. A static `x86_64-unknown-linux-musl`
//! binary (the eBPF object embedded, as in every build), shell completions and man pages from
//! `gdr-trace generate` (the same clap definitions), the licenses and the README, packed as
//! `target/dist/gdr-trace-<version>-x86_64-linux.tar.gz` with its SHA-256 beside it.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, ensure, Context, Result};

use crate::{
    cargo,
    setup::{self, MUSL_TARGET},
    sh::workspace_root,
};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `dist` made.
pub struct Dist {
    /// The static binary (also inside the tarball).
    pub binary: PathBuf,
    pub tarball: PathBuf,
    pub sha256: PathBuf,
}

pub fn dist_dir() -> PathBuf {
    workspace_root().join("target").join("dist")
}

/// `gdr-trace-<version>-x86_64-linux`: the tarball's name and its top directory.
pub fn release_name() -> String {
    format!("gdr-trace-{VERSION}-x86_64-linux")
}

pub fn main() -> Result<i32> {
    let d = build()?;
    println!("{}\n{}\n{}", d.binary.display(), d.tarball.display(), d.sha256.display());
    Ok(0)
}

/// Builds the static binary (release, symbols stripped: gdr-trace never probes itself).
pub fn static_binary() -> Result<PathBuf> {
    setup::ensure()?;
    let t = Instant::now();
    let args = [
        "build",
        // Artifacts as JSON on stdout (to find the binary wherever CARGO_TARGET_DIR puts it),
        // diagnostics rendered on stderr as usual.
        "--message-format=json-render-diagnostics",
        "--release",
        "--target",
        MUSL_TARGET,
        "--package",
        "gdr-trace",
        "--bin",
        "gdr-trace",
        // Only this build: the eBPF object, which aya-build compiles with its own cargo, keeps
        // its symbols and BTF.
        "--config",
        "profile.release.strip=\"symbols\"",
    ];
    eprintln!("[xtask] cargo {}", args.join(" "));
    let out =
        cargo::cargo().args(args).stderr(std::process::Stdio::inherit()).output().context("running cargo")?;
    if !out.status.success() {
        bail!("the static build failed");
    }
    eprintln!("[dist] static build: {:.0} s", t.elapsed().as_secs_f64());
    let bin = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "gdr-trace")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo made no gdr-trace executable")?;
    ensure_static(&bin)?;
    Ok(bin)
}

/// An ELF with no program interpreter loads no shared library at all.
fn ensure_static(bin: &Path) -> Result<()> {
    let elf = std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?;
    ensure!(
        elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2,
        "{} is not a 64-bit ELF",
        bin.display()
    );
    let u = |at: usize, n: usize| elf[at..at + n].iter().rev().fold(0_usize, |v, b| v << 8 | usize::from(*b));
    let (phoff, phentsize, phnum) = (u(0x20, 8), u(0x36, 2), u(0x38, 2));
    for i in 0..phnum {
        const PT_INTERP: usize = 3;
        let at = phoff + i * phentsize;
        ensure!(at + 4 <= elf.len(), "{}: truncated program headers", bin.display());
        ensure!(u(at, 4) != PT_INTERP, "{} asks for a dynamic loader: not static", bin.display());
    }
    Ok(())
}

pub fn build() -> Result<Dist> {
    let bin = static_binary()?;
    let dist = dist_dir();
    let name = release_name();
    let stage = dist.join(&name);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("cannot clear {}", stage.display()))?;
    }
    std::fs::create_dir_all(&stage)?;
    let staged = stage.join("gdr-trace");
    std::fs::copy(&bin, &staged).with_context(|| format!("cannot copy {}", bin.display()))?;
    // Completions and man pages from the binary being shipped.
    crate::sh::output(Command::new(&staged).arg("generate").arg("--out").arg(&stage))?;
    let root = workspace_root();
    for f in ["LICENSE-MIT", "LICENSE-APACHE", "README.md"] {
        std::fs::copy(root.join(f), stage.join(f)).with_context(|| format!("cannot copy {f}"))?;
    }

    // Reproducible: sorted, root-owned, the last commit's time, gzip without a name or time.
    let tar = dist.join(format!("{name}.tar"));
    let tarball = dist.join(format!("{name}.tar.gz"));
    let mtime = crate::sh::output(Command::new("git").args(["log", "-1", "--format=%ct"]).current_dir(&root))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "0".into());
    crate::sh::run(
        Command::new("tar")
            .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--format=gnu"])
            .arg(format!("--mtime=@{mtime}"))
            .arg("-cf")
            .arg(&tar)
            .arg("-C")
            .arg(&dist)
            .arg(&name),
    )?;
    let _ = std::fs::remove_file(&tarball);
    crate::sh::run(Command::new("gzip").args(["-n", "-9"]).arg(&tar))?;
    let file = format!("{name}.tar.gz");
    let sum = crate::sh::output(Command::new("sha256sum").arg(&file).current_dir(&dist))?;
    let sha256 = dist.join(format!("{file}.sha256"));
    std::fs::write(&sha256, &sum)?;
    eprintln!(
        "[dist] {} ({} bytes)\n[dist] sha256: {}",
        tarball.display(),
        std::fs::metadata(&tarball)?.len(),
        sum.trim()
    );
    Ok(Dist { binary: staged, tarball, sha256 })
}
