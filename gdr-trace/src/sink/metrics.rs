//! Prometheus metrics for `serve`: the same line's results as counters and gauges, encoded by
//! `prometheus-client` (OpenMetrics text) into a snapshot the HTTP server hands out, as it is or
//! as Prometheus text 0.0.4 ([`Format`], from the request's Accept header).
//!
//! Cardinality stays bounded: per-process series exist for the top N process identities
//! (comm, container, pod, uid) by registered bytes, ranked within each uid first (one uid's many
//! jobs cannot hide another's); everything else is summed under `comm="other"`.
//! Counters stay monotonic through re-ranking ([`TopN`]): what a process did while it was shown
//! under `other` stays there when it enters the top N (its own series counts the rest), one
//! leaving the top N hands its series' value to `other`, and forgotten processes are folded
//! into `other` for good, as are a process identity's series once its last process exits (a
//! snapshot later, so its last values are served). The `device` label is only a device the
//! kernel lists, and each uid owns a bounded number of series ([`budget`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::Instant,
};

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge, info::Info},
    registry::{Registry, Unit},
};

use super::{Lost, Output, Sink};
use crate::{
    audit::{counts, identity::Resolver, Auditor, Posture, ProcessFacts},
    events::{storage::StorageEvent, Event},
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
};

pub mod budget;
mod families;
mod format;
mod labels;
mod queues;
mod storage;
mod topn;
mod unverified;
use budget::{Budget, Devices};
pub use families::{hook_families, rdma_traced};
pub use format::Format;
pub use labels::ProcKey;
use labels::{key_of, labels, with, Labels};
pub use storage::StorageMetrics;
pub use topn::{TopN, Totals};

/// What the HTTP server serves: the latest snapshot and health.
#[derive(Debug, Default)]
pub struct Shared {
    pub body: Mutex<String>,
    pub health: Mutex<Health>,
}

#[derive(Debug, Default, Clone)]
pub struct Health {
    pub attached: usize,
    pub hooks: usize,
    /// What cannot be told on this host (`crate::untold`), one line each.
    pub untold: Vec<String>,
    pub last_update: Option<Instant>,
    pub stopped: bool,
}

pub struct MetricsSink {
    shared: Arc<Shared>,
    resolver: Resolver,
    auditor: Auditor,
    posture: Posture,
    markers: Vec<String>,
    top: TopN<ProcKey>,
    storage: StorageMetrics,
    queues: queues::QueueMetrics,
    keys: HashMap<u32, ProcKey>,
    releases: BTreeMap<String, u64>,
    gpu_pins: Totals,
    gpu_freed: u64,
    unverified: unverified::Unverified,
    hooks: Vec<HookStatus>,
    kernel: String,
    /// Each fact's family and name, 1 when told here, 0 when it cannot be (absent or left out:
    /// no series).
    told: Vec<(&'static str, &'static str, i64)>,
    devices: Devices,
    budget: Budget,
    /// Identities whose last process exited: retired at the next snapshot but one.
    exiting: Vec<ProcKey>,
    retiring: Vec<ProcKey>,
}

impl MetricsSink {
    pub fn new(
        shared: Arc<Shared>,
        top_n: usize,
        posture: Posture,
        markers: Vec<String>,
        resolver: Resolver,
    ) -> Self {
        Self {
            shared,
            resolver,
            auditor: Auditor::new(),
            posture,
            markers,
            top: TopN::new(top_n, top_n * 20 + 100),
            storage: StorageMetrics::new(top_n, top_n * 20 + 100),
            queues: queues::QueueMetrics::default(),
            keys: HashMap::new(),
            releases: BTreeMap::new(),
            gpu_pins: Totals::default(),
            gpu_freed: 0,
            unverified: Default::default(),
            hooks: Vec::new(),
            kernel: String::new(),
            told: Vec::new(),
            devices: Devices::system(),
            budget: Budget::default(),
            exiting: Vec::new(),
            retiring: Vec::new(),
        }
    }

