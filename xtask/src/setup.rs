//! `cargo xtask setup`: installs what building and testing gdr-trace needs, idempotently.
//!
//! - the rustup `nightly` toolchain with `rust-src` (the eBPF crate builds `core` itself);
//! - Debian packages: LLVM 22 for bpf-linker, qemu and busybox for the VM test bed, the RDMA
//!   userspace, bpftrace (baseline), pahole (module BTF), compressors, a C toolchain, Prometheus
//!   (the exporter test's scraper);
//! - bpf-linker 0.13.0 built against LLVM 22 (rustc nightly's LLVM major);
//! - the rustup target `x86_64-unknown-linux-musl` (`cargo xtask dist`: the static binary);
//! - NVIDIA's `nvidia-cufile-cu12` wheel (pinned), unpacked by pip into a wheel-like directory
//!   under target/ ([`cufile_wheel_dir`]): the real `libcufile.so.0` and `cufile.h` the cuFile
//!   tests check gdr-trace against (tests never download it).

use anyhow::{ensure, Context, Result};
use std::path::PathBuf;

use crate::sh::{output, run};
use std::process::{Command, Stdio};

pub const PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "rdma-core",
    "ibverbs-utils",
    "ibverbs-providers",
    "libibverbs-dev",
    // Real RDMA programs the VM tests trace (tests/vm_rdma.rs): perftest's ib_write_bw,
    // rdma-core's rping (RDMA CM), libfabric's fi_pingpong (verbs provider), UCX's
    // ucx_perftest (UCT rc_verbs).
    "perftest",
    "rdmacm-utils",
    "libfabric-bin",
    "ucx-utils",
    "bpftrace",
    // The seccomp profile test (tests/security/deploy.rs) lists the tracer's system calls.
    "strace",
    // mksquashfs: a read-only squashfs for the GDS-mode tests (tests/vm_storage/gds_modes.rs).
    "squashfs-tools",
    "dwarves",
    "xz-utils",
    "zstd",
    "gcc",
    "make",
    // A real Prometheus server scrapes `gdr-trace serve` in the exporter test (in the VM);
    // its promtool checks the text format.
    "prometheus",
    // client_python's strict OpenMetrics parser (promtool has none) for the exporter tests.
    "python3-prometheus-client",
    // `serve --web-config` (tests/fleet/web.rs): a self-signed certificate, a TLS client.
    "openssl",
    "curl",
    // `cargo xtask image`: the OCI image without a daemon (umoci), written as archives (skopeo).
    "umoci",
    "skopeo",
];

/// The static release binary's target (`cargo xtask dist`).
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

pub const BPF_LINKER_VERSION: &str = "0.13.0";

/// NVIDIA's cuFile wheel, pinned in xtask/cufile-wheel.txt (a pip requirement, `name==version`),
/// which tests/cufile_wheel.rs reads too.
const CUFILE_PIN: &str = include_str!("../cufile-wheel.txt");

/// The pinned requirement (`nvidia-cufile-cu12==1.14.1.1`): the file's one line that is not a
/// comment.
pub fn cufile_wheel_pin() -> &'static str {
    CUFILE_PIN.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).expect("a pin")
}

/// Where pip unpacks it, under the workspace: `site-packages/nvidia/cufile/{lib,include}`.
pub fn cufile_wheel_dir() -> String {
    let (name, version) = cufile_wheel_pin().split_once("==").expect("name==version");
    format!("target/wheels/{name}-{version}/site-packages")
}

/// `cargo xtask setup`: reports every item.
pub fn main() -> Result<i32> {
    check(true)?;
    Ok(0)
}

/// Makes sure everything is installed; prints only what it installs. For other commands.
pub fn ensure() -> Result<()> {
    check(false)
}

