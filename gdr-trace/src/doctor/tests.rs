//! The diagnosis logic on hand-built inputs: a two-GPU, two-NIC preflight report, short NCCL
//! logs, and `LiveEvidence` as the live tracer would fill it.

use super::*;
use crate::nccl_log::parse;
use crate::preflight::pci::PathInfo;
use crate::preflight::{Distance, Finding, GdrLevelSetting, NicInfo, PairInfo, Status};

const GIB: u64 = 1 << 30;

fn report(findings: Vec<Finding>) -> PreflightReport {
    let nic = |bdf: &str, ib: &str| NicInfo {
        bdf: bdf.into(),
        id: "15b3:1021".into(),
        ib_devices: vec![ib.into()],
        net_devices: vec![],
        rdma: true,
        numa_node: Some(0),
        host_bridge: Some("pci0000:15".into()),
        bridges: vec![],
        driver: Some("mlx5_core".into()),
    };
    let pair = |gi: usize, gpu: &str, nic: &str, ib: &str, d: Distance, nearest: bool| PairInfo {
        gpu_index: gi,
        gpu: gpu.into(),
        nic: nic.into(),
        ib_device: ib.into(),
        path: PathInfo { distance: d, common_bridge: None, ports: vec![], bridges: vec![] },
        nccl_gdr: Some(d <= Distance::Pxb),
        nearest,
    };
    PreflightReport {
        schema: "test",
        sysfs_root: "/sys".into(),
        proc_root: "/proc".into(),
        nccl_net_gdr_level: GdrLevelSetting::default(),
        status: Status::Pass,
        exit_code: 0,
        counts: Default::default(),
        gpus: vec![],
        nics: vec![nic("0000:19:00.0", "mlx5_0"), nic("0000:3b:00.0", "mlx5_1")],
        pairs: vec![
            pair(0, "0000:18:00.0", "0000:19:00.0", "mlx5_0", Distance::Pix, true),
            pair(0, "0000:18:00.0", "0000:3b:00.0", "mlx5_1", Distance::Node, false),
            pair(1, "0000:3a:00.0", "0000:19:00.0", "mlx5_0", Distance::Node, false),
            pair(1, "0000:3a:00.0", "0000:3b:00.0", "mlx5_1", Distance::Pix, true),
        ],
        gpu_pairs: vec![],
        findings,
    }
}

fn healthy() -> PreflightReport {
    report(
        ["peermem", "dmabuf", "topology", "acs", "iommu"]
            .iter()
            .map(|id| Finding::new(id, Status::Pass, "fine"))
            .collect(),
    )
}

const LOG_BOTH_ENABLED: &str = "\
h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eno1:10.0.0.1<0>
h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'
h:1:1 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
h:1:1 [1] NCCL INFO Channel 00/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
";

fn titles(d: &Diagnosis) -> Vec<(Severity, String)> {
    d.problems.iter().map(|p| (p.severity, p.title.clone())).collect()
}

#[test]
fn nccl_says_gdr_but_all_registered_bytes_were_host() {
    let log = parse("h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n");
    let mut live = LiveEvidence::new(4242, 10.0);
    live.add(None, "host", 40, 3 * GIB + GIB / 5);
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    assert_eq!(d.problems[0].severity, Severity::Critical);
    assert_eq!(
        d.problems[0].title,
        "NCCL says GDR enabled for mlx5_0, but all 3.2 GiB registered by this PID were host memory"
    );
    assert_eq!(d.problems[0].step, Step::Live);
    assert_eq!(d.exit_code, 1);
}

#[test]
fn per_device_evidence_names_only_the_host_staged_hca() {
    let log = parse(LOG_BOTH_ENABLED);
    let mut live = LiveEvidence::new(7, 5.0);
    live.add(Some("mlx5_0"), "gpu-peermem", 10, 8 * GIB);
    live.add(Some("mlx5_0"), "host", 4, 1 << 20);
    live.add(Some("mlx5_1"), "host", 10, 2 * GIB);
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    let crit: Vec<_> = titles(&d).into_iter().filter(|(s, _)| *s == Severity::Critical).collect();
    assert_eq!(crit.len(), 1, "{crit:?}");
    assert_eq!(crit[0].1, "NCCL says GDR enabled for mlx5_1, but every byte registered there by this PID was host memory (mlx5_1: 2.0 GiB)");
}

