//! The steps of the diagnosis that need more than a preflight finding: live evidence, the NCCL
//! log, topology of the pairs the log names, and the A/B command lines.

use std::collections::BTreeSet;

use super::builder::Builder;
use super::model::{human_bytes, AbTest, LiveEvidence, Severity, Step, FAILED_VERDICT};
use crate::nccl_log::NcclLog;
use crate::preflight::{PairInfo, PreflightReport, Status};

/// HCAs NCCL says it uses with GDR: `GPU Direct RDMA Enabled for HCA` lines, plus the devices of
/// channels `via NET/IB/<n>/GDRDMA` (mapped through the `Using [n]name` list).
fn gdr_hcas(log: &NcclLog) -> BTreeSet<String> {
    let mut s: BTreeSet<String> = log.hcas().into_iter().filter(|(_, e)| *e).map(|(n, _)| n).collect();
    for c in log.channels.iter().filter(|c| c.gdr) {
        let name = c.dev.and_then(|d| log.net_device_name(&c.net, d)).map(str::to_string);
        s.insert(
            name.unwrap_or_else(|| format!("NET/{}/{}", c.net, c.dev.map_or("?".into(), |d| d.to_string()))),
        );
    }
    s
}

/// HCAs the log names at all.
fn named_hcas(log: &NcclLog) -> BTreeSet<String> {
    let mut s: BTreeSet<String> = log.hcas().into_keys().collect();
    for c in &log.channels {
        if let Some(n) = c.dev.and_then(|d| log.net_device_name(&c.net, d)) {
            s.insert(n.to_string());
        }
    }
    s
}

impl Builder {
    pub(super) fn live(&mut self, live: &LiveEvidence, nccl: Option<&NcclLog>) {
        let total: u64 = live.registrations.iter().map(|t| t.bytes).sum();
        let who =
            format!("PID {}{}", live.pid, live.comm.as_ref().map_or(String::new(), |c| format!(" ({c})")));
        let mut lines = vec![format!(
            "{who}, {:.0} s: {} registration(s), {}",
            live.duration_s,
            live.count(None),
            human_bytes(total)
        )];
        for (v, b) in live.bytes_by_verdict(None) {
            lines.push(format!("  {v}: {}", human_bytes(b)));
        }
        for (v, b) in &live.io_bytes_by_verdict {
            lines.push(format!("  file I/O {v}: {}", human_bytes(*b)));
        }
        // What this host's hooks cannot tell comes first: these lines are not evidence of it.
        let untold: Vec<String> = live.untold.iter().map(|u| format!("! {}", u.says)).collect();
        lines.splice(0..0, untold);
        self.step(Step::Live, lines);
        if !live.untold.is_empty() {
            let facts: Vec<&str> = live.untold.iter().map(|u| u.fact).collect();
            self.problem(
                Severity::High,
                Step::Live,
                format!("cannot tell here: {} (no hook that gives it attached)", facts.join(", ")),
                live.untold.iter().map(|u| u.says.clone()).collect(),
                Some("gdr-trace probes says why each hook did not attach; run doctor -p where they can (a kernel with kprobes or fentry allowed, the RDMA and NVIDIA modules loaded before it starts)"),
            );
        }
        let seen = |fact: &str| !live.untold.iter().any(|u| u.fact == fact);

        if live.count(None) == 0 && seen("registrations") && seen("memory_type") {
            self.problem(
                Severity::Info,
                Step::Live,
                format!("no memory registration by {who} in {:.0} s", live.duration_s),
                vec![],
                Some("NCCL registers its buffers at communicator init: attach before the job starts, or watch longer"),
            );
        }
        let failed = live.count(Some(FAILED_VERDICT));
        if failed > 0 {
            self.problem(
                Severity::High,
                Step::Live,
                format!("{failed} memory registration(s) by {who} failed"),
                vec![],
                None,
            );
        }
        let gdr_claimed = nccl.map(gdr_hcas).unwrap_or_default();
        if !gdr_claimed.is_empty() {
            let per_device = live.has_devices();
            let mut host_only = Vec::new();
            for hca in &gdr_claimed {
                let dev = if per_device { Some(hca.as_str()) } else { None };
                let (gpu, host) = (live.gpu_bytes(dev), live.host_bytes(dev));
                if gpu == 0 && host > 0 {
                    host_only.push((hca.clone(), host));
                }
            }
            if !host_only.is_empty() {
                let names: Vec<&str> = host_only.iter().map(|(h, _)| h.as_str()).collect();
                let title = if per_device {
                    let parts: Vec<String> =
                        host_only.iter().map(|(h, b)| format!("{h}: {}", human_bytes(*b))).collect();
                    format!(
                        "NCCL says GDR enabled for {}, but every byte registered there by this PID was host memory ({})",
                        names.join(", "),
                        parts.join(", ")
                    )
                } else {
                    format!(
                        "NCCL says GDR enabled for {}, but all {} registered by this PID were host memory",
                        names.join(", "),
                        human_bytes(live.host_bytes(None))
                    )
                };
                self.problem(
                    Severity::Critical,
                    Step::Live,
                    title,
                    live.bytes_by_verdict(None).iter().map(|(v, b)| format!("{v}: {}", human_bytes(*b))).collect(),
                    Some("the job is host-staged despite NCCL's log: check that this PID is the one that logged, that nvidia-peermem/DMA-BUF work (ib_write_bw --use_cuda A/B below), and that NCCL_NET_GDR_LEVEL is not overridden per rank"),
                );
            }
        } else if nccl.is_none() && live.gpu_bytes(None) == 0 && live.host_bytes(None) > 0 {
            self.problem(
                Severity::High,
                Step::Live,
                format!(
                    "{who} registered only host memory ({}): host-staged if it is a GPU job",
                    human_bytes(live.host_bytes(None))
                ),
                vec![],
                Some("give the job's NCCL_DEBUG=INFO log with --nccl-log to see why NCCL chose host staging"),
            );
        }
        if let Some(log) = nccl {
            let disabled = log.hcas().values().all(|e| !e) && !log.hca_gdr.is_empty();
            if disabled && live.gpu_bytes(None) > 0 {
                self.problem(
                    Severity::Medium,
                    Step::Live,
                    format!(
                        "the NCCL log says GDR is disabled, yet the driver saw {} of GPU memory registered",
                        human_bytes(live.gpu_bytes(None))
                    ),
                    vec![],
                    Some("the log and the process disagree: is the log from this run?"),
                );
            }
        }
    }

