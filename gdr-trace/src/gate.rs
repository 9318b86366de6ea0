//! `attach PID --expect gdr --within 60s`: a gate for CI and launch scripts. Passes (exit 0) as
//! soon as the process (or a child) moves bytes through GPU memory; fails (exit 1) with a
//! one-line reason when it moved its bytes through host memory or moved nothing; cannot tell
//! (exit 2) when the byte hooks could not see its work requests, or this host cannot tell the
//! memory type of registrations (`crate::untold`). The reason is printed on
//! stderr and, with `--json`, as a `gate` record after the summaries.

use serde_json::json;

use crate::{
    exit,
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::bytes::{is_gpu, Moved, HOST_CUDA_PINNED},
    sink::{Output, Sink},
};

/// What the gate expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Expect {
    /// Bytes moved straight from or to GPU memory (gpu-peermem or gpu-dmabuf MRs).
    Gdr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `exit::OK`, `exit::FINDING` or `exit::CANNOT_RUN`.
    pub code: u8,
    pub reason: String,
}

impl Outcome {
    pub fn result(&self) -> &'static str {
        match self.code {
            exit::OK => "pass",
            exit::FINDING => "fail",
            _ => "unknown",
        }
    }
}

/// Sums of every traced process's summary: (bytes by key, registrations).
fn totals(agg: &Aggregator) -> (std::collections::BTreeMap<String, Moved>, u64) {
    let mut by: std::collections::BTreeMap<String, Moved> = Default::default();
    let mut regs = 0;
    for p in agg.summaries() {
        regs += p.registrations;
        for (k, m) in &p.bytes_by_verdict {
            let e = by.entry(k.clone()).or_default();
            e.out += m.out;
            e.inn += m.inn;
            e.ops += m.ops;
        }
    }
    (by, regs)
}

/// The decision from what was seen: `Some` once it can pass, else (at the end) why not.
/// `blind`: why the memory type of registrations cannot be told on this host (then no byte
/// is known to be host memory: the answer is "cannot tell", exit 2).
pub fn decide(
    agg: &Aggregator,
    hooked: bool,
    blind: Option<&str>,
    within: f64,
    last: bool,
) -> Option<Outcome> {
    let (by, regs) = totals(agg);
    let gpu: u64 = by.iter().filter(|(k, _)| is_gpu(k)).map(|(_, m)| m.bytes()).sum();
    let all: u64 = by.values().map(Moved::bytes).sum();
    if gpu > 0 {
        let keys: Vec<&str> = by.keys().filter(|k| is_gpu(k)).map(String::as_str).collect();
        return Some(Outcome {
            code: exit::OK,
            reason: format!("moved {gpu} bytes through GPU memory ({}) of {all} in all", keys.join(", ")),
        });
    }
    if !last {
        return None;
    }
    if let Some(why) = blind {
        return Some(Outcome { code: exit::CANNOT_RUN, reason: format!("cannot tell: {why}") });
    }
    let staged = by.get(HOST_CUDA_PINNED).map_or(0, Moved::bytes);
    let gpu_work = agg.summaries().any(|p| p.uses_gpu == Some(true) || !p.staging_mrs.is_empty());
    let (code, reason) = if all > 0 && (gpu_work || staged > 0) {
        let how = if staged > 0 {
            format!(", {staged} of them in CUDA pinned staging buffers")
        } else {
            String::new()
        };
        (exit::FINDING, format!("host-staged: moved {all} bytes, none through GPU memory{how}"))
    } else if all > 0 {
        (
            exit::FINDING,
            format!("host memory only: moved {all} bytes, none through GPU memory (no GPU in use)"),
        )
    } else if regs == 0 {
        (exit::FINDING, format!("moved nothing within {within}s (no registration, no work request)"))
    } else if !hooked {
        (
            exit::CANNOT_RUN,
            format!(
                "cannot tell: {regs} registrations but no RDMA provider's post/poll functions hooked \
                 (its context was not seen through libibverbs, or uprobes were refused)"
            ),
        )
    } else {
        (
            exit::CANNOT_RUN,
            format!(
                "cannot tell: {regs} registrations but no work request seen within {within}s (WQEs \
                 written to the NIC directly, and ibv_wr_* on QPs made extended before the trace, \
                 are not seen)"
            ),
        )
    };
    Some(Outcome { code, reason })
}

