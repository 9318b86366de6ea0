//! Which NVIDIA driver branch a machine runs, from `/sys/module/nvidia/version` and
//! `/sys/module/nvidia_peermem/version` (the NVRM line of `/proc/driver/nvidia/version` when
//! nvidia.ko's sysfs file can't be read), and the nvidia-peermem flow expected there.

use std::path::Path;

use super::{branch, describe, NvidiaBranch};

/// One version file: what it said, or why there is no version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reading {
    /// The file read.
    pub file: String,
    /// The version ("580.95.05").
    pub version: Option<String>,
    /// Why `version` is None: missing, unreadable, or not a version (what it said).
    pub reason: Option<String>,
}

/// The branch found and the flow expected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Detected {
    /// nvidia.ko: `/sys/module/nvidia/version`, else `/proc/driver/nvidia/version`.
    pub nvidia: Reading,
    /// `/sys/module/nvidia_peermem/version`.
    pub nvidia_peermem: Reading,
    /// The driver major version the flow follows (nvidia-peermem's when known: its code runs).
    pub branch: Option<u32>,
    /// The matrix row used: its branch and release tag.
    pub row: Option<(u32, &'static str)>,
    /// The flow expected, one line per client in ib_core's order, for the mode in force (both
    /// modes when it is unknown).
    pub expected: Vec<String>,
    /// What made the answer less than certain (no version, a branch not in the matrix, ...).
    pub reasons: Vec<String>,
}

/// A driver version: digits and dots, two or three numbers ("580.65.06", "565.77").
fn parse(text: &str) -> Option<(u32, String)> {
    let v = text.trim();
    let parts: Vec<&str> = v.split('.').collect();
    if !(2..=3).contains(&parts.len())
        || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some((parts[0].parse().ok()?, v.to_string()))
}

fn read(path: &Path) -> (Reading, Option<u32>) {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => match parse(&text) {
            Some((major, v)) => (Reading { file, version: Some(v), reason: None }, Some(major)),
            None => {
                let reason = Some(format!("{file}: not a driver version ({:?})", text.trim()));
                (Reading { file, version: None, reason }, None)
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (Reading { reason: Some(format!("{file} missing")), file, version: None }, None)
        }
        Err(e) => (Reading { reason: Some(format!("{file}: {e}")), file, version: None }, None),
    }
}

/// nvidia.ko's version from the NVRM line: "NVRM version: NVIDIA UNIX Open Kernel Module for
/// x86_64  580.65.06  Release Build ...".
fn read_nvrm(path: &Path) -> (Reading, Option<u32>) {
    let file = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return (Reading { reason: Some(format!("{file}: {e}")), file, version: None }, None),
    };
    let line = text.lines().next().unwrap_or_default();
    match line.split_whitespace().find_map(parse) {
        Some((major, v)) => (Reading { file, version: Some(v), reason: None }, Some(major)),
        None => (
            Reading { reason: Some(format!("{file}: no driver version in {line:?}")), file, version: None },
            None,
        ),
    }
}