    pub(super) fn nccl(&mut self, nccl: Option<&NcclLog>, pre: &PreflightReport) {
        let mut lines = Vec::new();
        match nccl {
            None => {
                lines.push("no NCCL log given (--nccl-log FILE, from a run with NCCL_DEBUG=INFO)".to_string())
            }
            Some(log) if log.is_empty() => {
                lines.push(format!("{} line(s), none NCCL recognizes", log.lines));
                self.problem(
                    Severity::Medium,
                    Step::NcclLog,
                    "the NCCL log has no recognizable NCCL lines".into(),
                    vec![],
                    Some("run the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH"),
                );
            }
            Some(log) => self.nccl_lines(log, &mut lines),
        }
        self.step(Step::NcclLog, lines);
        for id in ["peermem", "dmabuf", "memory-peers"] {
            self.add_finding(pre, id, Step::NcclLog);
        }
        // NCCL's NIC-side decision against this host's modules.
        if let Some(log) = nccl {
            let nic_ok = pre.finding("peermem").is_some_and(|f| f.status == Status::Pass)
                || pre.finding("dmabuf").is_some_and(|f| f.status == Status::Pass);
            let nic_bad = pre.finding("peermem").is_some_and(|f| f.status == Status::Fail)
                && pre.finding("dmabuf").is_some_and(|f| f.status == Status::Fail);
            if nic_bad && log.hcas().values().any(|e| *e) {
                self.problem(Severity::Medium, Step::NcclLog, "the log says GDR is enabled, but this machine has neither nvidia-peermem nor DMA-BUF: is the log from another node or an earlier boot?".into(), vec![], None);
            }
            if nic_ok && !log.hca_gdr.is_empty() && log.hcas().values().all(|e| !e) {
                self.problem(Severity::Medium, Step::NcclLog, "the log says GDR is disabled for every HCA, but this machine has nvidia-peermem or DMA-BUF now: was it loaded after the job started?".into(), vec![], None);
            }
        }
    }

