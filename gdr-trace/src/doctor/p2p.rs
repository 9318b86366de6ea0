//! Doctor's GPU↔GPU step: NCCL's P2P and SHM channels, and its `P2P is disabled` lines, held
//! against the PCIe path of each GPU pair (`check`'s `gpu_pairs`).
//!
//! NCCL names GPUs by NVML index (PCI bus order, the order of `gpu_pairs`) or, before 2.19, by
//! bus id. SHM between a pair with a direct path means P2P was available and not used; P2P
//! between a pair across the CPU works, only slower.

use std::collections::{BTreeMap, BTreeSet};

use super::builder::Builder;
use super::model::{Severity, Step};
use crate::nccl_log::{GpuRef, NcclLog, P2pChannel, PeerTransport};
use crate::preflight::gpu_pairs::Route;
use crate::preflight::nvlink::Nvlink;
use crate::preflight::{GpuPair, PreflightReport, Status};

/// The PCI address of the GPU `g` names, when this machine has it.
fn bdf_of<'a>(pre: &'a PreflightReport, g: &GpuRef) -> Option<&'a str> {
    match g {
        GpuRef::NvmlIndex(i) => pre.gpus.get(*i as usize).map(|g| g.bdf.as_str()),
        GpuRef::BusId(b) => pre.gpus.iter().find(|g| g.bdf == *b).map(|g| g.bdf.as_str()),
    }
}

fn pair_of<'a>(pre: &'a PreflightReport, a: &GpuRef, b: &GpuRef) -> Result<&'a GpuPair, String> {
    let (Some(ba), Some(bb)) = (bdf_of(pre, a), bdf_of(pre, b)) else {
        return Err(format!("{a} / {b}"));
    };
    pre.gpu_pairs.iter().find(|p| p.is(ba, bb)).ok_or_else(|| format!("{a} / {b}"))
}

/// `GPU 0 and GPU 1 (0000:18:00.0 ↔ 0000:19:00.0: PIX, ACS off, NVLink unknown)`
fn who(p: &GpuPair) -> String {
    format!("GPU {} and GPU {} ({} ↔ {}: {})", p.gpu_a_index, p.gpu_b_index, p.gpu_a, p.gpu_b, p.describe())
}

fn examples(cs: &[&P2pChannel]) -> Vec<String> {
    cs.iter()
        .take(3)
        .map(|c| format!("line {}: Channel {} {} -> {} via {}", c.line, c.channel, c.from, c.to, c.via))
        .collect()
}

/// NCCL's channels between one GPU pair.
struct PairUse<'a> {
    pair: &'a GpuPair,
    p2p: Vec<&'a P2pChannel>,
    shm: Vec<&'a P2pChannel>,
}

const SHM_FIX: &str =
    "NCCL_P2P_DISABLE=1, or an NCCL_P2P_LEVEL below this pair's distance, turns P2P off; ranks \
     in separate containers need one IPC namespace (--ipc=host, or one pod) to open each other's CUDA IPC / \
     cuMem handles; 'P2P is disabled between connected GPUs' in the log means NVML reports no P2P (IOMMU, \
     BIOS, virtualization)";