#[test]
fn gdr_channels_count_as_a_claim_even_without_hca_lines() {
    // A log cut before the HCA lines still has the channels: NET/IB/1 is mlx5_1.
    let log = parse(
        "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB\nh:1:1 [1] NCCL INFO Channel 00/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA\n",
    );
    let mut live = LiveEvidence::new(7, 5.0);
    live.add(None, "host", 3, GIB);
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    assert!(
        d.problems[0].title.starts_with("NCCL says GDR enabled for mlx5_1, but all 1.0 GiB"),
        "{:?}",
        titles(&d)
    );
}

#[test]
fn gpu_memory_on_the_wire_is_no_contradiction() {
    let log = parse(LOG_BOTH_ENABLED);
    let mut live = LiveEvidence::new(7, 5.0);
    live.add(None, "gpu-dmabuf", 10, 8 * GIB);
    live.add(None, "host", 4, 1 << 20); // NCCL's small host FIFOs
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    assert!(d.problems.is_empty(), "{:?}", titles(&d));
    assert_eq!(d.exit_code, 0);
    assert!(d.steps[0].lines[0].starts_with("PID 7, 5 s: 14 registration(s), 8.0 GiB"), "{:?}", d.steps[0]);
}

#[test]
fn host_only_without_a_log_is_high() {
    let mut live = LiveEvidence::new(9, 5.0);
    live.add(Some("mlx5_0"), "host", 2, 512 << 20);
    let d = diagnose(None, &healthy(), Some(&live));
    assert_eq!(
        titles(&d),
        vec![(
            Severity::High,
            "PID 9 registered only host memory (512.0 MiB): host-staged if it is a GPU job".to_string()
        )]
    );
    assert_eq!(d.exit_code, 1);
}

#[test]
fn cuda_pinned_host_mrs_make_host_staging_evidence_in_words() {
    let mut live = LiveEvidence::new(9, 5.0);
    live.add(Some("mlx5_0"), "host", 2, 5 << 20);
    live.staging_mrs.push(super::StagingMr {
        device: Some("mlx5_0".into()),
        length: 4 << 20,
        host_alloc: "cuMemHostAlloc",
    });
    live.p2p_pairs.push(crate::p2p::P2pPair {
        src_device: 0,
        dst_device: 1,
        calls: 3,
        bytes: 3 << 20,
        verdict: "p2p-staged",
    });
    live.p2p_pairs.push(crate::p2p::P2pPair {
        src_device: 1,
        dst_device: 0,
        calls: 1,
        bytes: 1 << 20,
        verdict: "p2p-direct",
    });
    let d = diagnose(None, &healthy(), Some(&live));
    let t = titles(&d);
    assert!(t.contains(&(Severity::High, "PID 9 is host-staged, by evidence: 1 of its host MR(s) (4.0 MiB) are CUDA pinned host buffers registered with the NIC (what NCCL does when GPUDirect RDMA is off)".to_string())), "{t:?}");
    let p = d.problems.iter().find(|p| p.title.contains("by evidence")).unwrap();
    assert_eq!(p.evidence, vec!["4.0 MiB MR on mlx5_0 in memory from cuMemHostAlloc".to_string()]);
    assert!(t.contains(&(Severity::Medium, "PID 9 copied 3.0 MiB from GPU 0 to GPU 1 without peer access (3 call(s)): the driver staged it through host memory".to_string())), "{t:?}");
    assert!(!t.iter().any(|(_, s)| s.contains("GPU 1 to GPU 0")), "a direct copy is no problem: {t:?}");
}