    fn nccl_lines(&mut self, log: &NcclLog, lines: &mut Vec<String>) {
        lines.push(format!(
            "NCCL {}, network {}, {} process(es)",
            log.version.as_deref().unwrap_or("(version not in log)"),
            log.network.as_deref().unwrap_or("?"),
            log.processes.len()
        ));
        let hcas = log.hcas();
        let on: Vec<&str> = hcas.iter().filter(|(_, e)| **e).map(|(n, _)| n.as_str()).collect();
        let off: Vec<&str> = hcas.iter().filter(|(_, e)| !**e).map(|(n, _)| n.as_str()).collect();
        // Only what the log says: no empty "disabled for []" beside a pair NCCL disabled.
        let pairs_off = log.gpu_gdr.iter().filter(|g| !g.enabled).count();
        let said: Vec<String> = [
            (!on.is_empty()).then(|| format!("enabled for HCA {}", on.join(", "))),
            (!off.is_empty()).then(|| format!("disabled for HCA {}", off.join(", "))),
            (pairs_off > 0).then(|| format!("disabled by distance for {pairs_off} GPU/HCA pair(s)")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !said.is_empty() {
            lines.push(format!("GPU Direct RDMA: {}", said.join("; ")));
        }
        if !log.dmabuf_gpus.is_empty() {
            let g: Vec<String> = log.dmabuf_gpus.iter().map(|g| g.to_string()).collect();
            lines.push(format!("DMA-BUF available on GPU device(s) {}", g.join(", ")));
        }
        let (gdr, plain) = log.channel_counts();
        if gdr + plain > 0 {
            lines.push(format!("{gdr} of {} network channel(s) via GDRDMA", gdr + plain));
        }
        for (k, v) in
            log.env.iter().filter(|(k, _)| k.contains("GDR") || k.contains("DMABUF") || k.contains("IB_HCA"))
        {
            lines.push(format!("{k}={v} (set by environment)"));
        }
        if log.truncated {
            lines
                .push("the log ends mid-line (truncated): its last line counts only if complete".to_string());
        }
        if log.network.as_deref() == Some("Socket") || log.no_ib_device {
            self.problem(Severity::Critical, Step::NcclLog, "NCCL runs over sockets: no RDMA at all, so no GPUDirect RDMA".into(), vec![format!("Using network {}", log.network.as_deref().unwrap_or("?"))], Some("check NCCL_IB_HCA / NCCL_IB_DISABLE and that the RDMA devices are visible in the container (/dev/infiniband)"));
        }
        if !off.is_empty() {
            self.problem(Severity::High, Step::NcclLog, format!("NCCL: GPU Direct RDMA Disabled for HCA {}", off.join(", ")), vec![], Some("the NIC cannot take GPU memory: load nvidia-peermem or enable DMA-BUF (see peermem/dmabuf)"));
        }
        let far: Vec<String> = log
            .gpu_gdr
            .iter()
            .filter(|g| !g.enabled)
            .map(|g| {
                format!("GPU {} / HCA {} (distance {} > {})", g.gpu, g.hca, opt(g.distance), opt(g.level))
            })
            .collect();
        if !far.is_empty() {
            self.problem(
                Severity::High,
                Step::NcclLog,
                format!("NCCL disabled GDR by distance for {} GPU/HCA pair(s)", far.len()),
                far,
                Some("see topology: the GPU and NIC are farther apart than NCCL_NET_GDR_LEVEL allows"),
            );
        }
        if plain > 0 {
            let ex: Vec<String> = log
                .channels
                .iter()
                .filter(|c| !c.gdr)
                .take(4)
                .map(|c| {
                    format!("line {}: Channel {} {} -> {} via {}", c.line, c.channel, c.from, c.to, c.via)
                })
                .collect();
            self.problem(
                Severity::High,
                Step::NcclLog,
                format!("{plain} of {} network channel(s) run without GDRDMA: host-staged", gdr + plain),
                ex,
                None,
            );
        } else if gdr == 0 && log.ring_gdr == Some(false) {
            self.problem(
                Severity::High,
                Step::NcclLog,
                "NCCL connected its rings with GDR 0: host-staged".into(),
                vec![],
                None,
            );
        }
        if !log.warnings.is_empty() {
            self.problem(
                Severity::Medium,
                Step::NcclLog,
                format!("NCCL printed {} warning(s)", log.warnings.len()),
                log.warnings.iter().take(3).cloned().collect(),
                None,
            );
        }
    }

    pub(super) fn topology(&mut self, nccl: Option<&NcclLog>, pre: &PreflightReport) {
        let mut lines = Vec::new();
        if let Some(log) = nccl {
            for hca in named_hcas(log) {
                match pre.nic_by_ib(&hca) {
                    None => {
                        lines.push(format!("{hca}: not on this machine"));
                        self.problem(Severity::Info, Step::Topology, format!("the log names {hca}, which this machine does not have: log from another node?"), vec![], None);
                    }
                    Some(nic) => {
                        let best =
                            pre.pairs.iter().filter(|p| p.nic == nic.bdf).min_by_key(|p| p.path.distance);
                        lines.push(match best {
                            Some(p) => format!(
                                "{hca} ({}): nearest GPU {} ({}) is {}; NCCL GDR at {}: {}",
                                nic.bdf,
                                p.gpu_index,
                                p.gpu,
                                p.path.distance,
                                pre.nccl_net_gdr_level.level,
                                yes_no(p.nccl_gdr)
                            ),
                            None => format!("{hca} ({}): no GPU on this machine", nic.bdf),
                        });
                    }
                }
            }
        }
        self.step(Step::Topology, lines);
        self.add_finding(pre, "topology", Step::Topology);
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "unknown",
    }
}

/// Up to two pairs to measure: the worst nearest pair (preferring NICs the log names), and a
/// good one as the control.
pub(super) fn ab_tests(nccl: Option<&NcclLog>, pre: &PreflightReport) -> Vec<AbTest> {
    let named = nccl.map(named_hcas).unwrap_or_default();
    let mut nearest: Vec<&PairInfo> = pre.pairs.iter().filter(|p| p.nearest).collect();
    nearest.sort_by_key(|p| (!named.contains(&p.ib_device), std::cmp::Reverse(p.path.distance), p.gpu_index));
    let mut chosen: Vec<(&PairInfo, String)> = Vec::new();
    if let Some(worst) = nearest.first() {
        let why = if worst.nccl_gdr == Some(false) {
            "farthest nearest-pair: expect A well below B if P2P through the CPU is slow"
        } else {
            "A close to B (line rate) means GPU memory reaches the NIC directly"
        };
        chosen.push((worst, why.to_string()));
        if let Some(good) = nearest.iter().find(|p| p.nccl_gdr == Some(true) && p.gpu != worst.gpu) {
            if worst.nccl_gdr != Some(true) {
                chosen.push((good, "control: a pair NCCL would use GDR for".to_string()));
            }
        }
    }
    let dmabuf = pre.finding("peermem").is_some_and(|f| f.status != Status::Pass)
        && pre.finding("dmabuf").is_some_and(|f| f.status == Status::Pass);
    let cuda_flag = if dmabuf { " --use_cuda_dmabuf" } else { "" };
    chosen
        .into_iter()
        .map(|(p, why)| {
            let base = format!("-d {} -a --report_gbits", p.ib_device);
            let gpu = format!(
                "CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda={}{cuda_flag} {base}",
                p.gpu_index
            );
            let host = format!("ib_write_bw {base}");
            AbTest {
                gpu_index: p.gpu_index,
                gpu: p.gpu.clone(),
                ib_device: p.ib_device.clone(),
                distance: p.path.distance,
                why,
                gpu_client: format!("{gpu} <this-node>"),
                gpu_server: gpu,
                host_client: format!("{host} <this-node>"),
                host_server: host,
            }
        })
        .collect()
}