    /// Device names checked against `devices` instead of /sys/class/infiniband.
    pub fn with_devices(mut self, devices: Devices) -> Self {
        self.devices = devices;
        self
    }

    fn key(&self, pid: u32, comm: &str) -> ProcKey {
        key_of(&self.keys, pid, comm)
    }
    /// Encodes the current state into the snapshot the server hands out.
    pub fn render(&mut self, agg: &Aggregator, lost: &Lost) -> String {
        self.top.rerank();
        let mut reg = Registry::with_prefix("gdr_trace");
        let other = ProcKey { comm: "other".into(), ..Default::default() };
        let regs = Family::<Labels, Counter>::default();
        let bytes = Family::<Labels, Counter>::default();
        let (own, rest) = self.top.series();
        let own = own.into_iter().map(|(k, s, t)| (labels(&k), s, t));
        for (l, series, t) in own.chain(rest.into_iter().map(|(s, t)| (labels(&other), s, t))) {
            let (verdict, device) = series.split_once('\t').unwrap_or((&series, ""));
            let l = with(l, &[("verdict", verdict), ("device", device)]);
            regs.get_or_create(&l).inc_by(t.count);
            bytes.get_or_create(&l).inc_by(t.bytes);
        }
        reg.register(
            "registrations",
            "Memory registrations by process, container, pod, uid, verdict and device",
            regs,
        );
        reg.register_with_unit(
            "registered",
            "Bytes registered (successful registrations)",
            Unit::Bytes,
            bytes,
        );

        let live = Family::<Labels, Gauge>::default();
        let verdicts = Family::<Labels, Gauge>::default();
        for p in agg.summaries() {
            let k = self.key(p.pid, &p.comm);
            let k = if self.top.in_top(&k) { k } else { other.clone() };
            for (v, t) in &p.by_verdict {
                live.get_or_create(&with(labels(&k), &[("verdict", v.as_str())])).inc_by(t.live_bytes as i64);
            }
            verdicts
                .get_or_create(&vec![("process_verdict".into(), p.process_verdict.as_str().into())])
                .inc();
        }
        for (v, n) in agg.forgotten() {
            verdicts.get_or_create(&vec![("process_verdict".into(), v.as_str().into())]).inc_by(*n as i64);
        }
        reg.register_with_unit("live_pinned", "Bytes registered and not yet released", Unit::Bytes, live);
        let moved = Family::<Labels, Counter>::default();
        // Host in and out always exist (at 0 before any work request): a dashboard has a series.
        for dir in ["out", "in"] {
            let _ = moved
                .get_or_create(&vec![("verdict".into(), "host".into()), ("direction".into(), dir.into())]);
        }
        // Dropped processes' bytes included: a counter never goes down.
        for (v, m) in agg.bytes_total() {
            for (dir, n) in [("out", m.out), ("in", m.inn)] {
                moved
                    .get_or_create(&vec![("verdict".into(), v.clone()), ("direction".into(), dir.into())])
                    .inc_by(n);
            }
        }
        // --no-bytes: no series at all (not traced is not 0; hook_family_enabled says why).
        if !crate::facts::bytes_left_out(&self.hooks) {
            reg.register(
                "rdma_bytes",
                "Bytes moved by work requests (out: the NIC read local memory; in: it wrote it), by the verdict of the MR",
                moved,
            );
        }
        reg.register("processes", "Processes seen since start, by process verdict", verdicts);

        let releases = Family::<Labels, Counter>::default();
        for (v, n) in &self.releases {
            releases.get_or_create(&vec![("verdict".into(), v.clone())]).inc_by(*n);
        }
        reg.register("releases", "Registrations released, by verdict", releases);
        let over = Family::<Labels, Counter>::default();
        for (uid, n) in &self.budget.over {
            over.get_or_create(&vec![("uid".into(), uid.clone())]).inc_by(*n);
        }
        reg.register(
            "over_budget_registrations",
            "Registrations of a uid over its series budget, counted under comm=\"over-budget\"",
            over,
        );
        self.unverified.register(&mut reg);
        families::register_gpu(
            &mut reg,
            &self.hooks,
            (self.gpu_pins.count, self.gpu_pins.bytes),
            self.gpu_freed,
        );

        families::register_lost(&mut reg, &self.hooks, lost);

        families::register_hooks(&mut reg, &self.hooks, &self.told);

        let findings = self.auditor.findings(&self.posture, &self.markers);
        let found = Family::<Labels, Gauge>::default();
        for f in &findings {
            found
                .get_or_create(&vec![
                    ("id".into(), f.id.clone()),
                    ("severity".into(), f.severity.as_str().into()),
                ])
                .inc();
        }
        reg.register("findings", "Audit findings now, by id and severity (see gdr-trace audit)", found);
        let by_sev = Family::<Labels, Gauge>::default();
        for (sev, n) in counts(&findings) {
            by_sev.get_or_create(&vec![("severity".into(), sev.into())]).set(n as i64);
        }
        reg.register("findings_by_severity", "Audit findings now, by severity", by_sev);
        let others = Gauge::<i64>::default();
        others.set(agg.summaries().filter(|p| !self.top.in_top(&self.key(p.pid, &p.comm))).count() as i64);
        reg.register("other_processes", "Processes whose series are summed under comm=\"other\"", others);
        // Storage not traced: no storage series (a 0 would say "none seen"). Without any hook
        // status (a sink fed records, not a trace) nothing says storage is off.
        if self.hooks.is_empty() || hook_families(&self.hooks).contains(&("storage", true)) {
            self.storage.render(&mut reg);
        }
        let (keys, top) = (&self.keys, &self.top);
        self.queues.render(&mut reg, |pid, comm| key_of(keys, pid, comm), |k| top.in_top(k));
        let info = Info::new(vec![
            ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
            ("kernel".into(), self.kernel.clone()),
        ]);
        reg.register("build", "gdr-trace version and the kernel it traces", info);

        let mut body = String::new();
        let _ = encode(&mut body, &reg);
        format::sorted_samples(&body)
    }

