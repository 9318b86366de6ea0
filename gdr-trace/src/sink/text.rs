//! Text for people: a line per registration/release, a summary table now and then.

use std::{io::Write, time::Instant};

use super::{
    hooks_text, p2p_text, queue_view, storage_text,
    summary_text::{self, status_view, StorageCell},
    Lost, Output, Sink,
};
use crate::{
    escape::field,
    events::{access_names, storage::NvfsIo, Source},
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
    storage::{aggregate::StorageReport, state::GdsIo},
    units::human_bytes,
};

pub struct TextSink<W: Write> {
    out: W,
    started: Instant,
    /// The storage hooks were left out on purpose: storage is "not traced", not "none seen".
    storage_left_out: bool,
    /// Byte counting was left out on purpose (`--no-bytes`): bytes are "not traced".
    bytes_left_out: bool,
    /// A hook that sees registrations is attached: else they are "not traced", not "none seen".
    rdma_traced: bool,
    /// `attach PID`: the process traced, named under the banner.
    target: Option<u32>,
    view: View,
    /// A tick's storage and P2P sections, printed after its registration summary (the
    /// pipeline emits them first; people read the registrations first).
    pending: Vec<String>,
    /// `--compact`: the tick's storage, a cell per process, for the status view.
    cells: Vec<StorageCell>,
}

/// How much the text shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct View {
    /// Every process's per-file storage table (else only cuFile / nvidia-fs users have one,
    /// the others one line each).
    pub files: bool,
    /// One line per process at each summary, no line per event.
    pub compact: bool,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            started: Instant::now(),
            storage_left_out: false,
            bytes_left_out: false,
            rdma_traced: true,
            target: None,
            view: View::default(),
            pending: Vec::new(),
            cells: Vec::new(),
        }
    }
    pub fn view(mut self, view: View) -> Self {
        self.view = view;
        self
    }
    /// Names `pid` (and its command name, read now) under the banner.
    pub fn tracing(mut self, pid: u32) -> Self {
        self.target = Some(pid);
        self
    }
    fn line(&mut self, s: &str) {
        crate::stop::write_line(&mut self.out, s);
    }
    fn stamp(&self) -> String {
        format!("+{:.3}s", self.started.elapsed().as_secs_f64())
    }
}

