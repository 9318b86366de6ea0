//! Doctor's live GPU↔GPU and staging evidence: host MRs that are CUDA pinned host buffers (the
//! proof of host staging), copies between GPUs that the driver staged through host memory, and
//! NCCL's P2P/SHM channels held against the imports of GPU memory the tracer saw.

use super::builder::Builder;
use super::model::{LiveEvidence, Severity, Step};
use crate::{
    nccl_log::{NcclLog, PeerTransport},
    units::human_bytes,
};

impl Builder {
    pub(super) fn live_p2p(&mut self, live: &LiveEvidence, nccl: Option<&NcclLog>) {
        let who = format!("PID {}", live.pid);
        if !live.staging_mrs.is_empty() {
            let bytes: u64 = live.staging_mrs.iter().map(|m| m.length).sum();
            let evidence = live
                .staging_mrs
                .iter()
                .take(6)
                .map(|m| {
                    format!(
                        "{} MR on {} in memory from {}",
                        human_bytes(m.length),
                        m.device.as_deref().unwrap_or("?"),
                        m.host_alloc
                    )
                })
                .collect();
            self.problem(
                Severity::High,
                Step::Live,
                format!(
                    "{who} is host-staged, by evidence: {} of its host MR(s) ({}) are CUDA pinned host buffers \
                     registered with the NIC (what NCCL does when GPUDirect RDMA is off)",
                    live.staging_mrs.len(),
                    human_bytes(bytes)
                ),
                evidence,
                Some("GPU memory never reached the NIC: load nvidia-peermem or use DMA-BUF (NCCL_DMABUF_ENABLE=1), and check NCCL_NET_GDR_LEVEL against the GPU–NIC distance"),
            );
        }
        for p in live.p2p_pairs.iter().filter(|p| p.verdict == "p2p-staged" && p.bytes > 0) {
            self.problem(
                Severity::Medium,
                Step::Live,
                format!(
                    "{who} copied {} from GPU {} to GPU {} without peer access ({} call(s)): the driver staged it through host memory",
                    human_bytes(p.bytes),
                    p.src_device,
                    p.dst_device,
                    p.calls
                ),
                vec![],
                Some("enable peer access (cuCtxEnablePeerAccess / cudaDeviceEnablePeerAccess) where cuDeviceCanAccessPeer allows it; `gdr-trace check` shows each GPU pair's path and ACS"),
            );
        }
        let Some(log) = nccl else { return };
        let p2p = log.p2p_channels.iter().filter(|c| c.transport == PeerTransport::P2p).count();
        if p2p == 0 {
            return;
        }
        let ok: Vec<_> = live.gpu_imports.iter().filter(|i| i.ok).collect();
        let line = if ok.is_empty() {
            format!(
                "NCCL's log has {p2p} P2P channel(s); the trace saw no import of GPU memory by {who} \
                 (set up before the trace window, or one process: direct pointers)"
            )
        } else {
            let mut exporters: Vec<String> =
                ok.iter().map(|i| i.exporter_pid.map_or("unknown".into(), |p| format!("PID {p}"))).collect();
            exporters.sort();
            exporters.dedup();
            format!(
                "NCCL's log has {p2p} P2P channel(s), and {who} imported GPU memory {} time(s) (exporters: {}): P2P confirmed at the driver API",
                ok.len(),
                exporters.join(", ")
            )
        };
        self.step(Step::Live, vec![line]);
    }
}
