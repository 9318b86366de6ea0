//! Text for people: a line per registration/release, a summary table now and then.

use std::{io::Write, time::Instant};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

use super::{human_bytes, Lost, Sink};
use crate::{
    aggregate::Aggregator,
    classify::Verdict,
    correlate::{Registration, Release},
    events::access_names,
    loader::{HookStatus, KernelFacts},
};

pub struct TextSink<W: Write> {
    out: W,
    started: Instant,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        Self { out, started: Instant::now() }
    }
    fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{s}");
        let _ = self.out.flush();
    }
    fn stamp(&self) -> String {
        format!("+{:.3}s", self.started.elapsed().as_secs_f64())
    }
}

/// Hook status lines, shared with `probes`.
pub fn hooks_table(hooks: &[HookStatus]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["HOOK", "SIDE", "WHERE", "ATTACHED", "WHY NOT / NOTES"]);
    for h in hooks {
        t.add_row([
            h.hook.to_string(),
            h.side.to_string(),
            h.location.clone().unwrap_or_else(|| "-".into()),
            h.attached.clone().unwrap_or_else(|| "NO".into()),
            h.reasons.join("\n"),
        ]);
    }
    t
}

pub fn summary_table(agg: &Aggregator) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "PID",
        "COMM",
        "MRS",
        "FAILED",
        "REGISTERED",
        "LIVE PINNED",
        "BY VERDICT (count, bytes, live)",
    ]);
    for p in agg.summaries() {
        let by: Vec<String> = p
            .by_verdict
            .iter()
            .map(|(v, t)| {
                format!("{v}: {}, {}, {}", t.count, human_bytes(t.bytes), human_bytes(t.live_bytes))
            })
            .collect();
        t.add_row([
            p.pid.to_string(),
            p.comm.clone(),
            p.registrations.to_string(),
            p.failed.to_string(),
            human_bytes(p.bytes_registered),
            human_bytes(p.live_bytes),
            by.join("\n"),
        ]);
    }
    t
}

impl<W: Write> Sink for TextSink<W> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.started = Instant::now();
        let attached = hooks.iter().filter(|h| h.attached.is_some()).count();
        self.line(&format!(
            "gdr-trace: kernel {}, {attached}/{} hooks attached ({})",
            facts.kernel,
            hooks.len(),
            hooks
                .iter()
                .map(|h| format!("{} {}", h.hook, h.attached.as_deref().unwrap_or("NO")))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        for h in hooks.iter().filter(|h| h.attached.is_none()) {
            self.line(&format!("  ! {} not attached: {}", h.hook, h.reasons.join("; ")));
        }
    }

    fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        let c = &reg.ctx;
        let err = reg.errno.map(|e| format!(" errno {e}")).unwrap_or_default();
        let line = format!(
            "{} REG pid {} ({}) tid {} dev {} addr {:#x} len {} [{}] => {verdict}{err}  via {}",
            self.stamp(),
            c.pid,
            c.comm,
            c.tid,
            reg.device.as_deref().unwrap_or("?"),
            reg.addr,
            human_bytes(reg.length),
            access_names(reg.access).join("|"),
            reg.sources.join(", "),
        );
        self.line(&line);
    }

    fn released(&mut self, rel: &Release, owner: Option<(u32, Verdict)>) {
        let line = format!(
            "{} REL pid {} ({}) dev {} addr {:#x} len {} => {}  via {}",
            self.stamp(),
            owner.map_or(rel.ctx.pid, |o| o.0),
            rel.ctx.comm,
            rel.device.as_deref().unwrap_or("?"),
            rel.addr,
            human_bytes(rel.length),
            owner.map_or("registered before tracing".to_string(), |o| o.1.to_string()),
            rel.sources.join(", "),
        );
        self.line(&line);
    }

    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool) {
        let title = if last { "summary" } else { "so far" };
        if agg.is_empty() {
            self.line(&format!("-- {title}: no memory registrations seen --"));
        } else {
            let table = summary_table(agg);
            self.line(&format!("-- {title} --\n{table}"));
        }
        if last || lost.total() > 0 {
            self.line(&format!(
                "lost records: {} (ring buffer full {}, stash full {}, return without entry {})",
                lost.total(),
                lost.ringbuf_full,
                lost.stash_full,
                lost.stash_miss
            ));
        }
    }

    fn note(&mut self, msg: &str) {
        self.line(&format!("{} note: {msg}", self.stamp()));
    }
}