#[test]
fn nccl_p2p_channels_are_held_against_the_imports_seen_live() {
    let log = parse("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n");
    let mut live = LiveEvidence::new(9, 5.0);
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    let lines: Vec<&String> = d.steps.iter().flat_map(|s| &s.lines).collect();
    assert!(lines.iter().any(|l| l.contains("saw no import of GPU memory by PID 9")), "{lines:?}");
    live.gpu_imports.push(super::GpuImport {
        op: "cuIpcOpenMemHandle".into(),
        exporter_pid: Some(8),
        ok: true,
    });
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    let lines: Vec<&String> = d.steps.iter().flat_map(|s| &s.lines).collect();
    assert!(
        lines.iter().any(|l| l.contains("imported GPU memory 1 time(s) (exporters: PID 8): P2P confirmed")),
        "{lines:?}"
    );
}

#[test]
fn log_says_disabled_but_driver_saw_gpu_memory() {
    let log = parse("h:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\n");
    let mut live = LiveEvidence::new(9, 5.0);
    live.add(None, "gpu-peermem", 1, GIB);
    let d = diagnose(Some(&log), &healthy(), Some(&live));
    let t = titles(&d);
    assert!(
        t.contains(&(
            Severity::Medium,
            "the NCCL log says GDR is disabled, yet the driver saw 1.0 GiB of GPU memory registered"
                .to_string()
        )),
        "{t:?}"
    );
    assert!(
        t.contains(&(Severity::High, "NCCL: GPU Direct RDMA Disabled for HCA mlx5_0".to_string())),
        "{t:?}"
    );
}

#[test]
fn failed_and_missing_registrations() {
    let mut live = LiveEvidence::new(9, 5.0);
    live.add(Some("mlx5_0"), "failed", 3, 0);
    let d = diagnose(None, &healthy(), Some(&live));
    assert_eq!(titles(&d)[0], (Severity::High, "3 memory registration(s) by PID 9 failed".to_string()));
    let quiet = LiveEvidence::new(9, 5.0);
    let d = diagnose(None, &healthy(), Some(&quiet));
    assert_eq!(titles(&d), vec![(Severity::Info, "no memory registration by PID 9 in 5 s".to_string())]);
    assert_eq!(d.exit_code, 0);
}

#[test]
fn ranking_is_by_severity_then_troubleshooting_order() {
    let mut findings: Vec<Finding> =
        ["peermem", "dmabuf"].iter().map(|id| Finding::new(id, Status::Pass, "fine")).collect();
    findings.push(Finding::new("iommu", Status::Fail, "translated"));
    findings.push(Finding::new("acs", Status::Warn, "egress"));
    findings.push(Finding::new("topology", Status::Fail, "far"));
    let log = parse("h:1:1 [0] NCCL INFO Using network Socket\n");
    let d = diagnose(Some(&log), &report(findings), None);
    let got: Vec<(Severity, Step)> = d.problems.iter().map(|p| (p.severity, p.step)).collect();
    assert_eq!(
        got,
        vec![
            (Severity::Critical, Step::NcclLog),
            (Severity::High, Step::Topology),
            (Severity::High, Step::Iommu),
            (Severity::Medium, Step::Acs),
        ]
    );
}

#[test]
fn ab_commands_use_dmabuf_flag_when_peermem_is_missing() {
    let mut findings =
        vec![Finding::new("peermem", Status::Warn, "missing"), Finding::new("dmabuf", Status::Pass, "ok")];
    findings.push(Finding::new("topology", Status::Pass, "fine"));
    let d = diagnose(None, &report(findings), None);
    assert_eq!(d.ab_tests.len(), 1);
    assert_eq!(
        d.ab_tests[0].gpu_server,
        "CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda=0 --use_cuda_dmabuf -d mlx5_0 -a --report_gbits"
    );
    assert_eq!(d.ab_tests[0].host_server, "ib_write_bw -d mlx5_0 -a --report_gbits");
}

#[test]
fn human_bytes_reads_like_people_write() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(3 * GIB + GIB / 5), "3.2 GiB");
    assert_eq!(human_bytes(5 << 40), "5.0 TiB");
}