impl Builder {
    pub(super) fn gpu_p2p(&mut self, nccl: Option<&NcclLog>, pre: &PreflightReport) {
        let channels = nccl.map_or(&[][..], |l| &l.p2p_channels[..]);
        let disabled = nccl.map_or(&[][..], |l| &l.p2p_disabled[..]);
        if pre.gpu_pairs.is_empty() && channels.is_empty() && disabled.is_empty() {
            return;
        }
        let mut lines = Vec::new();
        if let Some(f) = pre.finding("gpu-p2p") {
            lines.push(format!("gpu-p2p: {} — {}", f.status, f.summary));
            if f.status == Status::Fail {
                let ev = f.evidence.iter().take(4).map(|e| format!("{} = {}", e.path, e.value)).collect();
                self.problem(
                    Severity::High,
                    Step::GpuP2p,
                    format!("gpu-p2p: {}", f.summary),
                    ev,
                    f.hint.as_deref(),
                );
            }
        }
        let mut env = Vec::new();
        if let Some(log) = nccl {
            let (p, s) = log.p2p_counts();
            if p + s > 0 {
                lines.push(format!("NCCL GPU↔GPU channels: {p} via P2P, {s} via SHM"));
            }
            for (k, v) in
                log.env.iter().filter(|(k, _)| k.starts_with("NCCL_P2P") || k.starts_with("NCCL_SHM"))
            {
                env.push(format!("{k}={v} (set by environment)"));
            }
            lines.extend(env.iter().cloned());
        }
        let mut uses: BTreeMap<(usize, usize), PairUse> = BTreeMap::new();
        let mut elsewhere = BTreeSet::new();
        for c in channels {
            let (Some(a), Some(b)) = (&c.from_gpu, &c.to_gpu) else { continue };
            match pair_of(pre, a, b) {
                Ok(pair) => {
                    let u = uses.entry((pair.gpu_a_index, pair.gpu_b_index)).or_insert(PairUse {
                        pair,
                        p2p: vec![],
                        shm: vec![],
                    });
                    match c.transport {
                        PeerTransport::P2p => u.p2p.push(c),
                        PeerTransport::Shm => u.shm.push(c),
                    }
                }
                Err(names) if a != b => {
                    elsewhere.insert(names);
                }
                Err(_) => {}
            }
        }
        for u in uses.values() {
            self.pair_use(u, nccl, &env, &mut lines);
        }
        for d in disabled {
            let (a, b) = (GpuRef::NvmlIndex(d.gpu_a), GpuRef::NvmlIndex(d.gpu_b));
            let pair = pair_of(pre, &a, &b).ok();
            let path = pair.map_or("not on this machine".to_string(), GpuPair::describe);
            let kind = if d.nvlink { "NVLINK connected" } else { "connected" };
            let text = format!(
                "line {}: P2P is disabled between {kind} GPUs {} and {} ({path})",
                d.line, d.gpu_a, d.gpu_b
            );
            lines.push(text.clone());
            if d.nvlink {
                self.problem(Severity::High, Step::GpuP2p, format!("NCCL: P2P is disabled between NVLINK connected GPUs {} and {}: NCCL stops", d.gpu_a, d.gpu_b), vec![text], Some("NCCL calls it a hardware issue: check the links (nvidia-smi nvlink -s) and, on NVSwitch systems, the fabric manager"));
            } else if pair.is_some_and(|p| p.route() == Route::Direct) {
                self.problem(Severity::Medium, Step::GpuP2p, format!("NCCL: P2P is disabled between connected GPUs {} and {}, though their PCIe path is {}", d.gpu_a, d.gpu_b, path), vec![text], Some("NVML reports no P2P below one switch: the IOMMU in DMA mode, a BIOS setting or virtualization blocks it (nvidia-smi topo -p2p rw)"));
            }
        }
        if !elsewhere.is_empty() {
            let names: Vec<String> = elsewhere.into_iter().collect();
            self.problem(
                Severity::Info,
                Step::GpuP2p,
                format!("the log's GPU↔GPU channels name GPUs this machine does not have ({}): log from another node?", names.join(", ")),
                vec![],
                None,
            );
        }
        self.step(Step::GpuP2p, lines);
    }

