//! `doctor`'s diagnosis: the GPUDirect troubleshooting order, as a pure function of the NCCL
//! log, the preflight report and (optionally) live driver-level evidence for one process.
//!
//! Order: (1) the NCCL log and the GDR prerequisites it depends on (peermem / DMA-BUF),
//! (2) topology of the pairs the log names, (3) ACS, (4) IOMMU, (5) GPU↔GPU P2P (NCCL's P2P/SHM
//! channels against each GPU pair's path), (6) the `ib_write_bw` A/B that confirms by bandwidth,
//! then other checks. Live evidence, when given, comes first: it is what
//! the driver did, and it is checked against what NCCL said.

use crate::nccl_log::NcclLog;
use crate::preflight::PreflightReport;
/// The ranked diagnosis.
pub fn diagnose(nccl: Option<&NcclLog>, pre: &PreflightReport, live: Option<&LiveEvidence>) -> Diagnosis {
    let mut d = Builder::default();
    if let Some(live) = live {
        d.live(live, nccl);
        d.live_gds(live);
        d.live_gin(live, pre);
    }
    d.nccl(nccl, pre);
    d.topology(nccl, pre);
    d.add_finding(pre, "acs", Step::Acs);
    d.add_finding(pre, "iommu", Step::Iommu);
    d.gpu_p2p(nccl, pre);
    if let Some(live) = live {
        d.live_p2p(live, nccl);
    }
    let ab_tests = ab_tests(nccl, pre);
    d.step(
        Step::Bandwidth,
        if ab_tests.is_empty() {
            vec!["no GPU–NIC pair on this machine to measure".to_string()]
        } else {
            ab_tests
                .iter()
                .map(|t| format!("GPU {} ↔ {} ({}): {}", t.gpu_index, t.ib_device, t.distance, t.why))
                .collect()
        },
    );
    for id in ["driver", "versions", "bar1", "link", "gds"] {
        d.add_finding(pre, id, Step::Other);
    }
    let mut problems = d.problems;
    problems.sort_by_key(|p| (p.severity, p.step));
    let exit_code = u8::from(problems.iter().any(|p| p.severity <= Severity::High));
    Diagnosis { problems, steps: d.steps, ab_tests, exit_code }
}

mod builder;
pub mod gds_live;
mod gin_live;
mod model;
mod p2p;
mod p2p_live;
mod steps;
use builder::Builder;
pub use model::*;
use steps::ab_tests;

#[cfg(test)]
mod tests;