fn check(verbose: bool) -> Result<()> {
    let say = |item: &str, state: &str| {
        if verbose {
            eprintln!("[setup] {item}: {state}");
        }
    };

    // rustup nightly + rust-src
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]))?;
    if toolchains.lines().any(|l| l.starts_with("nightly-")) {
        say("rust nightly", "present");
    } else {
        eprintln!("[setup] rust nightly: installing ...");
        run(Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let components =
        output(Command::new("rustup").args(["component", "list", "--installed", "--toolchain", "nightly"]))?;
    if components.lines().any(|l| l.trim() == "rust-src") {
        say("rust-src (nightly)", "present");
    } else {
        eprintln!("[setup] rust-src (nightly): installing ...");
        run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }

    // The musl target for the static binary (stable: the toolchain that builds userspace)
    let targets = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if targets.lines().any(|l| l.trim() == MUSL_TARGET) {
        say(MUSL_TARGET, "present");
    } else {
        eprintln!("[setup] rust target {MUSL_TARGET}: installing ...");
        run(Command::new("rustup").args(["target", "add", MUSL_TARGET]))?;
    }

    // Debian packages
    let status = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Status}\n"])
        .args(PACKAGES)
        .stderr(Stdio::null())
        .output()
        .context("cannot run dpkg-query")?;
    let status = String::from_utf8_lossy(&status.stdout);
    let installed =
        |p: &str| status.lines().any(|l| l.strip_prefix(p).map(str::trim) == Some("install ok installed"));
    let missing: Vec<&str> = PACKAGES.iter().copied().filter(|p| !installed(p)).collect();
    for p in PACKAGES {
        if !missing.contains(p) {
            say(p, "present");
        }
    }
    if !missing.is_empty() {
        eprintln!("[setup] {}: installing ...", missing.join(" "));
        let apt = |args: &[&str]| {
            let mut cmd = Command::new("apt-get");
            cmd.args(args)
                .args(["-o", "DPkg::Lock::Timeout=300"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(std::io::stderr());
            run(&mut cmd)
        };
        apt(&["update", "-q"])?;
        let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
        args.extend(&missing);
        apt(&args)?;
    }

    // bpf-linker, pinned and built against LLVM 22
    let linker = bpf_linker();
    let version = Command::new(&linker)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if version.split_whitespace().any(|w| w == BPF_LINKER_VERSION) {
        say(&format!("bpf-linker {BPF_LINKER_VERSION}"), "present");
    } else {
        let now = version.trim();
        let now = if now.is_empty() { "missing" } else { now };
        eprintln!("[setup] bpf-linker {BPF_LINKER_VERSION}: installing (was {now}; ~75 s) ...");
        let spec = format!("bpf-linker@{BPF_LINKER_VERSION}");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["install", &spec, "--locked", "--force", "--no-default-features"])
            .args(["--features", "llvm-22"])
            .env("LLVM_PREFIX", "/usr/lib/llvm-22");
        run(&mut cmd)?;
    }
    cufile_wheel(&say)
}

/// The pinned cuFile wheel, unpacked by pip (no dependencies: only its own files).
fn cufile_wheel(say: &dyn Fn(&str, &str)) -> Result<()> {
    let pin = cufile_wheel_pin();
    let dir = crate::sh::workspace_root().join(cufile_wheel_dir());
    if dir.join("nvidia/cufile/lib/libcufile.so.0").is_file() {
        say(pin, "present");
        return Ok(());
    }
    eprintln!("[setup] {pin}: installing into {} ...", dir.display());
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
        ])
        .arg("--target")
        .arg(&dir)
        .arg(pin)
        .stdout(std::io::stderr()))
    .context("installing NVIDIA's cuFile wheel (python3 -m pip; PyPI must be reachable)")?;
    ensure!(
        dir.join("nvidia/cufile/lib/libcufile.so.0").is_file(),
        "{pin} installed without nvidia/cufile/lib/libcufile.so.0 in {}",
        dir.display()
    );
    Ok(())
}

/// `bpf-linker` on PATH, else the one in `$CARGO_HOME/bin` (where `cargo install` puts it).
fn bpf_linker() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("bpf-linker").is_file()))
        .unwrap_or(false);
    if on_path {
        return PathBuf::from("bpf-linker");
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_default();
    home.join("bin").join("bpf-linker")
}

#[cfg(test)]
mod tests {
    /// README's setup list names every package `setup` installs (by the name a reader knows it:
    /// qemu, busybox, pahole...), the cuFile wheel and the Debian kernels the VM downloads.
    #[test]
    fn the_readme_names_everything_setup_installs() {
        let readme = std::fs::read_to_string(crate::sh::workspace_root().join("README.md")).unwrap();
        let known_as = |p: &'static str| match p {
            "qemu-system-x86" => "qemu",
            "busybox-static" => "busybox",
            "dwarves" => "pahole",
            "python3-prometheus-client" => "Python client",
            "xz-utils" => "xz",
            "prometheus" => "Prometheus",
            p => p,
        };
        let missing: Vec<&str> =
            super::PACKAGES.iter().map(|p| known_as(p)).filter(|p| !readme.contains(p)).collect();
        assert!(missing.is_empty(), "README's setup list lacks {missing:?}");
        for what in ["nvidia-cufile-cu12", "bpf-linker", "musl", "Debian kernel packages"] {
            assert!(readme.contains(what), "README's setup list lacks {what}");
        }
    }
}