impl<W: Write> TextSink<W> {
    fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        let c = &reg.ctx;
        let mut err = reg.errno.map(|e| format!(" errno {e}")).unwrap_or_default();
        if let Some(fd) = reg.dmabuf_fd.filter(|_| !reg.failed) {
            let exporter = field(reg.exporter.as_deref().unwrap_or("unknown (no BTF)"));
            err.push_str(&format!(" (dma-buf fd {fd}, exporter {exporter})"));
        }
        if let Some(o) = reg.host_origin.filter(|o| o.is_cuda()) {
            let by = reg.host_alloc.map_or("", |h| h.as_str());
            let evidence = o.evidence.map_or("", |e| e.as_str());
            err.push_str(&format!(
                " (host memory {}: {evidence}{}{by})",
                o.origin.as_str(),
                if by.is_empty() { "" } else { " " }
            ));
        }
        if reg.peer.claimed {
            let client = field(reg.peer.client.as_deref().unwrap_or("unknown"));
            err.push_str(&format!(" (peer client {client}, GPU pages pinned: {})", reg.peer.gpu_pages));
        }
        let line = format!(
            "{} REG pid {} ({}) tid {} dev {} addr {:#x} len {} [{}] => {verdict}{err}  via {}",
            self.stamp(),
            c.pid,
            field(&c.comm),
            c.tid,
            field(reg.device.as_deref().unwrap_or("?")),
            reg.addr,
            human_bytes(reg.length),
            access_names(reg.access).join("|"),
            Source::join(&reg.sources),
        );
        self.line(&line);
    }

    fn released(&mut self, rel: &Release, owner: Option<(u32, Verdict)>) {
        let line = format!(
            "{} REL pid {} ({}) dev {} addr {:#x} len {} => {}  via {}",
            self.stamp(),
            owner.map_or(rel.ctx.pid, |o| o.0),
            field(&rel.ctx.comm),
            field(rel.device.as_deref().unwrap_or("?")),
            rel.addr,
            human_bytes(rel.length),
            owner.map_or("registered before tracing".to_string(), |o| o.1.to_string()),
            Source::join(&rel.sources),
        );
        let line = match rel.wr_bytes {
            Some(c) => format!(
                "{line}  moved out {} in {} ({} ops)",
                human_bytes(c.bytes_out),
                human_bytes(c.bytes_in),
                c.ops
            ),
            None => line,
        };
        self.line(&line);
    }

    fn gpu_pin(&mut self, pin: &GpuPin) {
        let line = format!(
            "{} GPU pid {} ({}) {} va {:#x} len {} outside any RDMA registration (GDS or other) => {}",
            self.stamp(),
            pin.ctx.pid,
            field(&pin.ctx.comm),
            pin.source.function(),
            pin.gpu_va,
            human_bytes(pin.length),
            if pin.ret == 0 { "ok".to_string() } else { format!("error {}", pin.ret) },
        );
        self.line(&line);
    }

    fn gpu_freed(&mut self, freed: &GpuFreed, owner: Option<u32>) {
        let line = format!(
            "{} FREE GPU memory freed under a live registration (pid {}, registration {}) via {}",
            self.stamp(),
            owner.unwrap_or(freed.ctx.pid),
            freed.registration.map_or("?".into(), |r| r.to_string()),
            freed.source,
        );
        self.line(&line);
    }

    fn summary(&mut self, agg: &Aggregator, lost: &Lost, last: bool) {
        let title = if last { "summary" } else { "so far" };
        if self.view.compact {
            let cells = std::mem::take(&mut self.cells);
            self.line(&format!(
                "-- {title} --\n{}",
                status_view(agg, &cells, !self.storage_left_out, self.rdma_traced).trim_end()
            ));
        } else if agg.is_empty() && !self.rdma_traced {
            self.line(&format!("-- {title}: {} --", super::RDMA_NOT_TRACED));
        } else if agg.is_empty() {
            self.line(&format!("-- {title}: no memory registrations seen --"));
        } else {
            self.line(&format!("-- {title} --\n{}", summary_text::summary(agg)));
            if self.bytes_left_out {
                self.line("bytes moved by work requests: not traced (--no-bytes)");
            } else if agg.summaries().any(|p| !p.bytes_by_verdict.is_empty()) {
                self.line(&format!("not seen by byte counting: {}", super::json::BYTES_NOT_SEEN));
            }
        }
        for text in std::mem::take(&mut self.pending) {
            self.line(text.trim_end());
        }
        if last || lost.total() > 0 {
            let each: Vec<String> = lost.reasons().map(|(r, n)| format!("{} {n}", r.text)).collect();
            let line = format!("lost records: {} ({})", lost.total(), each.join(", "));
            self.line(&crate::term::wrap(&line, "    "));
        }
    }

    fn note(&mut self, msg: &str) {
        self.line(&format!("{} note: {}", self.stamp(), field(msg)));
    }

    fn gds_io(&mut self, io: &GdsIo) {
        let line = format!("{} {}", self.stamp(), storage_text::gds_line(io));
        self.line(&line);
    }

    fn nvfs_io(&mut self, io: &NvfsIo, path: Option<&str>) {
        let line = format!("{} {}", self.stamp(), storage_text::nvfs_line(io, path));
        self.line(&line);
    }

    fn storage_summary(&mut self, report: &StorageReport, last: bool) {
        if self.view.compact {
            self.cells = report.procs.iter().map(StorageCell::of).collect();
            return;
        }
        if self.storage_left_out && report.is_empty() {
            if last {
                self.pending.push("-- storage: not traced (storage hooks left out) --".into());
            }
            return;
        }
        if let Some(text) = storage_text::summary(report, last, self.view.files) {
            self.pending.push(text);
        }
    }
}

impl<W: Write> Drop for TextSink<W> {
    /// Sections still waiting for a registration summary that never came.
    fn drop(&mut self) {
        for text in std::mem::take(&mut self.pending) {
            self.line(text.trim_end());
        }
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.started = Instant::now();
        self.traced(hooks);
        let mut lines = hooks_text::banner(facts, hooks);
        if let Some(pid) = self.target {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let comm = field(comm.trim_end());
            let named = if comm.is_empty() { String::new() } else { format!(" ({comm})") };
            lines.insert(1, format!("  tracing pid {pid}{named}, its threads and the children it forks"));
        }
        // What cannot be known here comes before anything else.
        let untold = crate::untold::untold(facts, hooks)
            .into_iter()
            .map(|u| crate::term::wrap(&format!("! {}", u.says), "    "));
        for line in untold.chain(lines) {
            self.line(&line);
        }
    }

