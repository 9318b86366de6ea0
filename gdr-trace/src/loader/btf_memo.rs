//! What the kernel's BTF answered (field offsets, function type ids), remembered for the rest of
//! the boot in one root-only file, so that the next start need not parse vmlinux BTF at all.
//! Kernels whose sysfs BTF cannot be mapped (before 6.16: most GPU nodes) make every start parse
//! it whole, about 5 MB: 0.5 s and more of CPU in an emulated VM, which is most of what a
//! restarted DaemonSet pod or a second `attach` would spend on it.
//!
//! vmlinux BTF cannot change within a boot, so its answers are keyed by the boot id (and the
//! BTF's size); a module's BTF can (a driver reloaded, upgraded), so its answers are keyed by a
//! hash of that module's BTF bytes, read each time (kilobytes). A file that is not ours in every
//! way (owner, mode, a symlink, too big, another boot or build) is ignored, never trusted.

use std::{
    collections::BTreeMap,
    fs::{DirBuilder, OpenOptions},
    hash::{Hash, Hasher},
    io::{Read, Write},
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// Where start-ups remember: /run is a per-boot tmpfs on systemd hosts and in containers (the
/// DaemonSet mounts an emptyDir at /run/gdr-trace). The last directory is gdr-trace's own, 0700.
pub const DEFAULT_PATH: &str = "/run/gdr-trace/btf/memo.json";

/// A memo file bigger than this is not ours.
const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
struct Stored {
    build: String,
    boot: String,
    vmlinux_bytes: u64,
    answers: BTreeMap<String, Option<u32>>,
}

/// The answers of this boot: those read from the file, and those found since (saved once).
#[derive(Debug)]
pub struct Memo {
    path: Option<PathBuf>,
    stored: Stored,
    /// Whether the file's answers were this boot's (read and valid).
    pub loaded: bool,
    dirty: bool,
}

/// The questions' meaning may change between versions; the answers are the kernel's.
fn build() -> String {
    format!("gdr-trace {} memo 2", env!("CARGO_PKG_VERSION"))
}

impl Memo {
    /// No file: every answer is looked up (tests, a kernel without BTF).
    pub fn none() -> Self {
        Self { path: None, stored: Stored::default(), loaded: false, dirty: false }
    }

    /// The memo at `path` for this boot and this vmlinux BTF, or an empty one (saved to `path`).
    pub fn open(path: &Path, boot: &str, vmlinux_bytes: u64) -> Self {
        let key = Stored { build: build(), boot: boot.to_string(), vmlinux_bytes, answers: BTreeMap::new() };
        let read = read_private(path)
            .and_then(|text| serde_json::from_slice::<Stored>(&text).map_err(|e| e.to_string()));
        let (stored, loaded) = match read {
            Ok(s) if (&s.build, &s.boot, s.vmlinux_bytes) == (&key.build, &key.boot, key.vmlinux_bytes) => {
                (s, true)
            }
            Ok(_) => {
                tracing::debug!("BTF memo {} is of another boot or build: not used", path.display());
                (key, false)
            }
            Err(e) => {
                tracing::debug!("BTF memo {} not used: {e}", path.display());
                (key, false)
            }
        };
        Self { path: Some(path.to_path_buf()), stored, loaded, dirty: false }
    }

    /// The remembered answer to `question` (Some(None): remembered as not there).
    pub fn known(&self, question: &str) -> Option<Option<u32>> {
        self.stored.answers.get(question).copied()
    }

    /// Remembers `answer` to `question` (saved by `save`).
    pub fn remember(&mut self, question: String, answer: Option<u32>) {
        self.stored.answers.insert(question, answer);
        self.dirty = true;
    }

    /// Writes the answers found since the memo was read, where the memo has a path and
    /// anything new; failures only cost the next start its shortcut.
    pub fn save(&mut self) {
        let Some(path) = self.path.as_deref().filter(|_| self.dirty) else { return };
        match write_private(path, &serde_json::to_vec(&self.stored).unwrap_or_default()) {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::debug!("BTF memo {} not saved: {e}", path.display()),
        }
    }
}

/// This boot's id (/proc/sys/kernel/random/boot_id).
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty())
}

/// A hash of a module's BTF bytes (its answers are valid while the module's BTF is the same).
pub fn bytes_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Ours: owned by this user, writable by no one else.
fn private(meta: &std::fs::Metadata) -> bool {
    meta.uid() == euid() && meta.mode() & 0o022 == 0
}

fn read_private(path: &Path) -> Result<Vec<u8>, String> {
    let dir = path.parent().ok_or("no directory")?;
    let dmeta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !dmeta.is_dir() || !private(&dmeta) {
        return Err(format!("{} is not a directory of this user's that only it can write", dir.display()));
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || !private(&meta) || meta.len() > MAX_BYTES {
        return Err("not a small regular file of this user's that only it can write".into());
    }
    let mut text = Vec::new();
    f.take(MAX_BYTES).read_to_end(&mut text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// Writes `bytes` to a new file beside `path` (0600, never through a symlink), then renames it
/// over `path`: a reader sees the old memo or the new one, never half of one.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("no directory")?;
    DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| e.to_string())?;
    let dmeta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !dmeta.is_dir() || !private(&dmeta) {
        return Err(format!("{} is not a directory of this user's that only it can write", dir.display()));
    }
    let tmp = dir.join(format!(".memo.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = crate::outfile::create_private(&tmp, "BTF memo").map_err(|e| e.to_string())?;
    let written = f.write_all(bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