    fn pair_use(&mut self, u: &PairUse, nccl: Option<&NcclLog>, env: &[String], lines: &mut Vec<String>) {
        let p = u.pair;
        // NVLS (NVSwitch) in the log is NVLink between every GPU pair of the node.
        let nvls = p.nvlink == Nvlink::Unknown && nccl.is_some_and(|l| l.nvls);
        let route = if nvls { Route::Direct } else { p.route() };
        // NCCL's default P2P level (PXB) allows P2P across the CPU only over NVLink (or on AMD
        // CPUs with two GPUs): without a level in the environment, such P2P points at NVLink.
        let level_set = nccl.is_some_and(|l| l.env.contains_key("NCCL_P2P_LEVEL"));
        let likely_nvlink = route == Route::AcrossCpu && p.nvlink == Nvlink::Unknown && !level_set;
        let mut modes: Vec<&str> = u.p2p.iter().map(|c| c.mode.as_str()).collect();
        modes.sort_unstable();
        modes.dedup();
        let expect = match (route, u.p2p.is_empty(), u.shm.is_empty()) {
            (Route::Direct, _, false) => "P2P was available",
            (Route::Direct, _, true) if nvls => "P2P over NVLink",
            (Route::Direct, _, true) => "direct P2P, as the topology allows",
            (Route::AcrossCpu | Route::Redirected, true, _) => {
                "SHM expected: the path crosses the CPU or root complex"
            }
            (Route::AcrossCpu, false, _) if likely_nvlink => {
                "P2P although PCIe crosses the CPU: at NCCL's default NCCL_P2P_LEVEL (PXB) that means NVLink"
            }
            (Route::AcrossCpu, false, _) => "P2P across the CPU: works, slower",
            (Route::Redirected, false, _) => "P2P detours through the root complex (ACS redirect)",
            _ => "the path is unknown",
        };
        lines.push(format!(
            "GPU {} ↔ GPU {} ({}{}): {} channel(s) via P2P{}, {} via SHM — {expect}",
            p.gpu_a_index,
            p.gpu_b_index,
            p.describe(),
            if nvls { "; NVLS in the log: NVSwitch" } else { "" },
            u.p2p.len(),
            if modes.is_empty() { String::new() } else { format!(" ({})", modes.join(", ")) },
            u.shm.len()
        ));
        if !u.shm.is_empty() && route == Route::Direct {
            let mut ev = examples(&u.shm);
            if nvls {
                ev.push(
                    "NVLS multicast support is available (in the log): the GPUs share NVSwitch, so NVLink"
                        .into(),
                );
            }
            ev.extend(env.iter().cloned());
            let idx = (p.gpu_a_index as u32, p.gpu_b_index as u32);
            for d in nccl.map_or(&[][..], |l| &l.p2p_disabled[..]) {
                if (d.gpu_a, d.gpu_b) == idx || (d.gpu_b, d.gpu_a) == idx {
                    ev.push(format!(
                        "line {}: P2P is disabled between connected GPUs {} and {}",
                        d.line, d.gpu_a, d.gpu_b
                    ));
                }
            }
            self.problem(
                Severity::High,
                Step::GpuP2p,
                format!("NCCL uses SHM between {}: P2P was available but not used", who(p)),
                ev,
                Some(SHM_FIX),
            );
        }
        if !u.p2p.is_empty() {
            match route {
                Route::AcrossCpu if !likely_nvlink => self.problem(
                    Severity::Info,
                    Step::GpuP2p,
                    format!("NCCL uses P2P between {}: fine, but across the CPU it is slower than below one PCIe switch", who(p)),
                    examples(&u.p2p),
                    Some("NCCL_P2P_LEVEL (or an AMD CPU with two GPUs) allows it; measure with CUDA's p2pBandwidthLatencyTest if the bandwidth matters"),
                ),
                Route::Redirected => self.problem(
                    Severity::Medium,
                    Step::GpuP2p,
                    format!("NCCL uses P2P between {}, though ACS on {} redirects it to the root complex", who(p), p.path.ports.join(", ")),
                    examples(&u.p2p),
                    Some("every P2P transfer takes the detour through the root complex: clear ACS RR/CR on these ports (bare metal) to let it cross the switch"),
                ),
                _ => {}
            }
        }
    }
}
