//! Root-relative reads of sysfs and procfs, with logical (`/sys/...`) names for evidence.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why preflight could not run at all (exit code 2). Everything else becomes a finding.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{what} {path} does not exist")]
    NoRoot { what: &'static str, path: PathBuf },
    #[error("{path} does not look like a sysfs tree (no bus/ or devices/ in it)")]
    NotSysfs { path: PathBuf },
    #[error("malformed sysfs/procfs file {path}: expected {expected}, got {value:?}")]
    Malformed { path: String, expected: &'static str, value: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cufile.json {path}: {problem}")]
    Cufile { path: PathBuf, problem: String },
}

/// The two roots, and reads under them.
#[derive(Debug, Clone)]
pub struct Fs {
    sys: PathBuf,
    proc: PathBuf,
}

impl Fs {
    /// Checks that the roots exist and that the sysfs root looks like sysfs.
    pub fn new(sys: &Path, proc: &Path) -> Result<Self, PreflightError> {
        if !sys.is_dir() {
            return Err(PreflightError::NoRoot { what: "sysfs root", path: sys.to_path_buf() });
        }
        if !proc.is_dir() {
            return Err(PreflightError::NoRoot { what: "procfs root", path: proc.to_path_buf() });
        }
        if !sys.join("bus").is_dir() && !sys.join("devices").is_dir() {
            return Err(PreflightError::NotSysfs { path: sys.to_path_buf() });
        }
        Ok(Self { sys: normalize(sys), proc: normalize(proc) })
    }

    pub fn sys_root(&self) -> &Path {
        &self.sys
    }

    /// Real path of a sysfs-relative path (`bus/pci/devices`).
    pub fn sys(&self, rel: &str) -> PathBuf {
        self.sys.join(rel)
    }

    /// Real path of a procfs-relative path (`cmdline`).
    pub fn proc(&self, rel: &str) -> PathBuf {
        self.proc.join(rel)
    }

    /// A sysfs file's text, trimmed; `Ok(None)` when it does not exist.
    pub fn read_sys(&self, rel: &str) -> Result<Option<String>, PreflightError> {
        read_text(&self.sys(rel), &sys_name(rel))
    }

    /// A procfs file's text, trimmed; `Ok(None)` when it does not exist.
    pub fn read_proc(&self, rel: &str) -> Result<Option<String>, PreflightError> {
        read_text(&self.proc(rel), &proc_name(rel))
    }

    /// A sysfs file's text, or `None` if missing or unreadable (for optional evidence).
    pub fn sys_opt(&self, rel: &str) -> Option<String> {
        self.read_sys(rel).ok().flatten()
    }

    /// A procfs file's text, or `None` if missing or unreadable.
    pub fn proc_opt(&self, rel: &str) -> Option<String> {
        self.read_proc(rel).ok().flatten()
    }

    /// Names in a sysfs directory, sorted; empty if it does not exist.
    pub fn list_sys(&self, rel: &str) -> Vec<String> {
        list_dir(&self.sys(rel))
    }

    /// Names in a procfs directory, sorted; empty if it does not exist.
    pub fn list_proc(&self, rel: &str) -> Vec<String> {
        list_dir(&self.proc(rel))
    }

    pub fn sys_exists(&self, rel: &str) -> bool {
        self.sys(rel).exists()
    }

    pub fn proc_exists(&self, rel: &str) -> bool {
        self.proc(rel).exists()
    }

    /// Resolves a symlink under sysfs to a sysfs-relative path (lexically, as the kernel lays the
    /// links out: `bus/pci/devices/X -> ../../../devices/pci0000:00/.../X`). `None` if `rel` is
    /// not a symlink or points outside the root.
    pub fn resolve_sys_link(&self, rel: &str) -> Option<String> {
        let path = self.sys(rel);
        let target = std::fs::read_link(&path).ok()?;
        let joined = if target.is_absolute() {
            // A captured tree may keep absolute links (/sys/devices/...): re-root them.
            let t = target.strip_prefix("/sys").ok()?;
            self.sys.join(t)
        } else {
            path.parent()?.join(target)
        };
        let norm = normalize(&joined);
        let rel = norm.strip_prefix(&self.sys).ok()?;
        Some(rel.to_string_lossy().into_owned())
    }

    /// The last component of a symlink's target (`driver -> .../drivers/nvidia` gives `nvidia`).
    pub fn link_name(&self, rel: &str) -> Option<String> {
        let target = std::fs::read_link(self.sys(rel)).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// Raw bytes of a sysfs file (config space). `Err` carries the io error kind for reporting.
    pub fn read_sys_bytes(&self, rel: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.sys(rel))
    }
}

/// `/sys/<rel>`, the name evidence uses.
pub fn sys_name(rel: &str) -> String {
    format!("/sys/{rel}")
}

/// `/proc/<rel>`, the name evidence uses.
pub fn proc_name(rel: &str) -> String {
    format!("/proc/{rel}")
}

fn read_text(path: &Path, name: &str) -> Result<Option<String>, PreflightError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PreflightError::Io { path: name.to_string(), source: e }),
    }
}

fn list_dir(path: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut names: Vec<String> =
        rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Lexical normalization: removes `.` and resolves `..` against the preceding component.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Parses a sysfs hex value such as `0x10de` or `0x030200`.
pub fn parse_hex(name: &str, value: &str) -> Result<u32, PreflightError> {
    let digits = value.trim().trim_start_matches("0x").trim_start_matches("0X");
    u32::from_str_radix(digits, 16).map_err(|_| PreflightError::Malformed {
        path: name.to_string(),
        expected: "a hex number like 0x10de",
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_parent_components() {
        let p = normalize(Path::new("/sys/bus/pci/devices/../../../devices/pci0000:00/0000:00:01.0"));
        assert_eq!(p, PathBuf::from("/sys/devices/pci0000:00/0000:00:01.0"));
    }

    #[test]
    fn parse_hex_accepts_sysfs_forms_and_rejects_garbage() {
        assert_eq!(parse_hex("v", "0x10de").unwrap(), 0x10de);
        assert_eq!(parse_hex("v", "0x030200\n").unwrap(), 0x030200);
        let err = parse_hex("/sys/x/vendor", "zz").unwrap_err().to_string();
        assert!(err.contains("/sys/x/vendor") && err.contains("hex"), "{err}");
    }
}