/// Reads the versions under `sys` and `proc` (`/sys`, `/proc` on a live system) and names the
/// branch; `persistent_api_support` (nvidia-peermem's parameter, None: unknown or absent)
/// picks the mode whose flow is expected.
pub fn detect(sys: &Path, proc: &Path, persistent_api_support: Option<i32>) -> Detected {
    let (mut nvidia, mut nv_major) = read(&sys.join("module/nvidia/version"));
    if nv_major.is_none() {
        let (nvrm, major) = read_nvrm(&proc.join("driver/nvidia/version"));
        if major.is_some() {
            (nvidia, nv_major) = (nvrm, major);
        } else if let (Some(a), Some(b)) = (&nvidia.reason, &nvrm.reason) {
            nvidia.reason = Some(format!("{a}; {b}"));
        }
    }
    let (nvidia_peermem, pm_major) = read(&sys.join("module/nvidia_peermem/version"));
    let mut reasons: Vec<String> = Vec::new();
    if let (Some(n), Some(p)) = (nv_major, pm_major) {
        if n != p {
            reasons.push(format!(
                "nvidia-peermem is branch {p}, nvidia.ko {n}: the flow follows nvidia-peermem's"
            ));
        }
    }
    let major = pm_major.or(nv_major);
    let Some(major) = major else {
        reasons.extend(nvidia.reason.iter().chain(nvidia_peermem.reason.iter()).cloned());
        reasons.push("driver branch unknown: either nvidia-peermem flow may run (docs/drivers.md)".into());
        return Detected { nvidia, nvidia_peermem, branch: None, row: None, expected: both_flows(), reasons };
    };
    let Some((row, inferred)) = branch(major) else {
        reasons.push(format!("branch {major} is older than the matrix (535): flow not known"));
        return Detected {
            nvidia,
            nvidia_peermem,
            branch: Some(major),
            row: None,
            expected: vec![],
            reasons,
        };
    };
    if inferred {
        reasons.push(format!(
            "branch {major} is not in the matrix: assuming the flow of {} (read at {})",
            row.branch, row.tag
        ));
    }
    let expected = expected(row, persistent_api_support);
    Detected {
        nvidia,
        nvidia_peermem,
        branch: Some(major),
        row: Some((row.branch, row.tag)),
        expected,
        reasons,
    }
}

fn expected(row: &NvidiaBranch, persistent_api_support: Option<i32>) -> Vec<String> {
    let mode = |clients: &[super::Client], label: &str| -> Vec<String> {
        clients.iter().map(|c| format!("{label}{}", describe(c))).collect()
    };
    match (row.clients_legacy, persistent_api_support) {
        (None, _) => mode(row.clients_default, ""),
        (Some(_), Some(v)) => mode(row.clients(Some(v)), ""),
        (Some(legacy), None) => {
            let mut out = mode(row.clients_default, "persistent_api_support=1: ");
            out.extend(mode(legacy, "persistent_api_support=0: "));
            out
        }
    }
}

