//! `doctor` on NCCL's GPU↔GPU lines (via P2P/..., via SHM/..., P2P is disabled, NVLS) against the
//! GPU pairs of the fixture trees.

use super::*;

fn doctor_json(dir: &Path, log: &str) -> (Out, Vec<(String, String, String)>) {
    let mut args = roots(dir);
    args.extend([
        "--nccl-log".into(),
        log.to_string(),
        "--json".into(),
        "--nccl-gdr-level".into(),
        "PXB".into(),
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = doctor(&a);
    let j = out.json();
    let problems = j["diagnosis"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = |k: &str| p[k].as_str().unwrap().to_string();
            (s("severity"), s("step"), s("title"))
        })
        .collect();
    (out, problems)
}

fn pcie_p2p_without_acs() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = pcie_p2p::pcie_p2p();
    spec.acs_ctl = 0;
    machines::build(&spec, tmp.path()).unwrap();
    tmp
}

fn p(sev: &str, title: &str) -> (String, String, String) {
    (sev.to_string(), "gpu-p2p".to_string(), title.to_string())
}

const SHM_PIX: &str =
    "NCCL uses SHM between GPU 0 and GPU 1 (0000:18:00.0 ↔ 0000:19:00.0: PIX, ACS off, NVLink \
                       unknown): P2P was available but not used";

#[test]
fn doctor_says_p2p_was_available_where_nccl_used_shm() {
    let (out, problems) = doctor_json(&machine("pcie-p2p"), &nccl("p2p-shm.log"));
    assert_eq!(out.code, 1);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems[0]
        .2
        .starts_with("gpu-p2p: GPU↔GPU P2P between 0000:3a:00.0 and 0000:3d:00.0 crosses the root complex"));
    assert_eq!(problems[1], p("high", SHM_PIX));
    let j = out.json();
    let ev: Vec<&str> = j["diagnosis"]["problems"][1]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(
        ev,
        [
            "line 18: Channel 00 0 -> 1 via SHM/direct/direct",
            "line 19: Channel 01 0 -> 1 via SHM/direct/direct",
            "NCCL_P2P_DISABLE=1 (set by environment)"
        ]
    );
    assert!(j["diagnosis"]["problems"][1]["fix"].as_str().unwrap().contains("--ipc=host"));
    assert_eq!(j["nccl"]["p2p_channels"].as_array().unwrap().len(), 12);
    // The other five pairs cross the CPU or the root complex: SHM is what NCCL should pick there.
    let walk = &j["diagnosis"]["steps"].as_array().unwrap().iter().find(|s| s["step"] == "gpu-p2p").unwrap()
        ["lines"];
    let walk: Vec<&str> = walk.as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(
        walk.iter().filter(|l| l.ends_with("SHM expected: the path crosses the CPU or root complex")).count(),
        5
    );

    // Without the ACS redirect the PXB pair (GPU 2, 3) has a direct path too: SHM there is the
    // same waste, and the only other problem.
    let tmp = pcie_p2p_without_acs();
    let (out, problems) = doctor_json(tmp.path(), &nccl("p2p-shm.log"));
    assert_eq!(out.code, 1);
    assert_eq!(
        problems,
        vec![
            p("high", SHM_PIX),
            p(
                "high",
                "NCCL uses SHM between GPU 2 and GPU 3 (0000:3a:00.0 ↔ 0000:3d:00.0: PXB, ACS off, NVLink \
                 unknown): P2P was available but not used"
            )
        ]
    );
}

#[test]
fn doctor_calls_p2p_across_the_cpu_fine_but_slower() {
    let tmp = pcie_p2p_without_acs();
    let (out, problems) = doctor_json(tmp.path(), &nccl("p2p-cumem.log"));
    assert_eq!(out.code, 0, "info only: {problems:#?}");
    let slower = |a: u32, b: u32, pa: &str, pb: &str, d: &str| {
        p(
            "info",
            &format!(
                "NCCL uses P2P between GPU {a} and GPU {b} ({pa} ↔ {pb}: {d}, ACS not-on-path, NVLink unknown): fine, \
                 but across the CPU it is slower than below one PCIe switch"
            ),
        )
    };
    assert_eq!(
        problems,
        vec![
            slower(0, 5, "0000:18:00.0", "0000:98:00.0", "SYS"),
            slower(3, 4, "0000:3d:00.0", "0000:40:00.0", "PHB"),
            slower(4, 5, "0000:40:00.0", "0000:98:00.0", "SYS"),
        ]
    );
    // With ACS redirecting between GPU 2 and 3, their P2P channels take the detour.
    let (_, problems) = doctor_json(&machine("pcie-p2p"), &nccl("p2p-cumem.log"));
    assert!(problems.contains(&p(
        "medium",
        "NCCL uses P2P between GPU 2 and GPU 3 (0000:3a:00.0 ↔ 0000:3d:00.0: PXB, ACS redirect, NVLink unknown), \
         though ACS on 0000:39:00.0, 0000:39:01.0 redirects it to the root complex"
    )), "{problems:#?}");
}