    fn traced(&mut self, hooks: &[HookStatus]) {
        self.storage_left_out = crate::facts::storage_left_out(hooks);
        self.bytes_left_out = crate::facts::bytes_left_out(hooks);
        self.rdma_traced = crate::sink::metrics::rdma_traced(hooks);
    }

    fn emit(&mut self, out: &Output<'_>) {
        // The status view: summaries and notes only.
        let summary_or_note = matches!(
            out,
            Output::Summary { .. } | Output::StorageSummary { .. } | Output::Note(_) | Output::Exited { .. }
        );
        if self.view.compact && !summary_or_note {
            return;
        }
        match *out {
            Output::Registered { reg, verdict } => self.registered(reg, verdict),
            Output::Released { rel, owner } => self.released(rel, owner),
            Output::GpuPin(pin) => self.gpu_pin(pin),
            Output::GpuFreed { freed, owner } => self.gpu_freed(freed, owner),
            Output::Gds(io) => self.gds_io(io),
            Output::Nvfs { io, path } => self.nvfs_io(io, path),
            Output::Summary { agg, lost, last } => self.summary(agg, lost, last),
            Output::StorageSummary { report, last } => self.storage_summary(report, last),
            Output::GpuIpc(ipc) => {
                let line = format!("{} {}", self.stamp(), p2p_text::ipc_line(ipc));
                self.line(&line);
            }
            Output::P2pSummary { report, last } => {
                if let Some(text) = p2p_text::summary(report, last) {
                    self.pending.push(text);
                }
            }
            Output::QueuePin(pin) => {
                let line = format!("{} {}", self.stamp(), queue_view::pin_line(pin));
                self.line(&line);
            }
            Output::QueueRelease(rel) => {
                let line = format!("{} {}", self.stamp(), queue_view::release_line(rel));
                self.line(&line);
            }
            Output::QueueSummary { report, last } => {
                if let Some(text) = queue_view::summary_text(report, last) {
                    self.pending.push(text);
                }
            }
            Output::Note(msg) => self.note(msg),
            Output::Exited { .. } => {}
            Output::LibraryCopy(c) => {
                let line =
                    format!("{} {}", self.stamp(), crate::escape::printable(&hooks_text::copy_line(c)));
                self.line(&line);
            }
        }
    }
}

#[cfg(test)]
mod injection_tests {
    use super::*;
    use crate::events::Context;

    /// A process named `a\nVERDICT: gdr` and a recorded note holding a
    /// section header stay inside their own line.
    #[test]
    fn a_name_or_note_with_a_newline_cannot_start_a_line() {
        let mut out = Vec::new();
        {
            let mut sink = TextSink::new(&mut out);
            let ctx = Context { pid: 7, tid: 7, comm: "a\nVERDICT: gdr".into(), ..Default::default() };
            let reg =
                Registration { id: 1, ctx, length: 4096, device: Some("x\ry".into()), ..Default::default() };
            sink.emit(&Output::Registered { reg: &reg, verdict: Verdict::Host });
            sink.emit(&Output::Note("done\n-- summary --\n\u{1b}[2J"));
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().all(|l| l.starts_with('+')), "{text}");
        assert!(text.contains("(a\\nVERDICT: gdr)") && text.contains("dev x\\ry"), "{text}");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    }
}

#[cfg(test)]
mod attach_banner_tests {
    use super::*;

    /// `attach PID` names the process under the banner; `watch` does not.
    #[test]
    fn the_attach_banner_names_its_process() {
        let me = std::process::id();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let facts = KernelFacts { kernel: "6.1.0".into(), vmlinux_btf: true, ..Default::default() };
        let text = |mut sink: TextSink<&mut Vec<u8>>| sink.start(&facts, &[]);
        let (mut attach, mut watch) = (Vec::new(), Vec::new());
        text(TextSink::new(&mut attach).tracing(me));
        text(TextSink::new(&mut watch));
        let attach = String::from_utf8(attach).unwrap();
        let want = format!("tracing pid {me} ({}), its threads", comm.trim_end());
        assert!(attach.lines().nth(1).is_some_and(|l| l.contains(&want)), "{attach}");
        assert!(!String::from_utf8(watch).unwrap().contains("tracing pid"));
    }
}
