//! `doctor` on the fixture trees and NCCL logs, and the NCCL log parser fuzzed.

use super::*;

// ---------------------------------------------------------------- doctor

fn doctor_on(dir: &Path, extra: &[&str]) -> Out {
    let mut args = roots(dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--nccl-gdr-level") {
        args.extend(["--nccl-gdr-level".to_string(), "PXB".to_string()]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    doctor(&a)
}

#[test]
fn doctor_healthy_machine_with_gdr_log() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", &nccl("gdr-enabled.log")]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("nothing found that keeps GPU memory from the NIC"), "{}", out.stdout);
    assert!(out.stdout.contains("32 of 32 network channel(s) via GDRDMA"), "{}", out.stdout);
    assert!(out.stdout.contains("GPU Direct RDMA: enabled for HCA mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7\n"), "{}", out.stdout);
    assert!(out
        .stdout
        .contains("mlx5_0 (0000:19:00.0): nearest GPU 0 (0000:18:00.0) is PIX; NCCL GDR at PXB: yes"));
    assert!(
        out.stdout
            .contains("CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda=0 -d mlx5_0 -a --report_gbits"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("ib_write_bw -d mlx5_0 -a --report_gbits <this-node>"));
}

#[test]
fn doctor_names_a_pair_disabled_by_distance_without_an_empty_list() {
    // Every HCA enabled, one GPU/HCA pair too far: it printed "disabled for []" right after.
    let log = std::fs::read_to_string(nccl("gdr-enabled.log")).unwrap().replace(
        "Enabled for GPU 1 / HCA 1 (distance 4 <= 5), read 1 mode Default",
        "Disabled for GPU 1 / HCA 1 (distance 9 > 5)",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pair.log");
    std::fs::write(&path, log).unwrap();
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", path.to_str().unwrap()]);
    assert!(!out.stdout.contains("[]"), "{}", out.stdout);
    assert!(out.stdout.contains("; disabled by distance for 1 GPU/HCA pair(s)"), "{}", out.stdout);
    assert!(out.stdout.contains("GPU 1 / HCA 1 (distance 9 > 5)"), "{}", out.stdout);
}

#[test]
fn doctor_ranks_the_broken_machine() {
    let out = doctor_on(&machine("cross-socket"), &["--nccl-log", &nccl("gdr-disabled.log"), "--json"]);
    assert_eq!(out.code, 1);
    let j = out.json();
    assert_eq!(j["schema"], "gdr-trace.doctor/1");
    let problems = j["diagnosis"]["problems"].as_array().unwrap();
    let titles: Vec<&str> = problems.iter().map(|p| p["title"].as_str().unwrap()).collect();
    let sev: Vec<&str> = problems.iter().map(|p| p["severity"].as_str().unwrap()).collect();
    assert!(sev.windows(2).all(|w| rank(w[0]) <= rank(w[1])), "ranked: {sev:?}");
    assert!(titles[0].starts_with("NCCL: GPU Direct RDMA Disabled for HCA mlx5_0, mlx5_1"), "{titles:#?}");
    assert!(
        titles.iter().any(|t| t.starts_with("32 of 32 network channel(s) run without GDRDMA")),
        "{titles:#?}"
    );
    assert!(titles.iter().any(|t| t.starts_with("peermem: nvidia-peermem not loaded")));
    assert!(titles.iter().any(|t| t.starts_with("topology: 1 of 8 GPU(s)")));
    assert!(titles.iter().any(|t| t.starts_with("acs: ACS redirect (RR/CR)")));
    assert!(titles.iter().any(|t| t.starts_with("iommu: IOMMU translates DMA")));
    let steps: Vec<&str> = problems.iter().map(|p| p["step"].as_str().unwrap()).collect();
    assert_eq!(steps[0], "nccl-log");
    let ab = &j["diagnosis"]["ab_tests"];
    assert_eq!(ab[0]["gpu_index"], 7, "the worst pair first");
    assert_eq!(
        ab[0]["gpu_server"],
        "CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda=7 -d mlx5_5 -a --report_gbits"
    );
    assert_eq!(ab[0]["host_client"], "ib_write_bw -d mlx5_5 -a --report_gbits <this-node>");
    assert_eq!(ab[1]["gpu_index"], 0, "a good pair as the control");
    assert_eq!(j["nccl"]["version"], "2.21.5+cuda12.4");
    assert!(j["preflight"]["findings"].is_array());
}

fn rank(s: &str) -> u8 {
    ["critical", "high", "medium", "info"].iter().position(|x| *x == s).unwrap() as u8
}

#[test]
fn doctor_dmabuf_log_and_level_from_log() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", &nccl("dmabuf.log")]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("DMA-BUF available on GPU device(s) 0, 1, 2, 3, 4, 5, 6, 7"));
    assert!(out.stdout.contains("NCCL_DMABUF_ENABLE=1 (set by environment)"));

    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("nccl.log");
    std::fs::write(&log, "host:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to SYS\n").unwrap();
    let mut args = roots(&machine("cross-socket"));
    args.extend(["--nccl-log".to_string(), log.display().to_string(), "--json".to_string()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let j = doctor(&a).json();
    assert_eq!(j["preflight"]["nccl_net_gdr_level"]["level"], "SYS");
    assert_eq!(j["preflight"]["nccl_net_gdr_level"]["source"], "nccl-log");
}

#[test]
fn doctor_cannot_run_cases_exit_2() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", "/nonexistent/nccl.log"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("cannot read NCCL log /nonexistent/nccl.log"), "{}", out.error);
    // A file that is no NCCL log is bad input: said, exit 2 (it once listed "1 problem(s)" and
    // exited 0).
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", "/etc/passwd"]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(out.error.contains("/etc/passwd is not an NCCL log"), "{}", out.error);
    let out = doctor_on(&machine("rail-pix"), &["-p", "999999999", "--duration", "1"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("no process with PID 999999999"), "{}", out.error);
    // A negative duration is refused when parsed: exit 2, the option named.
    let Err(e) = DoctorCli::try_parse_from(["doctor", "-p", "1", "--duration=-3"]) else {
        panic!("--duration=-3 parsed")
    };
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("--duration"), "{e}");
}

#[test]
fn doctor_on_no_gpu_and_this_machine() {
    let out = doctor_on(&machine("no-gpu"), &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("no GPU–NIC pair on this machine to measure"));
    // Not worded as a pass.
    assert!(out.stdout.contains("no NVIDIA GPU on this machine: nothing to diagnose"), "{}", out.stdout);
    assert!(!out.stdout.contains("nothing found that keeps GPU memory"), "{}", out.stdout);
    // Its last word neither: not "0 problem(s)", which reads as a clean bill.
    let last = out.stdout.lines().last().unwrap_or_default();
    assert_eq!(last, "nothing diagnosed: no NVIDIA GPU on this machine -> exit 0", "{}", out.stdout);
    let out = doctor(&[]);
    assert!(out.code < 2, "{}", out.error);
}

// ---------------------------------------------------------------- the NCCL log parser, fuzzed

fn fixture_logs() -> Vec<Vec<u8>> {
    ["gdr-enabled.log", "gdr-disabled.log", "dmabuf.log", "p2p-shm.log", "p2p-cumem.log"]
        .iter()
        .map(|n| std::fs::read(nccl(n)).unwrap())
        .collect()
}

#[test]
fn fixture_logs_parse_as_written() {
    let logs = fixture_logs();
    let enabled = nccl_log::parse_bytes(&logs[0]);
    assert_eq!(enabled.hcas().len(), 8);
    assert!(enabled.hcas().values().all(|e| *e));
    assert_eq!(enabled.channel_counts(), (32, 0));
    assert_eq!(enabled.gpu_gdr.len(), 8);
    assert_eq!(enabled.processes.len(), 8);
    let disabled = nccl_log::parse_bytes(&logs[1]);
    assert!(disabled.hcas().values().all(|e| !*e));
    assert_eq!(disabled.channel_counts(), (0, 32));
    assert_eq!(disabled.ring_gdr, Some(false));
    let dmabuf = nccl_log::parse_bytes(&logs[2]);
    assert_eq!(dmabuf.dmabuf_gpus.len(), 8);
    assert_eq!(dmabuf.version.as_deref(), Some("2.23.4+cuda12.6"));
    assert_eq!((enabled.p2p_counts(), enabled.nvls), ((8, 0), true), "NVLS: NVSwitch, so NVLink");
    let shm = nccl_log::parse_bytes(&logs[3]);
    assert_eq!((shm.p2p_counts(), shm.nvls, shm.channel_counts()), ((0, 12), false, (0, 0)));
    let cumem = nccl_log::parse_bytes(&logs[4]);
    assert_eq!(cumem.p2p_counts(), (10, 2));
    assert_eq!(cumem.p2p_disabled.len(), 2);
    assert_eq!(cumem.env.get("NCCL_P2P_LEVEL").map(String::as_str), Some("SYS"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn nccl_parser_survives_any_text(s in "\\PC*") {
        let log = nccl_log::parse(&s);
        prop_assert!(log.recognized <= log.lines);
    }

    #[test]
    fn nccl_parser_survives_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let log = nccl_log::parse_bytes(&b);
        prop_assert!(log.recognized <= log.lines);
        prop_assert!(log.lines <= b.iter().filter(|&&c| c == b'\n').count() + 1);
    }

    #[test]
    fn nccl_parser_survives_spliced_tokens(parts in proptest::collection::vec(prop_oneof![
        Just("NCCL INFO ".to_string()), Just("GPU Direct RDMA ".to_string()), Just("Enabled for HCA ".to_string()),
        Just("Disabled for GPU ".to_string()), Just(" / HCA ".to_string()), Just("(distance ".to_string()),
        Just("Channel ".to_string()), Just(" : ".to_string()), Just(" -> ".to_string()), Just(" via NET/".to_string()),
        Just("IB/".to_string()), Just("/GDRDMA".to_string()), Just("NET/IB : Using ".to_string()), Just("[".to_string()),
        Just("]".to_string()), Just("'".to_string()), Just("\n".to_string()), Just("use ring PXN 0 GDR ".to_string()),
        Just(" via P2P/".to_string()), Just("CUMEM/read".to_string()), Just(" via SHM/".to_string()),
        Just("P2P is disabled between connected GPUs ".to_string()), Just(" and ".to_string()),
        "[0-9a-z_:/ .'\\[\\]()<>=-]{0,8}",
    ], 0..60)) {
        let text = parts.concat();
        let log = nccl_log::parse(&text);
        prop_assert!(log.recognized <= log.lines);
        prop_assert_eq!(log.lines, text.lines().count());
    }

    #[test]
    fn truncated_logs_yield_a_subset(which in 0usize..5, cut in 0usize..20_000) {
        let logs = fixture_logs();
        let full_bytes = &logs[which];
        let part = nccl_log::parse_bytes(&full_bytes[..cut.min(full_bytes.len())]);
        let full = nccl_log::parse_bytes(full_bytes);
        prop_assert!(part.channels.len() <= full.channels.len());
        prop_assert!(part.hca_gdr.len() <= full.hca_gdr.len());
        prop_assert!(part.p2p_channels.len() <= full.p2p_channels.len());
        prop_assert!(part.p2p_channels.iter().all(|c| full.p2p_channels.contains(c)));
        prop_assert!(part.p2p_disabled.iter().all(|d| full.p2p_disabled.contains(d)));
        for h in &part.hca_gdr {
            prop_assert!(full.hca_gdr.iter().any(|f| f.name == h.name && f.enabled == h.enabled), "{:?}", h);
        }
    }
}

#[test]
fn doctor_with_a_live_pid_adds_driver_level_evidence() {
    // PID 1 registers no memory: the trace runs for real and says so (needs root, like every
    // tracing test here).
    let out = doctor_on(&machine("rail-pix"), &["-p", "1", "--duration", "1", "--json"]);
    assert!(out.code == 0 || out.code == 1, "{} {}", out.stdout, out.error);
    let j = out.json();
    assert_eq!(j["live"]["pid"], 1, "{j}");
    assert_eq!(j["live"]["registrations"].as_array().map(Vec::len), Some(0), "{j}");
}
