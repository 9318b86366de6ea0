//! The VM's initramfs: a newc cpio archive (written here, no `cpio` tool needed) holding a
//! static busybox, the kernel modules the guest needs before it can reach the host's root
//! over 9p, the init script (`vm-init.sh`) and the per-run files:
//! - `/gdr-vm/config`: shell variables for the init script (nonce, share dir);
//! - `/gdr-vm/insmod`: extra modules to load, one host path a line;
//! - `/gdr-vm/run.sh`: runs the command in the chrooted host root (cwd, env, argv).

use anyhow::{bail, ensure, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// PID 1 of the guest.
pub const INIT: &str = include_str!("vm-init.sh");

/// `PATH` of the command in the guest.
pub const GUEST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What one VM run does once the guest is up.
pub struct GuestPlan<'a> {
    /// Printed in the console markers, so that no other output can fake them.
    pub nonce: &'a str,
    /// Seconds after the command starts at which the guest prints what every process is
    /// waiting on (a hung run then says where it hung).
    pub hang_report_after: u64,
    /// Absolute directory the command runs in (same path as on the host).
    pub cwd: &'a Path,
    /// Environment of the command, on top of PATH and HOME.
    pub env: &'a [(String, String)],
    pub cmd: &'a [String],
    /// Absolute host paths of extra modules to insmod after rdma_rxe.
    pub insmod: &'a [PathBuf],
    /// Absolute host dir mounted read-write at the same path (9p tag `hostshare`).
    pub share: &'a Path,
}

/// The host variables the guest command inherits.
pub fn allowed_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            matches!(k.as_str(), "RUST_BACKTRACE" | "RUST_LIB_BACKTRACE" | "RUST_LOG")
                || k.starts_with("GDR_")
        })
        .collect()
}

/// Builds the whole initramfs for one run (a few ms; ~15 MB, uncompressed).
pub fn build(modules: &[PathBuf], plan: &GuestPlan) -> Result<Vec<u8>> {
    let busybox = Path::new("/bin/busybox");
    let bb = fs::read(busybox).context("reading /bin/busybox (run `cargo xtask setup`)")?;
    if bb.windows(12).any(|w| w == b"/lib64/ld-li") {
        bail!("/bin/busybox is dynamically linked: install busybox-static (cargo xtask setup)");
    }
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "sys", "lower", "ovl", "newroot", "modules", "gdr-vm"] {
        c.dir(d, 0o755);
    }
    c.node("dev/console", 0o020600, 5, 1);
    c.node("dev/null", 0o020666, 1, 3);
    c.file("bin/busybox", 0o755, &bb);
    c.symlink("bin/sh", "busybox");
    c.file("init", 0o755, INIT.as_bytes());
    for m in modules {
        let name = m.file_name().context("module without a name")?;
        let data = fs::read(m).with_context(|| format!("reading {}", m.display()))?;
        c.file(&format!("modules/{}", name.to_string_lossy()), 0o644, &data);
    }
    let config = format!(
        "NONCE={}\nSHARE={}\nHANG_AFTER={}\n",
        quote(plan.nonce),
        quote(&path_str(plan.share)?),
        plan.hang_report_after
    );
    c.file("gdr-vm/config", 0o644, config.as_bytes());
    let mut insmod = String::new();
    for m in plan.insmod {
        insmod.push_str(&path_str(m)?);
        insmod.push('\n');
    }
    c.file("gdr-vm/insmod", 0o644, insmod.as_bytes());
    c.file("gdr-vm/run.sh", 0o755, run_script(plan)?.as_bytes());
    Ok(c.finish())
}

/// The script the chrooted host shell (`env -i /bin/sh`) runs: cd, env, exec.
fn run_script(plan: &GuestPlan) -> Result<String> {
    ensure!(!plan.cmd.is_empty(), "no command to run in the VM");
    let cwd = quote(&path_str(plan.cwd)?);
    let mut s = format!(
        "cd {cwd} || {{ echo \"gdr-vm: cannot cd to \"{cwd} >&2; exit 125; }}\n\
         export PATH={} HOME=/root USER=root LOGNAME=root TERM=dumb LANG=C.UTF-8\n",
        quote(GUEST_PATH)
    );
    for (k, v) in plan.env {
        let valid = k
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        ensure!(valid && !k.is_empty(), "bad environment variable name {k:?}");
        s.push_str(&format!("export {k}={}\n", quote(v)));
    }
    s.push_str("exec");
    for a in plan.cmd {
        s.push(' ');
        s.push_str(&quote(a));
    }
    s.push('\n');
    Ok(s)
}

fn path_str(p: &Path) -> Result<String> {
    let s = p.to_str().with_context(|| format!("non-UTF-8 path {p:?}"))?;
    ensure!(!s.contains('\n'), "path with a newline: {s:?}");
    Ok(s.to_owned())
}

/// Single-quotes a string for POSIX sh.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A minimal writer of "newc" (SVR4, no CRC) cpio archives, the format the kernel unpacks.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn dir(&mut self, name: &str, perm: u32) {
        self.entry(name, 0o040000 | perm, (0, 0), &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, (0, 0), data);
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, (0, 0), target.as_bytes());
    }

    /// A device node; `mode` includes the type bits (0o020000 char, 0o060000 block).
    fn node(&mut self, name: &str, mode: u32, major: u32, minor: u32) {
        self.entry(name, mode, (major, minor), &[]);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn cpio_is_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.file("x", 0o644, b"hello");
        let b = c.finish();
        assert_eq!(b.len() % 4, 0);
        assert!(b.starts_with(b"070701"));
        assert!(b.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