#[test]
fn doctor_on_p2p_disabled_lines_old_bus_ids_and_foreign_gpus() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("nccl.log");
    std::fs::write(
        &log,
        "h:1:1 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.\n\
         h:1:1 [4] NCCL INFO P2P is disabled between connected GPUs 4 and 5. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.\n\
         h:1:1 [0] NCCL INFO Channel 00 : 0[18000] -> 1[19000] via SHM/direct/direct\n\
         h:1:1 [0] NCCL INFO Channel 00/0 : 0[7] -> 1[8] via P2P/IPC\n\
         h:1:1 [5] NCCL WARN P2P is disabled between NVLINK connected GPUs 5 and 4. This should not be the case given their connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.\n",
    )
    .unwrap();
    let dir = pcie_p2p_without_acs();
    let (out, problems) = doctor_json(dir.path(), log.to_str().unwrap());
    assert_eq!(out.code, 1);
    let titles: Vec<&str> = problems.iter().map(|(_, _, t)| t.as_str()).collect();
    assert_eq!(
        problems.iter().map(|(s, _, _)| s.as_str()).collect::<Vec<_>>(),
        ["high", "high", "medium", "medium", "info"],
        "{titles:#?}"
    );
    assert_eq!(titles[0], SHM_PIX, "the old format's bus ids name the same pair");
    assert_eq!(titles[1], "NCCL: P2P is disabled between NVLINK connected GPUs 5 and 4: NCCL stops");
    assert!(titles[2].starts_with("NCCL printed 1 warning(s)"), "{titles:#?}");
    assert_eq!(
        titles[3],
        "NCCL: P2P is disabled between connected GPUs 0 and 1, though their PCIe path is PIX, ACS off, NVLink unknown"
    );
    assert_eq!(problems[3].1, "gpu-p2p");
    assert_eq!(
        titles[4],
        "the log's GPU↔GPU channels name GPUs this machine does not have (GPU 7 / GPU 8): log from another node?"
    );
    let j = out.json();
    let shm_ev = j["diagnosis"]["problems"][0]["evidence"].as_array().unwrap();
    assert!(
        shm_ev.iter().any(|e| e == "line 1: P2P is disabled between connected GPUs 0 and 1"),
        "the SHM problem cites NCCL's reason: {shm_ev:?}"
    );
}

#[test]
fn doctor_reads_nvlink_from_nccl_where_nvml_cannot_say() {
    // The HGX-like capture: P2P between GPUs on different host bridges, and NVLS in the log.
    let out = doctor(
        &{
            let mut a = roots(&machine("rail-pix"));
            a.extend(["--nccl-gdr-level=PXB".into(), "--nccl-log".into(), nccl("gdr-enabled.log")]);
            a
        }
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    );
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "GPU 0 ↔ GPU 7 (SYS, ACS not-on-path, NVLink unknown; NVLS in the log: NVSwitch): 1 channel(s) via P2P \
             (CUMEM), 0 via SHM — P2P over NVLink"
        ),
        "{}",
        out.stdout
    );
    // Without NVLS and without NCCL_P2P_LEVEL, NCCL takes P2P across the CPU only over NVLink.
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("nccl.log");
    std::fs::write(&log, "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 7[7] via P2P/CUMEM/read\n").unwrap();
    let (out, problems) = doctor_json(&machine("rail-pix"), log.to_str().unwrap());
    assert_eq!((out.code, problems.len()), (0, 0), "{problems:#?}");
    assert!(out.stdout.contains(
        "P2P although PCIe crosses the CPU: at NCCL's default NCCL_P2P_LEVEL (PXB) that means NVLink"
    ));
    // With NCCL_P2P_LEVEL=SYS it may well be PCIe across the sockets.
    std::fs::write(
        &log,
        "h:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS\nh:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 7[7] via P2P/CUMEM/read\n",
    )
    .unwrap();
    let (_, problems) = doctor_json(&machine("rail-pix"), log.to_str().unwrap());
    assert_eq!(
        problems,
        vec![p(
            "info",
            "NCCL uses P2P between GPU 0 and GPU 7 (0000:18:00.0 ↔ 0000:cd:00.0: SYS, ACS not-on-path, NVLink \
             unknown): fine, but across the CPU it is slower than below one PCIe switch"
        )]
    );
}
