//! Debian kernels for the VM test bed: resolve, download, extract and cache them, and install
//! the matching headers on the host.
//!
//! Layout under `<workspace>/target/vm/`:
//! - `cache/*.deb`: the linux-image packages as `apt-get download` fetched them;
//! - `<release>/vmlinuz`, `<release>/config`, `<release>/modules/NN-name.ko` (plain, in load
//!   order), `<release>/VERSION` (the package version; written last, marks the dir complete);
//! - `resolved-<kernel>`: the meta-package resolution, reused while apt's lists are unchanged.

use crate::sh::{output, run, workspace_root};
use anyhow::{bail, ensure, Context, Result};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

/// The kernels the VM can boot: Debian bookworm's own 6.1 and the 6.12 backport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kernel {
    #[default]
    V6_1,
    V6_12,
}

impl Kernel {
    #[allow(dead_code)] // for `test` / `bench`, which loop over both
    pub const ALL: [Kernel; 2] = [Kernel::V6_1, Kernel::V6_12];

    /// The Debian meta-package that depends on the current versioned image package.
    pub fn meta_package(self) -> &'static str {
        match self {
            Kernel::V6_1 => "linux-image-amd64",
            Kernel::V6_12 => "linux-image-6.12-amd64",
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kernel::V6_1 => "6.1",
            Kernel::V6_12 => "6.12",
        })
    }
}

impl FromStr for Kernel {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "6.1" | "v6.1" | "6_1" => Ok(Kernel::V6_1),
            "6.12" | "v6.12" | "6_12" => Ok(Kernel::V6_12),
            _ => bail!("unknown kernel {s:?}: expected 6.1 or 6.12"),
        }
    }
}

/// Modules the test bed loads, in load order. Those a kernel has built in (per its
/// `modules.builtin`) are skipped: 6.12 builds in virtio and virtio_pci.
pub const MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "netfs",
    "fscache",
    "9pnet",
    "9pnet_virtio",
    "9p",
    "overlay",
    "crc32_generic", // without it `rdma link add` fails with ENOENT
    "udp_tunnel",
    "ip6_udp_tunnel",
    "ib_core",
    "ib_uverbs",
    "rdma_rxe",
];

/// Modules that may also be neither modules nor built in: fscache is part of netfs since 6.4.
const MERGED: &[&str] = &["fscache"];

/// A versioned kernel package, as the meta-package resolves today.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// e.g. `linux-image-6.1.0-57-amd64`
    pub package: String,
    /// e.g. `6.1.192-3`
    pub version: String,
    /// `uname -r` in the guest, e.g. `6.1.0-57-amd64`
    pub release: String,
}

/// An extracted, cached kernel.
#[derive(Clone, Debug)]
pub struct KernelImage {
    pub kernel: Kernel,
    pub resolved: Resolved,
    pub dir: PathBuf,
    pub vmlinuz: PathBuf,
    pub config: PathBuf,
    /// Plain `.ko` files in load order (built-in ones left out).
    pub modules: Vec<PathBuf>,
}

/// `<workspace>/target/vm`, the VM test bed's cache and scratch dir.
pub fn vm_dir() -> PathBuf {
    workspace_root().join("target").join("vm")
}

/// Resolves the kernel's meta-package to the versioned image package apt would install now.
pub fn resolve(kernel: Kernel) -> Result<Resolved> {
    let dir = vm_dir();
    fs::create_dir_all(&dir)?;
    let memo = dir.join(format!("resolved-{kernel}"));
    let lists = fs::metadata("/var/lib/apt/lists")
        .and_then(|m| m.modified())
        .map(|t| format!("{t:?}"))
        .unwrap_or_default();
    let text = fs::read_to_string(&memo).unwrap_or_default();
    if let [l, package, version, release] = text.lines().collect::<Vec<_>>()[..] {
        if l == lists {
            let (package, version, release) = (package.into(), version.into(), release.into());
            return Ok(Resolved { package, version, release });
        }
    }
    let meta = kernel.meta_package();
    let deps = output(Command::new("apt-cache").args(["depends", meta]))?;
    let package = deps
        .lines()
        .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-"))
        .with_context(|| format!("{meta} depends on no linux-image-* package:\n{deps}"))?
        .to_owned();
    let version = candidate_version(&package)?;
    let release = package["linux-image-".len()..].to_owned();
    fs::write(&memo, format!("{lists}\n{package}\n{version}\n{release}\n"))?;
    Ok(Resolved { package, version, release })
}

