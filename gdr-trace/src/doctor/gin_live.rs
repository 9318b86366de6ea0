//! Doctor's live GPU-initiated networking evidence: which mode the process got (GPU-handled,
//! CPU-assisted, host queues) from its queue pins and the mapping of the NIC's doorbell page
//! into the GPU, held against nvidia.ko's PeerMappingOverride as `check` read it.

use super::builder::Builder;
use super::model::{LiveEvidence, Severity, Step};
use crate::{preflight::PreflightReport, queues::gin::GinMode};

impl Builder {
    pub(super) fn live_gin(&mut self, live: &LiveEvidence, pre: &PreflightReport) {
        let Some(q) = &live.queues else { return };
        let who = format!("PID {}", live.pid);
        let Some(gin) = &q.gin else { return };
        match gin.mode {
            GinMode::GpuHandled => self.step(
                Step::Live,
                vec![format!("{who}: GPU-initiated networking, GPU-handled: {}", gin.evidence.join("; "))],
            ),
            GinMode::HostQueues => self.step(
                Step::Live,
                vec![format!(
                    "{who}: its NIC queues are in host memory ({}): no GPU-initiated networking",
                    gin.evidence.join("; ")
                )],
            ),
            GinMode::CpuAssisted => {
                let mut evidence = gin.evidence.clone();
                if let Some(f) = pre.finding("peer-mapping") {
                    evidence.push(format!("check: {}", f.summary));
                }
                self.problem(
                    Severity::High,
                    Step::Live,
                    format!(
                        "{who} put its NIC queues in GPU memory but the NIC's doorbell page is not mapped into the GPU: \
                         CPU-assisted GPU-initiated networking (a CPU thread rings every doorbell)"
                    ),
                    evidence,
                    Some("set options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\" and reload nvidia.ko (or run the job with CAP_SYS_ADMIN); NVSHMEM prints \"cudaHostRegister with IoMemory failed\" when this happens"),
                );
            }
        }
        if q.queues.unknown_pins() > 0 {
            self.step(
                Step::Live,
                vec![format!(
                    "{who}: {} pin(s) of unknown purpose ({}): counted as neither registrations nor queues",
                    q.queues.unknown_pins(),
                    crate::queues::PURPOSE_UNKNOWN
                )],
            );
        }
    }
}
