//! The queue family as text and JSON: a line per queue pin and release, and the per-process
//! section (queue memory by kind and memory, GPU-initiated networking and its evidence).

use serde_json::{json, Value};

use crate::{
    escape::field,
    events::Source,
    queues::{QueueKind, QueuePin, QueueRelease, QueueReport},
    units::human_bytes,
};

fn memory(pin: &QueuePin) -> String {
    let mut m = pin.memory.to_string();
    if let Some(e) = pin.errno {
        m.push_str(&format!(" errno {e}"));
    }
    if let Some(c) = &pin.peer_client {
        m.push_str(&format!(" (peer client {})", field(c)));
    }
    if let Some(e) = &pin.exporter {
        m.push_str(&format!(" (exporter {})", field(e)));
    }
    m
}

/// `QUEUE pid 7 (ibgda) dev mlx5_0 qp ring 64.0 KiB => gpu-peermem (peer client nv_mem)  in create_qp via ...`
pub fn pin_line(pin: &QueuePin) -> String {
    let c = &pin.ctx;
    let what = match pin.kind {
        QueueKind::Doorbell => "doorbell page".to_string(),
        QueueKind::DevxUmem => "devx-umem".to_string(),
        QueueKind::Unknown => "pin of unknown purpose".to_string(),
        k => format!("{k} ring"),
    };
    let verb = pin.verb.map_or(String::new(), |v| format!("  in {}", v.as_str()));
    let why = pin.unknown.map_or(String::new(), |w| format!(" ({w})"));
    format!(
        "QUEUE pid {} ({}) tid {} dev {} {what} addr {:#x} len {} => {}{why}{verb}  via {}",
        c.pid,
        field(&c.comm),
        c.tid,
        field(pin.device.as_deref().unwrap_or("?")),
        pin.addr,
        human_bytes(pin.length),
        memory(pin),
        Source::join(&pin.sources),
    )
}

pub fn release_line(rel: &QueueRelease) -> String {
    format!(
        "QREL pid {} ({}) dev {} {} len {} => {}  via {}",
        rel.owner,
        field(&rel.ctx.comm),
        field(rel.device.as_deref().unwrap_or("?")),
        rel.kind,
        human_bytes(rel.length),
        rel.memory,
        Source::join(&rel.sources),
    )
}

pub fn pin_json(pin: &QueuePin) -> Value {
    let mut v = serde_json::to_value(pin).unwrap_or_default();
    v["event"] = json!("queue_pin");
    v
}

pub fn release_json(rel: &QueueRelease) -> Value {
    let mut v = serde_json::to_value(rel).unwrap_or_default();
    v["event"] = json!("queue_release");
    v
}

/// One `queue_summary` object per process (at the end).
pub fn summary_json(report: &QueueReport) -> Vec<Value> {
    report
        .procs
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            v["event"] = json!("queue_summary");
            v
        })
        .collect()
}

/// The queue section of a summary (None when no process pinned queue memory).
pub fn summary_text(report: &QueueReport, last: bool) -> Option<String> {
    if report.procs.is_empty() {
        return None;
    }
    let mut t = crate::term::table();
    t.set_header([
        "PID",
        "COMM",
        "QUEUE MEMORY (kind in memory: pins, bytes, live)",
        "GPU-INITIATED NETWORKING",
    ]);
    let mut notes = Vec::new();
    for p in &report.procs {
        let q = &p.queues;
        let g = crate::term::glue;
        let rows: Vec<String> = q
            .tallies
            .iter()
            .map(|((k, m), t)| {
                g(&format!("{k} in {m}: {}, {}, {} live", t.pins, human_bytes(t.bytes), t.live))
            })
            .collect();
        let gin = p.gin.as_ref().map_or("-".to_string(), |g| g.mode.as_str().to_string());
        let pid = if q.exited { format!("{} (exited)", q.pid) } else { q.pid.to_string() };
        t.add_row([pid, field(&q.comm).into_owned(), rows.join("\n"), gin]);
        if let Some(g) = &p.gin {
            notes.push(format!("  pid {}: {}: {}", q.pid, g.mode.as_str(), g.evidence.join("; ")));
        }
        if q.unknown_pins() > 0 {
            notes.push(format!(
                "  pid {}: {} pins of unknown purpose ({})",
                q.pid,
                q.unknown_pins(),
                crate::queues::PURPOSE_UNKNOWN
            ));
        }
    }
    let title = if last { "-- queue memory (not registrations) --" } else { "-- queue memory (so far) --" };
    let mut out = format!("{title}\n{}", crate::term::render(&t));
    for n in notes {
        out.push('\n');
        out.push_str(&crate::term::wrap(&crate::escape::printable(&n), "      "));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        events::Context,
        mr::{classify::Verdict, correlate::Registration},
        queues::Queues,
    };

    #[test]
    fn the_summary_is_a_table_with_the_mode_and_its_evidence() {
        let mut q = Queues::new(true);
        for (kind, memory, umem) in
            [(QueueKind::Cq, Verdict::Host, 1), (QueueKind::DevxUmem, Verdict::GpuDmabuf, 2)]
        {
            let ctx = Context { pid: 7, tid: 7, comm: "ibgda\u{1b}[2J".into(), ..Default::default() };
            let r = Registration { ctx, length: 65536, umem: Some(umem), ..Default::default() };
            q.pinned(&QueuePin::of(&r, kind, memory));
        }
        let text =
            crate::term::with_style(crate::term::Style::plain(Some(80)), || summary_text(&q.report(), true))
                .expect("a section");
        assert!(text.starts_with("-- queue memory (not registrations) --\n"), "{text}");
        assert!(text.contains("cq in host: 1, 64.0 KiB, 1 live") && text.contains("cpu-assisted"), "{text}");
        assert!(
            text.contains("pid 7: cpu-assisted: queue memory in the GPU: devx-umem in gpu-dmabuf"),
            "{text}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(summary_text(&Queues::new(true).report(), true).is_none());
    }
}
