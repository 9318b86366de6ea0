//! Filesystem modules for the storage VM tests: ext4 (with what it needs) and loop, from the
//! same Debian kernel package the VM boots. The VM's root is 9p over tmpfs, which has neither a
//! block device nor O_DIRECT; with these a test can mkfs.ext4 an image and loop-mount it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use crate::{
    kernel::{self, vm_dir, Kernel},
    setup::run,
};

/// In load order (`modinfo -F depends` of ext4: jbd2, mbcache, crc16; crc32c for its checksums).
pub const MODULES: &[&str] = &["crc16", "mbcache", "jbd2", "crc32c_generic", "ext4", "loop"];

/// Plain `.ko` files of [`MODULES`] for the VM kernel, extracted once into
/// `target/vm/<release>/fs/`. Modules the kernel has built in are left out.
pub fn ensure(kernel: Kernel) -> Result<Vec<PathBuf>> {
    let img = kernel::ensure(kernel)?;
    let dir = img.dir.join("fs");
    if !dir.join("DONE").exists() {
        extract(&img.resolved.package, &img.resolved.release, &dir)?;
    }
    let mut out = Vec::new();
    for (i, m) in MODULES.iter().enumerate() {
        let p = dir.join(format!("{i:02}-{m}.ko"));
        if p.exists() {
            out.push(p);
        }
    }
    Ok(out)
}

/// `GDR_STORAGE_KMODS`: the modules, colon-separated, for the VM tests to load.
pub fn env(kernel: Kernel) -> Result<(String, String)> {
    let mods: Vec<String> = ensure(kernel)?.iter().map(|p| p.display().to_string()).collect();
    Ok(("GDR_STORAGE_KMODS".into(), mods.join(":")))
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

fn extract(package: &str, release: &str, dir: &Path) -> Result<()> {
    let deb = deb_of(package)?;
    eprintln!("[vm] extracting filesystem modules for {release} ...");
    let tmp = dir.with_extension("tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let patterns: Vec<String> =
        MODULES.iter().map(|m| format!("./lib/modules/{release}/kernel/*/{m}.ko*")).collect();
    // tar exits 2 when a pattern matches nothing (a built-in module): checked below instead.
    let sh = "dpkg-deb --fsys-tarfile \"$0\" | tar -x --wildcards -C \"$1\" \"$@\" 2>/dev/null; true";
    run(Command::new("sh").args(["-c", sh]).arg(&deb).arg(&tmp).args(&patterns))?;
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    let found = walk(&tmp);
    for (i, m) in MODULES.iter().enumerate() {
        let Some(src) = found.iter().find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n == format!("{m}.ko") || n == format!("{m}.ko.xz")
        }) else {
            continue;
        };
        let dst = dir.join(format!("{i:02}-{m}.ko"));
        if src.extension().is_some_and(|e| e == "xz") {
            run(Command::new("xz").args(["-d", "-c"]).arg(src).stdout(fs::File::create(&dst)?))?;
        } else {
            fs::copy(src, &dst)?;
        }
    }
    ensure!(dir.join("04-ext4.ko").exists(), "{} has no ext4 module", deb.display());
    fs::remove_dir_all(&tmp)?;
    fs::write(dir.join("DONE"), "")?;
    Ok(())
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