/// Branch unknown: the persistent client's two acquires.
fn both_flows() -> Vec<String> {
    let at = |b: u32| {
        branch(b).map(|(r, _)| format!("{} ({}+): {}", r.tag, r.branch, describe(&r.clients_default[0])))
    };
    [at(575), at(580)].into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs/procfs tree of its own: `files` are (path under the root, content).
    fn tree(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("gdr-drivers-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (p, text) in files {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::create_dir_all(root.join("sys")).unwrap();
        std::fs::create_dir_all(root.join("proc")).unwrap();
        root
    }

    fn at(name: &str, files: &[(&str, &str)], pas: Option<i32>) -> Detected {
        let root = tree(name, files);
        let d = detect(&root.join("sys"), &root.join("proc"), pas);
        std::fs::remove_dir_all(root).unwrap();
        d
    }

    #[test]
    fn a_580_node_expects_nv_mem_acquire_nc_and_a_575_node_nv_mem_acquire() {
        let d = at(
            "580",
            &[
                ("sys/module/nvidia/version", "580.95.05\n"),
                ("sys/module/nvidia_peermem/version", "580.95.05\n"),
            ],
            Some(1),
        );
        assert_eq!((d.branch, d.row), (Some(580), Some((580, "580.65.06"))));
        assert_eq!(d.nvidia.version.as_deref(), Some("580.95.05"));
        assert_eq!(
            d.expected,
            ["nv_mem: nv_mem_acquire_nc (trial nvidia_p2p_get_pages_persistent + nvidia_p2p_put_pages_persistent), nv_mem_get_pages_nc -> nvidia_p2p_get_pages_persistent"]
        );
        assert!(d.reasons.is_empty(), "{:?}", d.reasons);

        let d = at("575", &[("sys/module/nvidia_peermem/version", "575.64.05")], Some(0));
        assert_eq!(d.row, Some((575, "575.64.05")));
        assert_eq!(d.expected.len(), 2, "legacy mode: two clients {:?}", d.expected);
        assert!(
            d.expected[0].starts_with("nv_mem: nv_mem_acquire (trial nvidia_p2p_get_pages + "),
            "{:?}",
            d.expected
        );
        assert!(
            d.expected[1].starts_with("nv_mem_nc: nv_mem_acquire (trial nvidia_p2p_get_pages + "),
            "{:?}",
            d.expected
        );
        let why = d.nvidia.reason.as_deref().unwrap_or_default();
        assert!(why.contains("sys/module/nvidia/version missing; "), "{:?}", d.nvidia);
    }

    #[test]
    fn the_mode_unknown_gives_both_and_a_newer_branch_is_inferred() {
        let d = at("600", &[("sys/module/nvidia/version", "600.10.02\n")], None);
        assert_eq!((d.branch, d.row), (Some(600), Some((595, "595.45.04"))));
        assert!(d.reasons.iter().any(|r| r.contains("branch 600 is not in the matrix")), "{:?}", d.reasons);
        assert_eq!(d.expected.len(), 3, "default (1 client) + legacy (2): {:?}", d.expected);
        assert!(d.expected[0].starts_with("persistent_api_support=1: nv_mem: nv_mem_acquire_nc"));
        assert!(d.expected[2].starts_with("persistent_api_support=0: nv_mem_nc: nv_mem_acquire_nc"));

        let d = at("535", &[("sys/module/nvidia/version", "535.288.01")], Some(1));
        assert_eq!(d.expected.len(), 2, "before 560 two clients always: {:?}", d.expected);
        assert!(d.expected[1].starts_with("nv_mem_nc: nv_mem_acquire "), "{:?}", d.expected);
    }

    #[test]
    fn nvrm_line_when_sysfs_has_no_version_and_peermem_wins_a_mismatch() {
        let nvrm =
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.64.05  Release Build  (x)\nGCC\n";
        let d = at(
            "nvrm",
            &[("proc/driver/nvidia/version", nvrm), ("sys/module/nvidia_peermem/version", "580.65.06\n")],
            Some(1),
        );
        assert_eq!(d.nvidia.version.as_deref(), Some("575.64.05"));
        assert!(d.nvidia.file.ends_with("proc/driver/nvidia/version"));
        assert_eq!(d.branch, Some(580));
        assert!(d.reasons[0].contains("nvidia-peermem is branch 580, nvidia.ko 575"), "{:?}", d.reasons);
    }

    #[test]
    fn malformed_and_missing_versions_say_why() {
        let d = at(
            "bad",
            &[("sys/module/nvidia/version", "garbage\n"), ("sys/module/nvidia_peermem/version", "580.\n")],
            None,
        );
        assert_eq!(d.branch, None);
        let r = d.nvidia.reason.as_deref().unwrap();
        assert!(r.contains("module/nvidia/version: not a driver version (\"garbage\"); "), "{r}");
        assert!(r.contains("proc/driver/nvidia/version: "), "both files named: {r}");
        assert!(d.nvidia_peermem.reason.as_deref().unwrap().ends_with("not a driver version (\"580.\")"));
        assert!(d.reasons.last().unwrap().starts_with("driver branch unknown"), "{:?}", d.reasons);
        assert_eq!(d.expected.len(), 2, "both flows: {:?}", d.expected);
        assert!(d.expected[0].starts_with("575.64.05 (575+): nv_mem: nv_mem_acquire "));
        assert!(d.expected[1].starts_with("580.65.06 (580+): nv_mem: nv_mem_acquire_nc "));

        let d = at("none", &[], None);
        assert!(d
            .nvidia_peermem
            .reason
            .as_deref()
            .unwrap()
            .ends_with("module/nvidia_peermem/version missing"));
        let d = at("old", &[("sys/module/nvidia/version", "470.256.02")], None);
        assert_eq!((d.branch, d.row), (Some(470), None));
        assert!(d.reasons[0].contains("older than the matrix"), "{:?}", d.reasons);
    }
}
