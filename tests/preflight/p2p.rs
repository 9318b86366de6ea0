//! GPU↔GPU pairs (GPUDirect P2P) in `check` on the fixture trees (pcie-p2p holds every distance
//! class; rail-pix and cross-socket NODE and SYS). `doctor`'s side: p2p_doctor.rs.

use super::*;

/// (gpu_a_index, gpu_b_index) -> (distance, acs, nvlink).
fn gpu_pairs(json: &Value) -> BTreeMap<(u64, u64), (String, String, String)> {
    json["gpu_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap_or_else(|| panic!("gpu_pairs[].{k} in {p}")).to_string();
            (
                (p["gpu_a_index"].as_u64().unwrap(), p["gpu_b_index"].as_u64().unwrap()),
                (s("distance"), s("acs"), s("nvlink")),
            )
        })
        .collect()
}

fn want(d: &str, acs: &str) -> (String, String, String) {
    (d.to_string(), acs.to_string(), "unknown".to_string())
}

/// The classes the kernel's tree gives pcie-p2p (see tests/fixtures/pcie_p2p.rs), with the ACS
/// state of the PXB pair as given.
fn pcie_p2p_expected(pxb_acs: &str) -> BTreeMap<(u64, u64), (String, String, String)> {
    let mut m = BTreeMap::new();
    for a in 0..6u64 {
        for b in a + 1..6 {
            let v = match (a, b) {
                (0, 1) => want("PIX", "off"),
                (2, 3) => want("PXB", pxb_acs),
                (2, 4) | (3, 4) => want("PHB", "not-on-path"),
                (_, 5) => want("SYS", "not-on-path"),
                _ => want("NODE", "not-on-path"),
            };
            m.insert((a, b), v);
        }
    }
    m
}

#[test]
fn every_gpu_pair_gets_its_distance_class_acs_and_nvlink() {
    let (out, j) = check_json(&machine("pcie-p2p"), &[]);
    assert_eq!(out.code, 1, "ACS redirect between two GPUs below one switch fails: {}", out.stdout);
    assert_eq!(gpu_pairs(&j), pcie_p2p_expected("redirect"));
    let pix = &j["gpu_pairs"][0];
    assert_eq!((pix["gpu_a"].as_str(), pix["gpu_b"].as_str()), (Some("0000:18:00.0"), Some("0000:19:00.0")));
    assert_eq!(pix["common_bridge"], "0000:16:00.0");
    assert_eq!(pix["ports"], serde_json::json!(["0000:17:00.0", "0000:17:01.0"]));
    let pxb =
        j["gpu_pairs"].as_array().unwrap().iter().find(|p| p["gpu_a_index"] == 2 && p["gpu_b_index"] == 3);
    let pxb = pxb.unwrap();
    assert_eq!((pxb["gpu_a"].as_str(), pxb["gpu_b"].as_str()), (Some("0000:3a:00.0"), Some("0000:3d:00.0")));
    assert_eq!(pxb["common_bridge"], "0000:38:00.0", "switch A's upstream port");
    assert_eq!(pxb["ports"], serde_json::json!(["0000:39:00.0", "0000:39:01.0"]));
    assert!(pxb.get("nvlink_links").is_none(), "no link count without NVML");

    assert_eq!(
        statuses(&j),
        expect(&[
            ("gpus", "pass"),
            ("rdma-nics", "not-applicable"),
            ("driver", "pass"),
            ("peermem", "not-applicable"),
            ("memory-peers", "not-applicable"),
            ("dmabuf", "not-applicable"),
            ("versions", "pass"),
            ("topology", "not-applicable"),
            ("acs", "not-applicable"),
            ("gpu-p2p", "fail"),
            ("iommu", "pass"),
            ("bar1", "pass"),
            ("link", "pass"),
            ("gds", "not-applicable"),
            // The fixture has no /proc/self/mountinfo.
            ("gds-mounts", "unknown"),
            // No RDMA NIC: no GPU-initiated networking to map doorbells for.
            ("peer-mapping", "not-applicable"),
        ])
    );
    let f = finding(&j, "gpu-p2p");
    assert_eq!(
        f["summary"],
        "GPU↔GPU P2P between 0000:3a:00.0 and 0000:3d:00.0 crosses the root complex (ACS redirect on \
         0000:39:00.0, 0000:39:01.0): CUDA peer copies are staged through host memory / NCCL falls back \
         to SHM; 14 of 15 GPU pair(s) without a direct path"
    );
    let ev: Vec<&str> =
        f["evidence"].as_array().unwrap().iter().map(|e| e["value"].as_str().unwrap()).collect();
    assert_eq!(ev[0], "GPU 2 ↔ GPU 3 (0000:3d:00.0): PXB, ACS redirect, NVLink unknown below 0000:38:00.0");
    assert!(ev[1].contains("ctl 0x001d [SV RR CR UF]: redirects peer-to-peer"), "{ev:?}");
    assert!(ev.contains(&"GPU 0 ↔ GPU 1 (0000:19:00.0): PIX, ACS off, NVLink unknown below 0000:16:00.0"));
    assert_eq!(
        *ev.last().unwrap(),
        format!(
            "not asked: {} is a captured tree and NVML describes this machine",
            machine("pcie-p2p").join("sys").display()
        )
    );
}

