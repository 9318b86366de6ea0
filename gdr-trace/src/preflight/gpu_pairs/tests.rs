//! The `gpu-p2p` finding and matrix on hand-built pairs (the fixture trees cover the sysfs side).

use super::*;
use crate::preflight::nvlink::NvlinkPair;

fn pair(a: (usize, &str), b: (usize, &str), d: Distance, acs: AcsState, nv: NvlinkPair) -> GpuPair {
    let ports = if acs == AcsState::NotOnPath {
        vec![]
    } else {
        vec!["0000:17:00.0".to_string(), "0000:17:01.0".to_string()]
    };
    GpuPair {
        gpu_a: b_str(a.1),
        gpu_b: b_str(b.1),
        gpu_a_index: a.0,
        gpu_b_index: b.0,
        path: PathInfo { distance: d, common_bridge: None, ports, bridges: vec![] },
        acs,
        nvlink: nv.nvlink,
        nvlink_links: nv.links,
    }
}

fn b_str(s: &str) -> String {
    s.to_string()
}

const UNKNOWN: NvlinkPair = NvlinkPair { nvlink: Nvlink::Unknown, links: None };

fn fs() -> Fs {
    // Only pairs whose ACS redirects read config space; these tests' ports do not exist there.
    Fs::new(std::path::Path::new("/sys"), std::path::Path::new("/proc")).unwrap()
}

#[test]
fn nvlink_makes_a_far_pair_direct() {
    let nv = NvlinkPair { nvlink: Nvlink::Yes, links: Some(4) };
    let pairs = vec![pair((0, "0000:18:00.0"), (1, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, nv)];
    assert_eq!(pairs[0].route(), Route::Direct);
    let f = finding(&fs(), &pairs, &NvlinkTable::unknown("NVML (driver 560.35.03), 2 GPU(s)"));
    assert_eq!(f.status, Status::Pass);
    assert_eq!(
        f.summary,
        "all 1 GPU pair(s) have a direct P2P path (1 over NVLink, the rest below a PCIe switch)"
    );
    assert_eq!(cell(&pairs[0]), "NV4");
    assert_eq!(pairs[0].describe(), "SYS, ACS not-on-path, NVLink yes (4 link(s))");
}

#[test]
fn a_pair_across_the_cpu_warns_and_says_nvlink_is_unknown() {
    let pairs = vec![
        pair((0, "0000:18:00.0"), (1, "0000:19:00.0"), Distance::Pix, AcsState::Off, UNKNOWN),
        pair((0, "0000:18:00.0"), (2, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, UNKNOWN),
        pair((1, "0000:19:00.0"), (2, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, UNKNOWN),
    ];
    let f = finding(&fs(), &pairs, &NvlinkTable::unknown("libnvidia-ml.so.1 not loadable (x)"));
    assert_eq!(f.status, Status::Warn);
    assert_eq!(
        f.summary,
        "GPU↔GPU P2P between 0000:18:00.0 and 0000:9a:00.0 crosses the CPU (SYS): CUDA peer copies are \
         staged through host memory / NCCL falls back to SHM unless NVLink connects them (NVLink \
         unknown); 2 of 3 GPU pair(s) without a direct path"
    );
    assert_eq!(f.evidence.last().unwrap().value, "libnvidia-ml.so.1 not loadable (x)");
    assert!(f.hint.as_deref().unwrap().contains("NCCL_P2P_LEVEL=SYS"));
    // NVML said "no NVLink": the same warning, without the "unless".
    let no = NvlinkPair { nvlink: Nvlink::No, links: None };
    let pairs = vec![pair((0, "0000:18:00.0"), (1, "0000:9a:00.0"), Distance::Phb, AcsState::NotOnPath, no)];
    let f = finding(&fs(), &pairs, &NvlinkTable::unknown("NVML"));
    assert!(f.summary.contains("crosses the CPU (PHB): CUDA peer copies are staged through host memory / NCCL falls back to SHM; 1 of 1"), "{}", f.summary);
}

#[test]
fn acs_redirect_below_a_switch_fails_before_distance_warns() {
    let pairs = vec![
        pair((0, "0000:18:00.0"), (1, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, UNKNOWN),
        pair((0, "0000:18:00.0"), (2, "0000:19:00.0"), Distance::Pix, AcsState::Redirect, UNKNOWN),
    ];
    let f = finding(&fs(), &pairs, &NvlinkTable::unknown("no NVML"));
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.summary.starts_with(
            "GPU↔GPU P2P between 0000:18:00.0 and 0000:19:00.0 crosses the root complex (ACS redirect on \
             0000:17:00.0, 0000:17:01.0): CUDA peer copies are staged through host memory / NCCL falls \
             back to SHM; 2 of 2"
        ),
        "{}",
        f.summary
    );
    assert!(
        f.evidence[0].value.starts_with("GPU 0 ↔ GPU 2 (0000:19:00.0): PIX, ACS redirect"),
        "{:?}",
        f.evidence
    );
    assert!(f.hint.as_deref().unwrap().contains("ECAP_ACS+0x6.w=0000"));
    assert_eq!(cell(&pairs[1]), "PIX!");
}

#[test]
fn unreadable_acs_is_unknown_and_one_gpu_is_not_applicable() {
    let pairs =
        vec![pair((0, "0000:18:00.0"), (1, "0000:19:00.0"), Distance::Pxb, AcsState::Unknown, UNKNOWN)];
    let f = finding(&fs(), &pairs, &NvlinkTable::unknown("no NVML"));
    assert_eq!(f.status, Status::Unknown);
    assert_eq!(cell(&pairs[0]), "PXB?");
    let f = finding(&fs(), &[], &NvlinkTable::unknown("no NVML"));
    assert_eq!(f.status, Status::NotApplicable);
}

#[test]
fn matrix_is_symmetric_with_x_on_the_diagonal() {
    let pairs = vec![
        pair((0, "0000:18:00.0"), (1, "0000:19:00.0"), Distance::Pix, AcsState::Off, UNKNOWN),
        pair((0, "0000:18:00.0"), (2, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, UNKNOWN),
        pair((1, "0000:19:00.0"), (2, "0000:9a:00.0"), Distance::Sys, AcsState::NotOnPath, UNKNOWN),
    ];
    let gpus = [(0, "0000:18:00.0"), (1, "0000:19:00.0"), (2, "0000:9a:00.0")];
    // Laid out for a terminal (boxes), whatever this test's own stdout is.
    let style = crate::term::Style::terminal(100);
    let m =
        crate::term::with_style(style, || render_matrix(&gpus, &pairs, "libnvidia-ml.so.1 not loadable (x)"))
            .unwrap();
    let row = |i: usize| m.lines().find(|l| l.contains(&format!("│ GPU {i} "))).unwrap().to_string();
    let cells = |l: String| -> Vec<String> {
        l.split(['│', '┆']).map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()
    };
    assert_eq!(cells(row(0)), ["GPU 0", "0000:18:00.0", "X", "PIX", "SYS"]);
    assert_eq!(cells(row(1)), ["GPU 1", "0000:19:00.0", "PIX", "X", "SYS"]);
    assert_eq!(cells(row(2)), ["GPU 2", "0000:9a:00.0", "SYS", "SYS", "X"]);
    assert!(m.ends_with("NVLink: unknown — libnvidia-ml.so.1 not loadable (x)\n"), "{m}");
    assert!(render_matrix(&gpus[..1], &[], "x").is_none());
}
