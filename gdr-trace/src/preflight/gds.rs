//! GPUDirect Storage: nvidia-fs and cufile.json's `allow_compat_mode`.

use crate::parse::jsonc::strip_json_comments;
use std::path::PathBuf;

use super::finding::{ev, Finding, Status};
use super::fs::{proc_name, sys_name, Fs, PreflightError};
use super::modules::Modules;
use super::options::CufileSource;
use super::pci::PciDevice;

/// What cufile.json says (or why it could not be read).
#[derive(Debug, Clone)]
pub struct Cufile {
    pub path: PathBuf,
    /// `properties.allow_compat_mode`; `None` when unset.
    pub allow_compat_mode: Option<bool>,
    /// A parse error, reported as an `unknown` finding.
    pub error: Option<String>,
}

/// Finds and parses cufile.json. An explicit path that does not exist is an error (exit 2).
pub fn read_cufile(src: &CufileSource) -> Result<Option<Cufile>, PreflightError> {
    let path = match src {
        CufileSource::Explicit(p) => {
            if !p.is_file() {
                return Err(PreflightError::Cufile { path: p.clone(), problem: "no such file".into() });
            }
            p.clone()
        }
        CufileSource::Search(paths) => match paths.iter().find(|p| p.is_file()) {
            Some(p) => p.clone(),
            None => return Ok(None),
        },
    };
    let text = std::fs::read(&path)
        .map_err(|e| PreflightError::Cufile { path: path.clone(), problem: e.to_string() })?;
    Ok(Some(parse_cufile(path, &String::from_utf8_lossy(&text))))
}

pub fn parse_cufile(path: PathBuf, text: &str) -> Cufile {
    match serde_json::from_str::<serde_json::Value>(&strip_json_comments(text)) {
        Ok(v) => Cufile {
            path,
            allow_compat_mode: v.pointer("/properties/allow_compat_mode").and_then(|b| b.as_bool()),
            error: None,
        },
        Err(e) => Cufile {
            path,
            allow_compat_mode: None,
            error: Some(format!("not JSON even without comments: {e}")),
        },
    }
}

pub fn finding(fs: &Fs, m: &Modules, cufile: &Option<Cufile>, gpus: &[&PciDevice]) -> Finding {
    let mut evidence = vec![ev(
        sys_name("module/nvidia_fs/version"),
        m.nvidia_fs_version.clone().unwrap_or_else(|| {
            if m.nvidia_fs_loaded {
                "loaded".into()
            } else {
                "not loaded".into()
            }
        }),
    )];
    for f in ["version", "devcount"] {
        if let Some(v) = fs.proc_opt(&format!("driver/nvidia-fs/{f}")) {
            evidence.push(ev(proc_name(&format!("driver/nvidia-fs/{f}")), v));
        }
    }
    if let Some(pin) = pinning(fs, m) {
        evidence.push(pin);
    }
    if let Some(stats) = fs.proc_opt("driver/nvidia-fs/stats") {
        let head: Vec<&str> = stats.lines().filter(|l| !l.trim().is_empty()).take(4).collect();
        evidence.push(ev(proc_name("driver/nvidia-fs/stats"), head.join(" | ")));
    }
    let compat = cufile.as_ref().and_then(|c| c.allow_compat_mode);
    if let Some(c) = cufile {
        let v = match (&c.error, c.allow_compat_mode) {
            (Some(e), _) => e.clone(),
            (None, Some(b)) => format!("properties.allow_compat_mode = {b}"),
            (None, None) => "properties.allow_compat_mode not set".to_string(),
        };
        evidence.push(ev(c.path.display().to_string(), v));
    }
    let nvfs = m.nvidia_fs_loaded;
    let f = if gpus.is_empty() {
        Finding::new("gds", Status::NotApplicable, "no NVIDIA GPU")
    } else if let Some(Cufile { error: Some(_), path, .. }) = cufile {
        Finding::new("gds", Status::Unknown, format!("cannot parse {}", path.display()))
    } else if !nvfs && cufile.is_none() {
        Finding::new(
            "gds",
            Status::NotApplicable,
            "GPUDirect Storage not installed (no nvidia_fs module, no cufile.json)",
        )
    } else if nvfs && cufile.is_none() {
        Finding::new("gds", Status::Pass, "nvidia-fs loaded; no cufile.json found (cuFile defaults apply)")
    } else if nvfs && compat == Some(false) {
        Finding::new(
            "gds",
            Status::Pass,
            "nvidia-fs loaded, compatibility mode off: cuFile I/O goes NVMe -> GPU directly or fails loudly",
        )
    } else if nvfs {
        Finding::new("gds", Status::Warn, "nvidia-fs loaded, but allow_compat_mode is on: cuFile silently falls back to POSIX reads + bounce buffers when the direct path is refused")
            .hint("set \"allow_compat_mode\": false in cufile.json while validating GDS (and unset CUFILE_FORCE_COMPAT_MODE), or watch the job with gdr-trace for gds-compat verdicts")
    } else if compat == Some(false) {
        Finding::new("gds", Status::Fail, "cufile.json present but nvidia-fs is not loaded and compatibility mode is off: cuFile I/O will fail")
            .hint("modprobe nvidia-fs")
    } else {
        Finding::new("gds", Status::Fail, "nvidia-fs is not loaded: every cuFile read runs in compatibility mode (POSIX + bounce buffer), silently")
            .hint("modprobe nvidia-fs (from the GDS package matching the driver)")
    };
    f.evidence(evidence)
}

/// How nvidia-fs pins GPU memory here: its parameter as it chose it at load, else what its
/// release's `nvfs_init` chooses with this driver on this CPU (`drivers::NVFS_RELEASES`).
fn pinning(fs: &Fs, m: &Modules) -> Option<super::finding::Evidence> {
    let api = |legacy: bool| {
        if legacy {
            "legacy: nvidia_p2p_get_pages with a free callback"
        } else {
            "persistent: nvidia_p2p_get_pages_persistent, no free callback"
        }
    };
    let param = "module/nvidia_fs/parameters/use_legacy_p2p_allocation";
    if let Some(v) = fs.sys_opt(param).and_then(|v| v.trim().parse::<u32>().ok()) {
        return Some(ev(sys_name(param), format!("{v} ({})", api(v != 0))));
    }
    let version = m.nvidia_fs_version.as_deref()?;
    let release = crate::drivers::NvfsRelease::of(version)?;
    let driver = m.nvidia_version.as_deref().and_then(|v| v.split('.').next()?.parse().ok());
    let guest = fs
        .proc_opt("cpuinfo")
        .map(|c| c.lines().any(|l| l.starts_with("flags") && l.contains(" hypervisor")));
    let legacy = release.legacy_pinning(driver, guest)?;
    Some(ev(
        sys_name("module/nvidia_fs/version"),
        format!("{version}: nvfs_init chooses {} ({:?})", api(legacy), release.pinning),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_comments_and_trailing_commas_but_not_strings() {
        let text = r#"{
            // a comment with "quotes"
            "logging": { "dir": "/var/log//cufile" /* inline */ },
            "properties": {
                "allow_compat_mode": false, // trailing
            },
        }"#;
        let c = parse_cufile(PathBuf::from("x"), text);
        assert_eq!(c.error, None);
        assert_eq!(c.allow_compat_mode, Some(false));
        let s = strip_json_comments(text);
        assert!(s.contains("/var/log//cufile"));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let c = parse_cufile(PathBuf::from("x"), "{ \"properties\": ");
        assert!(c.error.is_some());
        let c = parse_cufile(PathBuf::from("x"), "/* unterminated");
        assert!(c.error.is_some());
    }
}