/// The release string (`uname -r`) of the kernel the VM boots, e.g. `6.1.0-57-amd64`.
pub fn kernel_release(kernel: Kernel) -> Result<String> {
    Ok(resolve(kernel)?.release)
}

/// Path of the extracted (compressed, bzImage) vmlinuz of the VM kernel.
pub fn vmlinuz(kernel: Kernel) -> Result<PathBuf> {
    Ok(ensure(kernel)?.vmlinuz)
}

/// Downloads and extracts the kernel unless the cache already has it.
pub fn ensure(kernel: Kernel) -> Result<KernelImage> {
    let resolved = resolve(kernel)?;
    let root = vm_dir();
    let dir = root.join(&resolved.release);
    if let Some(img) = load(kernel, &resolved, &dir)? {
        return Ok(img);
    }
    let lock = fs::File::create(root.join(".kernel.lock"))?;
    lock.lock()?;
    if let Some(img) = load(kernel, &resolved, &dir)? {
        return Ok(img);
    }
    let deb = download(&resolved, &root.join("cache"))?;
    let tmp = root.join(format!("{}.tmp-{}", resolved.release, std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    if let Err(e) = extract(&resolved, &deb, &tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&tmp, &dir)?;
    load(kernel, &resolved, &dir)?.context("kernel cache incomplete right after extraction")
}

fn load(kernel: Kernel, resolved: &Resolved, dir: &Path) -> Result<Option<KernelImage>> {
    match fs::read_to_string(dir.join("VERSION")) {
        Ok(v) if v.trim() == resolved.version => {}
        _ => return Ok(None),
    }
    let mut modules: Vec<PathBuf> =
        fs::read_dir(dir.join("modules"))?.map(|e| Ok(e?.path())).collect::<Result<_>>()?;
    modules.sort();
    Ok(Some(KernelImage {
        kernel,
        resolved: resolved.clone(),
        dir: dir.to_path_buf(),
        vmlinuz: dir.join("vmlinuz"),
        config: dir.join("config"),
        modules,
    }))
}

fn download(r: &Resolved, cache: &Path) -> Result<PathBuf> {
    fs::create_dir_all(cache)?;
    let deb = cache.join(format!("{}_{}_amd64.deb", r.package, r.version.replace(':', "%3a")));
    if deb.exists() {
        return Ok(deb);
    }
    eprintln!("[vm] downloading {} ({}) ...", r.package, r.version);
    let spec = format!("{}={}", r.package, r.version);
    let mut cmd = Command::new("apt-get");
    cmd.args(["download", "-qq", "-o", "APT::Sandbox::User=root", &spec]);
    run(cmd.current_dir(cache))?;
    ensure!(deb.exists(), "apt-get download did not produce {}", deb.display());
    Ok(deb)
}

fn extract(r: &Resolved, deb: &Path, tmp: &Path) -> Result<()> {
    eprintln!("[vm] extracting {} ...", r.release);
    let x = tmp.join("x");
    fs::create_dir_all(&x)?;
    let rel = &r.release;
    let mut patterns = vec![
        format!("./boot/vmlinuz-{rel}"),
        format!("./boot/config-{rel}"),
        format!("./lib/modules/{rel}/modules.builtin"),
    ];
    patterns.extend(MODULES.iter().map(|m| format!("./lib/modules/{rel}/kernel/*/{m}.ko*")));
    // tar exits 2 when a pattern matches nothing (a built-in module): checked below instead.
    let sh = "dpkg-deb --fsys-tarfile \"$0\" | tar -xv --wildcards -C \"$1\" \"$@\" 2>&1; true";
    let mut tar = Command::new("sh");
    let listed = output(tar.args(["-c", sh]).arg(deb).arg(&x).args(&patterns[..]))?;
    let found: Vec<PathBuf> = listed.lines().map(|l| x.join(l)).filter(|p| p.is_file()).collect();

    let vmlinuz = x.join(format!("boot/vmlinuz-{rel}"));
    ensure!(vmlinuz.exists(), "{} has no /boot/vmlinuz-{rel}", deb.display());
    fs::rename(vmlinuz, tmp.join("vmlinuz"))?;
    fs::rename(x.join(format!("boot/config-{rel}")), tmp.join("config"))?;
    let mod_root = x.join(format!("lib/modules/{rel}"));
    let builtin = fs::read_to_string(mod_root.join("modules.builtin")).unwrap_or_default();
    let out = tmp.join("modules");
    fs::create_dir_all(&out)?;
    for (i, m) in MODULES.iter().enumerate() {
        let hits: Vec<&PathBuf> = found
            .iter()
            .filter(|p| {
                let n = p.file_name().unwrap_or_default().to_string_lossy();
                n == format!("{m}.ko") || n == format!("{m}.ko.xz")
            })
            .collect();
        let Some(src) = hits.first() else {
            let is_builtin = builtin.lines().any(|l| l.rsplit('/').next() == Some(&format!("{m}.ko")));
            ensure!(is_builtin || MERGED.contains(m), "{m} is neither a module nor built into {rel}");
            continue;
        };
        ensure!(hits.len() == 1, "several {m}.ko in {}: {hits:?}", deb.display());
        let dst = out.join(format!("{i:02}-{m}.ko"));
        if src.extension().is_some_and(|e| e == "xz") {
            let mut cmd = Command::new("xz");
            run(cmd.args(["-d", "-c"]).arg(src).stdout(fs::File::create(&dst)?))?;
        } else {
            fs::rename(src, &dst)?;
        }
    }
    fs::remove_dir_all(&x)?;
    fs::write(tmp.join("VERSION"), format!("{}\n", r.version))?;
    Ok(())
}

/// Installs `linux-headers-<release>` of exactly the VM kernel's version on the host (for
/// building test modules against it) and returns `/usr/src/linux-headers-<release>`.
pub fn headers(kernel: Kernel) -> Result<PathBuf> {
    let r = resolve(kernel)?;
    let pkg = format!("linux-headers-{}", r.release);
    let dir = PathBuf::from(format!("/usr/src/{pkg}"));
    let status = Command::new("dpkg-query")
        .args(["-W", "-f=${Status} ${Version}", &pkg])
        .stderr(Stdio::null())
        .output()?;
    let status = String::from_utf8_lossy(&status.stdout);
    if status == format!("install ok installed {}", r.version) && dir.exists() {
        return Ok(dir);
    }
    eprintln!("[vm] installing {pkg}={} ...", r.version);
    let spec = format!("{pkg}={}", r.version);
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "-q", "--no-install-recommends"])
            .args(["-o", "DPkg::Lock::Timeout=300", &spec])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::io::stderr());
        run(&mut cmd)
    };
    if install().is_err() {
        eprintln!("[vm] retrying after apt-get update ...");
        run(Command::new("apt-get").args(["update", "-q"]).stdout(std::io::stderr()))?;
        install()?;
    }
    ensure!(dir.exists(), "{pkg} installed but {} is missing", dir.display());
    Ok(dir)
}

fn candidate_version(package: &str) -> Result<String> {
    let policy = output(Command::new("apt-cache").args(["policy", package]))?;
    policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(|v| v.trim().to_owned())
        .filter(|v| v != "(none)")
        .with_context(|| format!("apt has no candidate for {package} (run apt-get update?)"))
}