/// Whether a work-request row of the hook table was attached at start (`loader::provider`).
pub fn provider_hooked_at_start(hooks: &[HookStatus]) -> bool {
    crate::hooks::HOOKS.iter().any(|row| {
        matches!(row.programs, crate::hooks::Programs::Provider { .. })
            && hooks.iter().any(|s| s.hook == row.function && s.attached.is_some())
    })
}

/// The `gate` JSON record.
pub fn record(o: &Outcome) -> serde_json::Value {
    json!({ "event": "gate", "expect": "gdr", "result": o.result(), "exit_code": o.code,
        "reason": o.reason, "unix_ms": crate::clock::Anchor::now().unix_ms })
}

/// Wraps the output sink: watches summaries and hooked provider copies, and asks the trace
/// to stop once it passes.
pub struct GateSink<'a> {
    pub inner: &'a mut dyn Sink,
    pub within: f64,
    pub json: bool,
    hooked: bool,
    /// What this host cannot tell that the answer needs (`crate::untold`).
    blind: Option<String>,
    pub outcome: Option<Outcome>,
}

impl<'a> GateSink<'a> {
    pub fn new(inner: &'a mut dyn Sink, within: f64, json: bool) -> Self {
        Self { inner, within, json, hooked: false, blind: None, outcome: None }
    }

    fn said(&mut self) {
        let Some(o) = &self.outcome else { return };
        eprintln!("gdr-trace: gate: {}: {}", o.result(), o.reason);
        if self.json {
            crate::stop::write_line(&mut std::io::stdout(), &record(o).to_string());
        }
    }
}

impl Sink for GateSink<'_> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        // The system's providers are hooked at start (no library_copy record comes for them).
        self.hooked = provider_hooked_at_start(hooks);
        let needed = crate::untold::untold(facts, hooks).into_iter();
        self.blind =
            needed.filter(|u| matches!(u.fact, "registrations" | "memory_type")).map(|u| u.says).next();
        self.inner.start(facts, hooks);
    }
    fn emit(&mut self, out: &Output<'_>) {
        self.inner.emit(out);
        match *out {
            Output::LibraryCopy(c)
                if c.library == crate::loader::provider::PROVIDER && !c.hooked.is_empty() =>
            {
                self.hooked = true;
            }
            Output::Summary { agg, last, .. } if self.outcome.is_none() || last => {
                if self.outcome.is_none() {
                    self.outcome = decide(agg, self.hooked, self.blind.as_deref(), self.within, last);
                    if self.outcome.as_ref().is_some_and(|o| o.code == exit::OK) {
                        crate::stop::decided();
                    }
                }
                if last {
                    self.said();
                }
            }
            _ => {}
        }
    }
    fn raw(&mut self, ev: &crate::events::Event) {
        self.inner.raw(ev);
    }
    fn tick(&mut self, now_ns: u64) {
        self.inner.tick(now_ns);
    }
    fn flushed(&mut self) {
        self.inner.flushed();
    }
    fn counters(&mut self, c: &crate::counters::Counters, last: bool) {
        self.inner.counters(c, last);
    }
}

/// `60s`, `2m`, `500ms` or plain seconds.
pub fn parse_within(s: &str) -> Result<f64, String> {
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v * mul <= crate::trace::MAX_SECS => Ok(v * mul),
        _ => Err(format!("{s:?}: a positive duration like 60s, 2m, 500ms or 60")),
    }
}

#[cfg(test)]
mod tests;
