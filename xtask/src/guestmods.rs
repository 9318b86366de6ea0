//! Extra kernel modules some VM tests load themselves, from the same Debian kernel package the
//! VM boots, each set extracted once into `target/vm/<release>/<dir>/` and named to the tests
//! by an environment variable (paths, colon-separated, in load order):
//! - [`STORAGE`]: ext4 (with what it needs) and loop. The VM's root is 9p over tmpfs, which has
//!   neither a block device nor O_DIRECT; with these a test can mkfs.ext4 an image and mount it.
//! - [`RDMA_CM`]: the RDMA connection manager (`/dev/infiniband/rdma_cm`) and a dummy netdev.
//!   Programs that connect through RDMA CM (rping, libfabric's verbs provider) need both: CM
//!   cannot resolve a route to 127.0.0.1 on an rxe over lo, so the tests put a second rxe on a
//!   dummy netdev whose address exists only inside the guest.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use crate::{
    kernel::{self, vm_dir, Kernel},
    sh::run,
};

/// One set of modules.
pub struct Set {
    /// Directory under `target/vm/<release>/`.
    dir: &'static str,
    /// In load order (`modinfo -F depends`); those the kernel has built in are left out.
    modules: &'static [&'static str],
    /// The environment variable the tests read.
    env: &'static str,
    /// A module the set is useless without: extraction fails if the package lacks it.
    required: &'static str,
}

/// ext4 needs jbd2, mbcache, crc16 (and crc32c for its checksums); squashfs (a compat-only
/// filesystem for the GDS-mode tests) needs nothing more in Debian's builds (its decompressors
/// are built in).
pub const STORAGE: Set = Set {
    dir: "fs",
    modules: &["crc16", "mbcache", "jbd2", "crc32c_generic", "ext4", "loop", "squashfs"],
    env: "GDR_STORAGE_KMODS",
    required: "ext4",
};

/// rdma_cm needs configfs, iw_cm and ib_cm; rdma_ucm (the device node) needs rdma_cm.
pub const RDMA_CM: Set = Set {
    dir: "rdma_cm",
    modules: &["configfs", "iw_cm", "ib_cm", "rdma_cm", "rdma_ucm", "dummy"],
    env: "GDR_RDMACM_KMODS",
    required: "rdma_ucm",
};

/// Every set's variable, for a VM run.
pub fn env(kernel: Kernel) -> Result<Vec<(String, String)>> {
    [&STORAGE, &RDMA_CM].iter().map(|s| s.env(kernel)).collect()
}

impl Set {
    /// Plain `.ko` files of the set for the VM kernel, extracted on first use.
    pub fn ensure(&self, kernel: Kernel) -> Result<Vec<PathBuf>> {
        let img = kernel::ensure(kernel)?;
        let dir = img.dir.join(self.dir);
        // DONE names the modules extracted: a set that grew is extracted again.
        if fs::read_to_string(dir.join("DONE")).ok().as_deref() != Some(&self.modules.join(" ")) {
            self.extract(&img.resolved.package, &img.resolved.release, &dir)?;
        }
        let mut out = Vec::new();
        for (i, m) in self.modules.iter().enumerate() {
            let p = dir.join(format!("{i:02}-{m}.ko"));
            if p.exists() {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// `(variable, paths)` for the VM tests.
    pub fn env(&self, kernel: Kernel) -> Result<(String, String)> {
        let mods: Vec<String> = self.ensure(kernel)?.iter().map(|p| p.display().to_string()).collect();
        Ok((self.env.into(), mods.join(":")))
    }

    fn extract(&self, package: &str, release: &str, dir: &Path) -> Result<()> {
        let deb = deb_of(package)?;
        eprintln!("[vm] extracting the {} modules for {release} ...", self.dir);
        let tmp = dir.with_extension("tmp");
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp)?;
        let patterns: Vec<String> =
            self.modules.iter().map(|m| format!("./lib/modules/{release}/kernel/*/{m}.ko*")).collect();
        // tar exits 2 when a pattern matches nothing (a built-in module): checked below instead.
        let sh = "dpkg-deb --fsys-tarfile \"$0\" | tar -x --wildcards -C \"$1\" \"$@\" 2>/dev/null; true";
        run(Command::new("sh").args(["-c", sh]).arg(&deb).arg(&tmp).args(&patterns))?;
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir)?;
        let found = walk(&tmp);
        let mut have_required = false;
        for (i, m) in self.modules.iter().enumerate() {
            let Some(src) = found.iter().find(|p| {
                let n = p.file_name().unwrap_or_default().to_string_lossy();
                n == format!("{m}.ko") || n == format!("{m}.ko.xz")
            }) else {
                continue;
            };
            have_required |= *m == self.required;
            let dst = dir.join(format!("{i:02}-{m}.ko"));
            if src.extension().is_some_and(|e| e == "xz") {
                run(Command::new("xz").args(["-d", "-c"]).arg(src).stdout(fs::File::create(&dst)?))?;
            } else {
                fs::copy(src, &dst)?;
            }
        }
        ensure!(have_required, "{} has no {} module", deb.display(), self.required);
        fs::remove_dir_all(&tmp)?;
        fs::write(dir.join("DONE"), self.modules.join(" "))?;
        Ok(())
    }
}

fn deb_of(package: &str) -> Result<PathBuf> {
    let cache = vm_dir().join("cache");
    fs::read_dir(&cache)
        .with_context(|| format!("reading {}", cache.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(&format!("{package}_")) && n.ends_with(".deb")
        })
        .with_context(|| format!("no {package}_*.deb in {}", cache.display()))
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
