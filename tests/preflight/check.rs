//! `check` on the fixture trees, generated variants, broken input and this machine.

use super::*;

// ---------------------------------------------------------------- (a) rail-optimized, all good

#[test]
fn rail_pix_passes_everything() {
    let (out, j) = check_json(&machine("rail-pix"), &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(
        statuses(&j),
        expect(&[
            ("gpus", "pass"),
            ("rdma-nics", "pass"),
            ("driver", "pass"),
            ("peermem", "pass"),
            ("memory-peers", "pass"),
            ("dmabuf", "pass"),
            ("versions", "pass"),
            ("topology", "pass"),
            ("acs", "pass"),
            // 8 GPUs on 8 host bridges: P2P crosses the CPU unless NVLink (unknown here) carries it.
            ("gpu-p2p", "warn"),
            ("iommu", "pass"),
            ("bar1", "pass"),
            ("link", "pass"),
            ("gds", "pass"),
            ("gds-mounts", "unknown"),
            ("peer-mapping", "pass"),
        ])
    );
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(j["nics"].as_array().unwrap().len(), 8, "the onboard I210 is neither RDMA nor Mellanox");
    assert_eq!(j["pairs"].as_array().unwrap().len(), 64);
    let d = distances(&j);
    for g in 0..8u64 {
        for n in 0..8u64 {
            let want = if g == n {
                "PIX"
            } else if g / 4 == n / 4 {
                "NODE"
            } else {
                "SYS"
            };
            assert_eq!(d[&(g, format!("mlx5_{n}"))], want, "GPU {g} - mlx5_{n}");
        }
    }
    let p0 = &j["pairs"][0];
    assert_eq!(p0["gpu"], "0000:18:00.0");
    assert_eq!(p0["nic"], "0000:19:00.0");
    assert_eq!(p0["common_bridge"], "0000:16:00.0");
    assert_eq!(p0["ports"], serde_json::json!(["0000:17:00.0", "0000:17:01.0"]));
    assert_eq!(p0["nearest"], true);
    assert_eq!(p0["nccl_gdr"], true);
    assert_eq!(j["gpus"][0]["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(j["gpus"][7]["bridges"], serde_json::json!(["0000:ca:01.0", "0000:cb:00.0", "0000:cc:00.0"]));
    assert!(finding(&j, "peermem")["summary"].as_str().unwrap().contains("560.35.03"));
    assert!(finding(&j, "acs")["evidence"][0]["value"].as_str().unwrap().contains("ctl 0x0000"));
    assert!(finding(&j, "iommu")["summary"].as_str().unwrap().contains("passthrough"));
    assert!(finding(&j, "bar1")["summary"].as_str().unwrap().contains("128 GiB"));
}

#[test]
fn json_shape() {
    let (_, j) = check_json(&machine("rail-pix"), &[]);
    assert_eq!(j["schema"], "gdr-trace.check/1");
    for k in [
        "sysfs_root",
        "proc_root",
        "nccl_net_gdr_level",
        "status",
        "exit_code",
        "counts",
        "gpus",
        "nics",
        "pairs",
        "gpu_pairs",
        "findings",
    ] {
        assert!(j.get(k).is_some(), "missing {k}");
    }
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PXB");
    assert_eq!(j["nccl_net_gdr_level"]["source"], "flag");
    // Every GPUDirect RDMA/Storage check passes; only gpu-p2p warns (NVLink unknown in a capture).
    assert_eq!(j["status"], "warn");
    assert_eq!(j["counts"]["warn"], 1);
    assert_eq!(j["exit_code"], 0);
    assert_eq!(j["counts"]["pass"], 14);
    for k in ["index", "bdf", "id", "model", "numa_node", "host_bridge", "bridges", "driver"] {
        assert!(j["gpus"][0].get(k).is_some(), "gpus[].{k}");
    }
    for k in
        ["bdf", "id", "ib_devices", "net_devices", "rdma", "numa_node", "host_bridge", "bridges", "driver"]
    {
        assert!(j["nics"][0].get(k).is_some(), "nics[].{k}");
    }
    for k in [
        "gpu_index",
        "gpu",
        "nic",
        "ib_device",
        "distance",
        "common_bridge",
        "ports",
        "bridges",
        "nccl_gdr",
        "nearest",
    ] {
        assert!(j["pairs"][0].get(k).is_some(), "pairs[].{k}");
    }
    let f = &j["findings"][0];
    for k in ["id", "status", "summary", "evidence", "hint"] {
        assert!(f.get(k).is_some(), "findings[].{k}");
    }
    assert!(f["evidence"][0]["path"].as_str().unwrap().starts_with("/sys/"));
    assert!(f["evidence"][0].get("value").is_some());
}

// ---------------------------------------------------------------- (b) everything wrong

#[test]
fn cross_socket_fails_where_it_should() {
    let (out, j) = check_json(&machine("cross-socket"), &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(
        statuses(&j),
        expect(&[
            ("gpus", "pass"),
            ("rdma-nics", "pass"),
            ("driver", "pass"),
            ("peermem", "fail"),
            ("memory-peers", "not-applicable"),
            ("dmabuf", "fail"),
            ("versions", "pass"),
            ("topology", "fail"),
            ("acs", "fail"),
            ("gpu-p2p", "warn"),
            ("iommu", "fail"),
            ("bar1", "pass"),
            ("link", "pass"),
            ("gds", "fail"),
            ("gds-mounts", "unknown"),
            ("peer-mapping", "warn"),
        ])
    );
    // mlx5_N follow bus order: rail 7's NIC (moved to socket 0, bus 6b) is mlx5_4, and rails
    // 4-6's NICs are mlx5_5..7.
    let d = distances(&j);
    let pix = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (5, 6), (6, 7)];
    for g in 0..8u64 {
        for n in 0..8u64 {
            let gpu_node = g / 4;
            let nic_node = if n <= 4 { 0 } else { 1 };
            let want = if pix.contains(&(g, n)) {
                "PIX"
            } else if gpu_node == nic_node {
                "NODE"
            } else {
                "SYS"
            };
            assert_eq!(d[&(g, format!("mlx5_{n}"))], want, "GPU {g} - mlx5_{n}");
        }
    }
    assert_eq!(d[&(7, "mlx5_4".to_string())], "SYS");
    let topo = finding(&j, "topology");
    assert!(
        topo["summary"].as_str().unwrap().starts_with(
            "1 of 8 GPU(s) have no RDMA NIC within PXB: GPU 7 (0000:cd:00.0) nearest mlx5_5 is NODE"
        ),
        "{}",
        topo["summary"]
    );
    let acs = finding(&j, "acs");
    assert!(
        acs["summary"].as_str().unwrap().starts_with("ACS redirect (RR/CR) on 14 port(s)"),
        "{}",
        acs["summary"]
    );
    assert!(acs["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["value"].as_str().unwrap().contains("ctl 0x001d [SV RR CR UF]")));
    assert!(finding(&j, "iommu")["summary"].as_str().unwrap().contains("(DMA)"));
    assert!(finding(&j, "dmabuf")["evidence"][1]["value"].as_str().unwrap().contains("535.183.01"));
    assert!(finding(&j, "gds")["summary"].as_str().unwrap().contains("compatibility mode"));
    assert!(finding(&j, "peermem")["hint"].as_str().unwrap().contains("modprobe nvidia-peermem"));
}

#[test]
fn gdr_level_changes_the_topology_verdict() {
    let dir = machine("cross-socket");
    let (_, j) = check_json(&dir, &["--nccl-gdr-level", "SYS"]);
    assert_eq!(statuses(&j)["topology"], "pass");
    let (_, j) = check_json(&dir, &["--nccl-gdr-level", "3"]);
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PHB");
    assert_eq!(statuses(&j)["topology"], "pass", "NODE counts as PHB for NCCL");
    let (out, j) = check_json(&machine("rail-pix"), &["--nccl-gdr-level", "LOC"]);
    assert_eq!(out.code, 1);
    assert_eq!(statuses(&j)["topology"], "fail");
    let (_, j) = check_json(&machine("rail-pix"), &["--nccl-gdr-level", "1"]);
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PIX");
    assert_eq!(statuses(&j)["topology"], "pass");
}

// ---------------------------------------------------------------- (c) no GPU

#[test]
fn no_gpu_is_not_applicable_and_exits_0() {
    let (out, j) = check_json(&machine("no-gpu"), &[]);
    assert_eq!(out.code, 0);
    assert!(statuses(&j).values().all(|s| s == "not-applicable"), "{:?}", statuses(&j));
    assert_eq!(j["status"], "not-applicable");
    assert_eq!(j["nics"][0]["ib_devices"], serde_json::json!(["irdma0"]));
    let mut args = roots(&machine("no-gpu"));
    args.push("--nccl-gdr-level=PXB".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = check(&a);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("No NVIDIA GPU on this machine"), "{}", text.stdout);
    assert!(text
        .stdout
        .contains("16 checks: 0 pass, 0 warn, 0 fail, 0 unknown, 16 not-applicable -> exit 0"));
}

// ---------------------------------------------------------------- variants built at test time

pub(crate) fn variant(f: impl FnOnce(&mut spec::Spec)) -> tempfile::TempDir {
    let mut spec = machines::rail_pix();
    f(&mut spec);
    let tmp = tempfile::tempdir().unwrap();
    machines::build(&spec, tmp.path()).unwrap();
    tmp
}

#[test]
fn short_config_is_unknown_needs_root() {
    let tmp = variant(|s| s.short_config = true);
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0);
    let acs = finding(&j, "acs");
    assert_eq!(acs["status"], "unknown");
    assert!(acs["summary"].as_str().unwrap().contains("needs root"));
    assert!(acs["evidence"][0]["value"].as_str().unwrap().contains("only 64 bytes"));
}

#[test]
fn small_bar1_and_narrow_link_warn() {
    let tmp = variant(|s| {
        s.bar1 = 256 << 20;
        s.narrow_nic = Some(2);
    });
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0, "warnings do not fail");
    assert_eq!(statuses(&j)["bar1"], "warn");
    assert!(finding(&j, "bar1")["summary"].as_str().unwrap().contains("256 MiB"));
    assert_eq!(statuses(&j)["link"], "warn");
    assert!(finding(&j, "link")["summary"].as_str().unwrap().contains("0000:4c:00.0 x8/x16"));
}

#[test]
fn peermem_missing_with_dmabuf_only_warns() {
    let tmp = variant(|s| s.peermem = false);
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0);
    assert_eq!(statuses(&j)["peermem"], "warn");
    assert_eq!(statuses(&j)["dmabuf"], "pass");
}

#[test]
fn cufile_json_flag_and_compat_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("cufile.json");
    std::fs::write(&p, "{ \"properties\": { \"allow_compat_mode\": true, } }").unwrap();
    let (out, j) = check_json(&machine("rail-pix"), &["--cufile-json", p.to_str().unwrap()]);
    assert_eq!(out.code, 0);
    assert_eq!(statuses(&j)["gds"], "warn");
    std::fs::write(&p, "{ \"properties\": ").unwrap();
    let (_, j) = check_json(&machine("rail-pix"), &["--cufile-json", p.to_str().unwrap()]);
    assert_eq!(statuses(&j)["gds"], "unknown");
}

/// The runner's CUFILE_ENV_PATH_JSON names this machine's cufile.json: a captured tree is read
/// from its own etc/ whatever the environment says (the binary, so the environment is its own).
#[test]
fn a_captured_tree_ignores_this_machines_cufile_env() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("cufile.json");
    std::fs::write(&p, "{ \"properties\": { \"allow_compat_mode\": true } }").unwrap();
    let run = |env: Option<&Path>| {
        let mut c = std::process::Command::new(gdr_trace_tests::gdr_trace());
        c.arg("check").args(roots(&machine("rail-pix"))).args(["--json", "--nccl-gdr-level", "PXB"]);
        c.env_remove("CUFILE_ENV_PATH_JSON");
        if let Some(p) = env {
            c.env("CUFILE_ENV_PATH_JSON", p);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let (plain, with_env) = (run(None), run(Some(&p)));
    assert_eq!(statuses(&with_env)["gds"], "pass", "{}", finding(&with_env, "gds"));
    assert_eq!(finding(&plain, "gds"), finding(&with_env, "gds"));
}

// ---------------------------------------------------------------- could not run: exit 2

#[test]
fn unreadable_input_exits_2_with_a_clear_error() {
    let out = check(&["--sysfs-root", "/nonexistent/sys"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("sysfs root /nonexistent/sys does not exist"), "{}", out.error);

    let empty = tempfile::tempdir().unwrap();
    let out = check(&["--sysfs-root", empty.path().to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("does not look like a sysfs tree"), "{}", out.error);

    let tmp = variant(|_| {});
    std::fs::write(tmp.path().join("sys/bus/pci/devices/0000:18:00.0/vendor"), "nvidia?\n").unwrap();
    let (out, _) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.error.contains(
            "malformed sysfs/procfs file /sys/bus/pci/devices/0000:18:00.0/vendor: expected a hex number"
        ),
        "{}",
        out.error
    );

    let tmp = variant(|_| {});
    std::fs::write(tmp.path().join("sys/bus/pci/devices/0000:19:00.0/numa_node"), "one\n").unwrap();
    let (out, _) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("numa_node"), "{}", out.error);

    let (out, _) = check_json(&machine("rail-pix"), &["--cufile-json", "/nonexistent/cufile.json"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("/nonexistent/cufile.json: no such file"), "{}", out.error);

    assert!(CheckCli::try_parse_from(["check", "--nccl-gdr-level", "NODE"]).is_err());
}

// ---------------------------------------------------------------- this machine

#[test]
fn check_runs_on_this_machine() {
    let out = check(&["--json"]);
    assert!(out.code < 2, "check failed on the real sysfs: {}", out.error);
    let j = out.json();
    if j["gpus"].as_array().unwrap().is_empty() {
        assert_eq!(out.code, 0);
        assert!(statuses(&j).values().all(|s| s == "not-applicable"));
    }
    // Every finding has an id and a status, and the text names each of them (wrapped within
    // its table cell: read as words).
    let findings = j["findings"].as_array().unwrap();
    assert!(!findings.is_empty(), "{j}");
    let text = check(&["--verbose"]);
    assert_eq!(text.code, out.code, "text and JSON agree on the exit code: {}", text.error);
    assert!(text.stdout.contains("checks:"));
    let words = gdr_trace_tests::terminal::flat(&text.stdout);
    for f in findings {
        let summary = gdr_trace_tests::terminal::flat(f["summary"].as_str().unwrap());
        assert!(words.contains(&summary), "text lacks {summary:?}:\n{}", text.stdout);
    }
}