#[test]
fn without_acs_redirect_the_pxb_pair_is_direct_and_distance_only_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = pcie_p2p::pcie_p2p();
    spec.acs_ctl = 0;
    machines::build(&spec, tmp.path()).unwrap();
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(gpu_pairs(&j), pcie_p2p_expected("off"));
    let f = finding(&j, "gpu-p2p");
    assert_eq!(f["status"], "warn");
    assert_eq!(
        f["summary"],
        "GPU↔GPU P2P between 0000:18:00.0 and 0000:98:00.0 crosses the CPU (SYS): CUDA peer copies are \
         staged through host memory / NCCL falls back to SHM unless NVLink connects them (NVLink unknown); \
         13 of 15 GPU pair(s) without a direct path"
    );
    // Captured without root: the switch ports' ACS cannot be read.
    spec.short_config = true;
    let tmp = tempfile::tempdir().unwrap();
    machines::build(&spec, tmp.path()).unwrap();
    let (_, j) = check_json(tmp.path(), &[]);
    assert_eq!(gpu_pairs(&j)[&(0, 1)], want("PIX", "unknown"));
    assert_eq!(gpu_pairs(&j)[&(2, 3)], want("PXB", "unknown"));
    assert_eq!(finding(&j, "gpu-p2p")["status"], "warn", "the SYS pairs still warn");
}

#[test]
fn rail_machines_have_node_and_sys_gpu_pairs() {
    for name in ["rail-pix", "cross-socket"] {
        let (_, j) = check_json(&machine(name), &[]);
        let pairs = gpu_pairs(&j);
        assert_eq!(pairs.len(), 28, "{name}");
        for ((a, b), v) in pairs {
            let d = if a / 4 == b / 4 { "NODE" } else { "SYS" };
            assert_eq!(v, want(d, "not-on-path"), "{name} GPU {a} - GPU {b}");
        }
        assert!(
            finding(&j, "gpu-p2p")["summary"]
                .as_str()
                .unwrap()
                .starts_with("GPU↔GPU P2P between 0000:18:00.0 and 0000:9a:00.0 crosses the CPU (SYS)"),
            "{name}: {}",
            finding(&j, "gpu-p2p")["summary"]
        );
    }
    let (_, j) = check_json(&machine("no-gpu"), &[]);
    assert_eq!(j["gpu_pairs"], serde_json::json!([]));
    assert_eq!(finding(&j, "gpu-p2p")["summary"], "fewer than two GPUs: no GPU↔GPU P2P");
}

#[test]
fn text_output_has_the_gpu_matrix() {
    let mut args = roots(&machine("pcie-p2p"));
    args.push("--nccl-gdr-level=PXB".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = check(&a);
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("GPU <-> GPU P2P (PIX < PXB < PHB < NODE < SYS; ! = ACS redirects P2P"));
    // Not a terminal: plain columns, at least two spaces apart, no box lines.
    assert!(!out.stdout.contains(['│', '┆', '─', '┌']), "{}", out.stdout);
    let row = out.stdout.lines().find(|l| l.starts_with(" GPU 2 ")).expect("GPU 2 row");
    let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(cells, ["GPU 2", "0000:3a:00.0", "NODE", "NODE", "X", "PXB!", "PHB", "SYS"]);
    assert!(out.stdout.contains("NVLink: unknown — not asked: "), "{}", out.stdout);
}

/// On the live /sys (no libnvidia-ml on these machines) NVLink is unknown with the loader's
/// reason, and nothing fails because of it.
#[test]
fn check_on_this_machine_never_fails_for_missing_nvml() {
    let out = check(&["--json"]);
    assert!(out.code < 2, "{}", out.error);
    let j = out.json();
    let f = finding(&j, "gpu-p2p");
    let gpus = j["gpus"].as_array().unwrap().len();
    if gpus < 2 {
        assert_eq!(f["status"], "not-applicable");
        assert_eq!(j["gpu_pairs"].as_array().unwrap().len(), 0);
    } else {
        assert_eq!(j["gpu_pairs"].as_array().unwrap().len(), gpus * (gpus - 1) / 2);
        let nvml = f["evidence"].as_array().unwrap().iter().find(|e| e["path"] == "NVML").unwrap();
        let reason = nvml["value"].as_str().unwrap();
        assert!(
            reason.starts_with("libnvidia-ml.so.1 not loadable") || reason.starts_with("NVML"),
            "{reason}"
        );
    }
}
