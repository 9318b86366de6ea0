//! `check` names the NVIDIA driver branch (docs/drivers.md) from the fixture tree's
//! `/sys/module/nvidia/version` and `/sys/module/nvidia_peermem/version`.

use super::*;

/// rail-pix with its driver and nvidia-peermem versions replaced.
fn versions_of(nvidia: &str, peermem: &str) -> tempfile::TempDir {
    let tmp = check::variant(|_| {});
    std::fs::write(tmp.path().join("sys/module/nvidia/version"), nvidia).unwrap();
    std::fs::write(tmp.path().join("sys/module/nvidia_peermem/version"), peermem).unwrap();
    tmp
}

fn evidence_values(f: &Value, path: &str) -> Vec<String> {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["path"] == path)
        .map(|e| e["value"].to_string())
        .collect()
}

#[test]
fn versions_name_the_branch_and_its_claiming_acquire() {
    for (version, branch, acquire) in [
        ("580.95.05\n", 580, "nv_mem_acquire_nc"),
        ("575.64.05\n", 575, "nv_mem_acquire"),
        ("560.35.03\n", 560, "nv_mem_acquire"),
    ] {
        let tmp = versions_of(version, version);
        let (out, j) = check_json(tmp.path(), &[]);
        assert_eq!(out.code, 0, "{}", out.stdout);
        let f = finding(&j, "versions");
        let summary = f["summary"].as_str().unwrap();
        let want = format!("(branch {branch}: nvidia-peermem's default client claims with {acquire})");
        assert!(summary.contains(&want), "{summary}");
        // persistent_api_support=1 in the tree: the default mode's one client.
        let flows = evidence_values(f, "expected peer flow");
        assert_eq!(flows.len(), 1, "{f}");
        assert!(flows[0].contains(&format!("nv_mem: {acquire} (trial")), "{f}");
    }
}

#[test]
fn a_malformed_driver_version_leaves_the_branch_unknown_with_a_reason() {
    let tmp = versions_of("not-a-version\n", "not-a-version\n");
    // Without it, nvidia.ko's version comes from the NVRM line instead.
    std::fs::remove_file(tmp.path().join("proc/driver/nvidia/version")).unwrap();
    let (_, j) = check_json(tmp.path(), &[]);
    let f = finding(&j, "versions");
    assert!(f["summary"].as_str().unwrap().contains("branch unknown"), "{f}");
    let why = evidence_values(f, "driver branch").join(" ");
    assert!(why.contains("module/nvidia/version: not a driver version (\\\"not-a-version\\\")"), "{why}");
    assert!(why.contains("module/nvidia_peermem/version: not a driver version"), "{why}");
    assert_eq!(evidence_values(f, "expected peer flow").len(), 2, "both flows, 575 and 580: {f}");
}