/// GPU-resident queues without the doorbell mapped: CPU-assisted, a high problem citing
/// PeerMappingOverride as check read it; GPU-handled and host queues are steps, not problems.
#[test]
fn names_the_gpu_initiated_networking_a_process_got() {
    use crate::mr::{classify::Verdict, correlate::Registration};
    use crate::queues::{QueueKind, QueuePin, Queues};
    let live_with = |mapped: Option<i64>, memory: Verdict| {
        let mut q = Queues::new(true);
        let ctx = crate::events::Context { pid: 31, tid: 31, comm: "deepep".into(), ..Default::default() };
        let r = Registration { ctx: ctx.clone(), length: 1 << 20, umem: Some(1), ..Default::default() };
        q.pinned(&QueuePin::of(&r, QueueKind::DevxUmem, memory));
        if let Some(ret) = mapped {
            q.cuda(&crate::events::cuda::CudaCall {
                ctx,
                op: crate::events::cuda::CudaOp::HostRegister,
                function: "cuMemHostRegister".into(),
                source: crate::events::Source::parse("uprobe:cuMemHostRegister"),
                addr: 0x7f00_0000_0000,
                length: 4096,
                flags: 7,
                aux: 0,
                ret,
                device: None,
                peer_device: None,
                handle: None,
                file: None,
            });
        }
        LiveEvidence { pid: 31, queues: q.report().procs.into_iter().next(), ..LiveEvidence::default() }
    };
    let posture = Finding::new("peer-mapping", Status::Warn, "PeerMappingOverride not set: ...");
    let pre = report(vec![posture]);
    let d = diagnose(None, &pre, Some(&live_with(Some(800), Verdict::GpuDmabuf)));
    let p = d.problems.iter().find(|p| p.title.contains("CPU-assisted")).expect("a problem");
    assert_eq!(p.severity, Severity::High);
    let evidence = p.evidence.join("; ");
    assert!(
        evidence.contains("CUresult 800") && evidence.contains("PeerMappingOverride not set"),
        "{evidence}"
    );
    let handled = diagnose(None, &pre, Some(&live_with(Some(0), Verdict::GpuDmabuf)));
    assert!(!handled.problems.iter().any(|p| p.title.contains("CPU-assisted")));
    let lines = |d: &Diagnosis| d.steps.iter().flat_map(|s| s.lines.clone()).collect::<Vec<_>>().join("\n");
    assert!(lines(&handled).contains("GPU-handled"), "{}", lines(&handled));
    let host = diagnose(None, &pre, Some(&live_with(None, Verdict::Host)));
    assert!(
        lines(&host).contains("host memory") && !host.problems.iter().any(|p| p.title.contains("queues"))
    );
}

#[test]
fn a_host_that_cannot_tell_memory_type_says_so_first_and_gives_no_watch_longer_advice() {
    let untold =
        |fact: &'static str, says: &str| crate::untold::Untold { family: "rdma", fact, says: says.into() };
    let live = LiveEvidence {
        pid: 7,
        untold: vec![untold(
            "registrations",
            "RDMA registrations cannot be told here: no registration hook attached (x)",
        )],
        ..LiveEvidence::default()
    };
    let d = diagnose(None, &healthy(), Some(&live));
    let step = d.steps.iter().find(|s| s.step == Step::Live).expect("the live step");
    assert!(step.lines[0].starts_with("! RDMA registrations cannot be told here"), "{:?}", step.lines);
    let t = titles(&d);
    assert!(
        t.iter().any(|(s, t)| *s == Severity::High
            && t == "cannot tell here: registrations (no hook that gives it attached)"),
        "{t:?}"
    );
    assert!(!t.iter().any(|(_, t)| t.starts_with("no memory registration")), "{t:?}");
    // Where it can tell, nothing is said, and an empty trace gets its advice.
    let d = diagnose(None, &healthy(), Some(&LiveEvidence { pid: 7, ..LiveEvidence::default() }));
    let t = titles(&d);
    assert!(
        !t.iter().any(|(_, t)| t.starts_with("cannot tell"))
            && t.iter().any(|(_, t)| t.starts_with("no memory registration")),
        "{t:?}"
    );
}
