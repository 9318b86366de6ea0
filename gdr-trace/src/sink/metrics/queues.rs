//! Queue memory and GPU-initiated networking in the fleet view. Node-wide series by queue kind
//! and memory (bounded by construction: 7 kinds x a handful of memories), a count of processes
//! per GPU-initiated networking mode, and the mode of each process identity among the top N of
//! the registration ranking (the rest only in the count). Queue pins are no registrations: none
//! of this is in `registrations`, `registered_bytes` or `live_pinned_bytes`.

use std::collections::BTreeMap;

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::labels::{labels, with, Labels, ProcKey};
use super::topn::Totals;
use crate::queues::{gin::GinMode, QueuePin, QueueReport};

#[derive(Debug, Default)]
pub struct QueueMetrics {
    /// Pins ever made, by (kind, memory): counters (a report forgets exited processes).
    pins: BTreeMap<(String, String), Totals>,
    report: QueueReport,
}

impl QueueMetrics {
    pub fn pinned(&mut self, pin: &QueuePin) {
        let key = (pin.kind.to_string(), pin.memory.to_string());
        self.pins.entry(key).or_default().add(Totals { count: 1, bytes: pin.length });
    }

    pub fn fold(&mut self, report: &QueueReport) {
        self.report = report.clone();
    }

    /// `key`: a pid's process identity; `shown`: whether it has series of its own.
    pub fn render(
        &self,
        reg: &mut Registry,
        key: impl Fn(u32, &str) -> ProcKey,
        shown: impl Fn(&ProcKey) -> bool,
    ) {
        let pins = Family::<Labels, Counter>::default();
        let bytes = Family::<Labels, Counter>::default();
        for ((kind, memory), t) in &self.pins {
            let l = vec![("kind".into(), kind.clone()), ("memory".into(), memory.clone())];
            pins.get_or_create(&l).inc_by(t.count);
            bytes.get_or_create(&l).inc_by(t.bytes);
        }
        reg.register("queue_pins", "Queue memory pinned by NIC drivers (rings, doorbell pages, DEVX UMEMs), by kind and memory: never registrations", pins);
        reg.register_with_unit(
            "queue_pinned",
            "Bytes of queue memory pinned, by kind and memory",
            Unit::Bytes,
            bytes,
        );
        let live = Family::<Labels, Gauge>::default();
        let modes = Family::<Labels, Gauge>::default();
        for mode in GinMode::ALL {
            let _ = modes.get_or_create(&vec![("mode".into(), mode.as_str().into())]);
        }
        let per_process = Family::<Labels, Gauge>::default();
        for p in self.report.procs.iter().filter(|p| !p.queues.exited) {
            for ((kind, memory), t) in &p.queues.tallies {
                let l = vec![("kind".into(), kind.to_string()), ("memory".into(), memory.to_string())];
                live.get_or_create(&l).inc_by(t.live_bytes as i64);
            }
            let Some(gin) = &p.gin else { continue };
            modes.get_or_create(&vec![("mode".into(), gin.mode.as_str().into())]).inc();
            let k = key(p.queues.pid, &p.queues.comm);
            if shown(&k) {
                per_process.get_or_create(&with(labels(&k), &[("mode", gin.mode.as_str())])).inc();
            }
        }
        reg.register_with_unit(
            "queue_live_pinned",
            "Bytes of queue memory pinned now, by kind and memory",
            Unit::Bytes,
            live,
        );
        reg.register(
            "gin_processes",
            "Running processes with queue memory, by GPU-initiated networking mode (gpu-handled, cpu-assisted, host-queues)",
            modes,
        );
        reg.register(
            "process_gin",
            "Processes of an identity by GPU-initiated networking mode (top identities; the rest only in gin_processes)",
            per_process,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        events::Context,
        mr::{classify::Verdict, correlate::Registration},
        queues::{QueueKind, Queues},
    };

    #[test]
    fn queue_series_by_kind_and_memory_and_gin_mode_per_identity() {
        let mut q = Queues::new(true);
        let mut m = QueueMetrics::default();
        for (pid, kind, memory, umem) in [
            (7, QueueKind::DevxUmem, Verdict::GpuDmabuf, 1),
            (7, QueueKind::Cq, Verdict::Host, 2),
            (8, QueueKind::Qp, Verdict::Host, 3),
        ] {
            let ctx = Context { pid, tid: pid, comm: format!("job{pid}"), ..Default::default() };
            let r = Registration { ctx, length: 4096, umem: Some(umem), ..Default::default() };
            let pin = QueuePin::of(&r, kind, memory);
            q.pinned(&pin);
            m.pinned(&pin);
        }
        m.fold(&q.report());
        let mut reg = Registry::with_prefix("gdr_trace");
        let key = |_: u32, comm: &str| ProcKey { comm: comm.into(), ..Default::default() };
        m.render(&mut reg, key, |k| k.comm == "job7");
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &reg).unwrap();
        for want in [
            r#"gdr_trace_queue_pins_total{kind="devx-umem",memory="gpu-dmabuf"} 1"#,
            r#"gdr_trace_queue_pinned_bytes_total{kind="cq",memory="host"} 4096"#,
            r#"gdr_trace_queue_live_pinned_bytes{kind="qp",memory="host"} 4096"#,
            r#"gdr_trace_gin_processes{mode="cpu-assisted"} 1"#,
            r#"gdr_trace_gin_processes{mode="host-queues"} 1"#,
            r#"gdr_trace_gin_processes{mode="gpu-handled"} 0"#,
            r#"gdr_trace_process_gin{comm="job7",container="",pod="",uid="",mode="cpu-assisted"} 1"#,
        ] {
            assert!(body.contains(want), "{want} missing:\n{body}");
        }
        // An identity outside the top has no series of its own.
        assert!(!body.contains(r#"comm="job8""#), "{body}");
    }
}