    /// Per-pid entries held: process identities, storage values, the auditor's facts.
    pub fn held(&self) -> (usize, usize, usize) {
        (self.keys.len(), self.storage.tracked_pids(), self.auditor.known())
    }

    fn publish(&mut self, agg: &Aggregator, lost: &Lost) {
        for k in std::mem::replace(&mut self.retiring, std::mem::take(&mut self.exiting)) {
            // A process of the same identity may have started since.
            if !self.keys.values().any(|live| *live == k) {
                self.top.retire(&k);
                self.budget.release(&k);
            }
        }
        let body = self.render(agg, lost);
        *self.shared.body.lock().expect("metrics lock") = body;
        self.shared.health.lock().expect("health lock").last_update = Some(Instant::now());
    }
}

impl Sink for MetricsSink {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.hooks = hooks.to_vec();
        self.kernel = facts.kernel.clone();
        self.told = crate::untold::states(facts, hooks)
            .into_iter()
            .filter_map(|(f, s)| match s {
                crate::untold::State::Told => Some((f.family, f.name, 1)),
                crate::untold::State::Untold(_) => Some((f.family, f.name, 0)),
                _ => None,
            })
            .collect();
        let mut h = self.shared.health.lock().expect("health lock");
        let count = crate::facts::HookCount::statuses(hooks);
        (h.hooks, h.attached) = (count.total, count.attached);
        h.untold = crate::untold::untold(facts, hooks).into_iter().map(|u| u.says).collect();
        drop(h);
        self.publish(&Aggregator::new(), &Lost::default());
    }

    fn raw(&mut self, ev: &Event) {
        let ctx = match ev {
            Event::Mr(rec) => &rec.ctx,
            // Storage series are per process identity too (looked up while the process runs).
            Event::Storage(s) => match s {
                StorageEvent::Opened(o) => &o.ctx,
                StorageEvent::Closed(c) => &c.ctx,
                StorageEvent::Gds(g) => &g.ctx,
                StorageEvent::Nvfs(n) => &n.ctx,
                StorageEvent::Worker(w) => &w.ctx,
            },
            _ => return,
        };
        // A storage record per file operation: its process is looked up once (a pid is
        // forgotten when its process exits), not checked for reuse at each.
        if !(matches!(ev, Event::Storage(_)) && self.keys.contains_key(&ctx.pid)) {
            let (facts, fresh) = self.resolver.resolve(ctx);
            if fresh {
                let c = facts.container.as_ref();
                let key = ProcKey {
                    comm: ctx.comm.clone(),
                    container: c.and_then(|c| c.short_id()).unwrap_or_default().to_string(),
                    pod: c.and_then(|c| c.pod_uid.clone()).unwrap_or_default(),
                    uid: ctx.uid.to_string(),
                };
                self.keys.insert(facts.pid, key);
                let facts = ProcessFacts { comm: ctx.comm.clone(), ..facts.clone() };
                self.auditor.learn(facts);
                return;
            }
        }
        // An exec keeps the pid (and start time) and changes the comm: the record's is current.
        if let Some(k) = self.keys.get_mut(&ctx.pid).filter(|k| k.comm != ctx.comm) {
            k.comm = ctx.comm.clone();
            let (facts, _) = self.resolver.resolve(ctx);
            let facts = ProcessFacts { comm: ctx.comm.clone(), ..facts.clone() };
            self.auditor.learn(facts);
        }
    }

    fn emit(&mut self, out: &Output<'_>) {
        match *out {
            // A claim no kernel hook corroborates: apart, per uid (`unverified`).
            Output::Registered { reg, .. } if !unverified::corroborated(reg) => self.unverified.add(reg),
            Output::Registered { reg, verdict } => {
                self.unverified.kernel_seen(reg);
                self.auditor.registered(reg, verdict);
                let key = labels::learned(&mut self.keys, reg.ctx.pid, &reg.ctx.comm, reg.ctx.uid);
                let bytes = if matches!(verdict, Verdict::Failed | Verdict::Probe) { 0 } else { reg.length };
                // A name the kernel gave is the device's; one from the caller's memory only when
                // the kernel lists such a device.
                let device = match (&reg.device, reg.device_from_kernel) {
                    (Some(d), true) => crate::escape::field(d).into_owned(),
                    _ => self.devices.label(reg.device.as_deref()),
                };
                let series = format!("{verdict}\t{device}");
                let (key, series) = self.budget.admit(reg.ctx.uid, key, series);
                self.top.add_grouped(&key, reg.ctx.uid, &series, Totals { count: 1, bytes });
            }
            Output::Released { owner, .. } => {
                let v = owner.map_or("unknown".to_string(), |o| o.1.to_string());
                *self.releases.entry(v).or_default() += 1;
            }
            Output::GpuPin(pin) if pin.ret == 0 => self.gpu_pins.add(Totals { count: 1, bytes: pin.length }),
            Output::GpuFreed { .. } => self.gpu_freed += 1,
            Output::StorageSummary { report, .. } => {
                let (keys, storage) = (&self.keys, &mut self.storage);
                storage.fold(report, |pid, comm| key_of(keys, pid, comm));
            }
            Output::QueuePin(pin) => self.queues.pinned(pin),
            Output::QueueSummary { report, .. } => self.queues.fold(report),
            Output::Summary { agg, lost, .. } => self.publish(agg, lost),
            Output::Note(msg) => tracing::info!("{msg}"),
            // Its pid goes; its identity's series too once no process of it is left.
            Output::Exited { pid } => {
                if let Some(k) = self.keys.remove(&pid) {
                    if !self.keys.values().any(|live| *live == k) {
                        self.exiting.push(k);
                    }
                }
                self.auditor.forget(pid);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod lost_tests;
#[cfg(test)]
mod tests;
