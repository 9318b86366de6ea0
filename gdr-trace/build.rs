//! Compiles `gdr-trace-ebpf` for the BPF target (nightly + bpf-linker, see `cargo xtask setup`)
//! and leaves the object in OUT_DIR, where `loader.rs` embeds it.
//!
//! What aya-build's `build_ebpf` does (the same command and flags; one target directory for
//! the whole workspace, not one per profile), but quiet: aya-build relays every line the inner cargo prints as a `cargo:warning`, so each
//! build of gdr-trace printed some 40 "warning: gdr-trace@0.1.0: Compiling ..." lines. Here
//! the inner build's output is shown only when it fails (and then all of it).
use std::{env, path::PathBuf, process::Command};

use anyhow::{bail, Context};

const PACKAGE: &str = "gdr-trace-ebpf";

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        println!("cargo:warning=AYA_BUILD_SKIP is set: the eBPF object is not built");
        return Ok(());
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../gdr-trace-ebpf");
    println!("cargo:rerun-if-changed={root}");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN not set")?;
    let target = match endian.as_str() {
        "little" => "bpfel-unknown-none",
        "big" => "bpfeb-unknown-none",
        e => bail!("unsupported endian {e}"),
    };
    let mut arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    if arch.starts_with("riscv64") {
        arch = "riscv64".into();
    }
    // The nightly toolchain through rustup where there is one (build-std needs nightly).
    let rustup = Command::new("rustup").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut cmd = if rustup {
        let mut c = Command::new("rustup");
        c.args(["run", "nightly", "cargo"]);
        c
    } else {
        Command::new("cargo")
    };
    // One eBPF build for every profile and host target of the workspace (the object is always
    // a release build for BPF): `cargo xtask dist`'s musl release build reuses the one the
    // debug build made. Cargo marks its target root with CACHEDIR.TAG; without one, OUT_DIR.
    // GDR_EBPF_TARGET_DIR names another place (a test's copy).
    println!("cargo:rerun-if-env-changed=GDR_EBPF_TARGET_DIR");
    let shared = out_dir.ancestors().find(|p| p.join("CACHEDIR.TAG").is_file()).map(|t| t.join("ebpf"));
    let target_dir = env::var_os("GDR_EBPF_TARGET_DIR")
        .map(PathBuf::from)
        .or(shared)
        .unwrap_or_else(|| out_dir.join("aya-build").join("target"))
        .join(PACKAGE);
    cmd.args(["build", "--package", PACKAGE, "--bins", "--release", "--target", target])
        .args(["-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        // The outer build's compiler is not the nightly one.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        for line in
            String::from_utf8_lossy(&out.stdout).lines().chain(String::from_utf8_lossy(&out.stderr).lines())
        {
            println!("cargo:warning={line}");
        }
        bail!("building the eBPF programs failed ({}): {cmd:?}", out.status);
    }
    // Compiler warnings still show; cargo's progress lines ("Compiling ...") do not.
    const PROGRESS: [&str; 8] =
        ["Compiling", "Finished", "Fresh", "Blocking", "Updating", "Locking", "Downloading", "Downloaded"];
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        let word = line.trim_start().split(' ').next().unwrap_or("");
        if !line.trim().is_empty() && !PROGRESS.contains(&word) {
            println!("cargo:warning={line}");
        }
    }
    for object in [PACKAGE, "gdr-bench-floor-ebpf"] {
        let built = target_dir.join(target).join("release").join(object);
        std::fs::copy(&built, out_dir.join(object))
            .with_context(|| format!("copying {} to {}", built.display(), out_dir.display()))?;
    }
    Ok(())
}
