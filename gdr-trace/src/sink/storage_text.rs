//! Text for people: a line per cuFile call and nvidia-fs ioctl, and a storage section per
//! process in each summary.

use gdr_trace_common::storage::SIZE_BUCKETS;

use crate::{escape::field, units::human_bytes};
use crate::{
    events::{
        cufile_ops::{cuda, error, op_name, shape},
        storage::NvfsIo,
    },
    storage::{
        aggregate::{bucket_label, ProcReport, StorageReport},
        state::GdsIo,
    },
};

/// Files shown per process (JSON has them all).
const TOP_FILES: usize = 5;
/// Processes shown per summary, those that moved the most first (JSON has them all).
const TOP_PROCS: usize = 6;

pub fn gds_line(io: &GdsIo) -> String {
    let c = &io.call;
    let t = &c.tally;
    let inside = match io.verdict {
        Some(_) if t.nvfs_calls > 0 => {
            let dma = if t.dma_bytes > 0 {
                format!(", {} by direct I/O", human_bytes(t.dma_bytes))
            } else {
                String::new()
            };
            format!(" ({} nvidia-fs ioctl{}{dma})", t.nvfs_calls, if t.nvfs_calls == 1 { "" } else { "s" })
        }
        Some(_) if t.posix_calls > 0 => {
            format!(" ({} POSIX call(s), {})", t.posix_calls, human_bytes(t.posix_bytes))
        }
        _ => String::new(),
    };
    let w = &io.worker;
    let inside = if w.calls > 0 {
        let n = w.tids.len();
        format!("{inside} [{} by {n} worker thread{}]", human_bytes(w.bytes), if n == 1 { "" } else { "s" })
    } else {
        inside
    };
    let sh = shape(c.op);
    let d = &c.detail;
    let mut args = String::new();
    if sh.file {
        match io.fd {
            Some(fd) => args.push_str(&format!(" fd {fd} {}", field(io.path.as_deref().unwrap_or("-")))),
            None => args.push_str(&format!(" handle {:#x}", c.handle)),
        }
    }
    if sh.batch {
        args.push_str(&format!(" batch {:#x}", d.batch_id));
    }
    if sh.stream {
        args.push_str(&format!(" stream {:#x}", d.stream));
    }
    if sh.buf && !sh.offsets {
        args.push_str(&format!(" buf {:#x}", c.buf));
    }
    if sh.length {
        args.push_str(&format!(" len {}", human_bytes(c.length)));
    }
    if sh.offsets {
        args.push_str(&format!(" off {}", c.file_offset));
    }
    if sh.batch_count {
        args.push_str(&format!(" entries {}", d.batch_count));
    }
    if sh.completion {
        args.push_str(&format!(" done {} failed {}", human_bytes(c.length), d.failed));
    }
    if sh.flags && d.flags != 0 {
        args.push_str(&format!(" flags {:#x}", d.flags));
    }
    let ret = if !sh.ret {
        String::new()
    } else {
        let mut r = format!(" ret {}", c.ret);
        if let Some(e) = error(c) {
            r.push_str(&format!(" {} ({})", e.name, e.description));
        }
        if let Some(e) = cuda(c) {
            r.push_str(&format!(" cu_err {} {} ({})", d.cu_err, e.name, e.description));
        }
        r
    };
    let lib = d.library.as_deref().map_or(String::new(), |l| format!(" lib {}", field(l)));
    format!(
        "GDS pid {} ({}) tid {} {}{args}{ret} => {}{inside}{lib}",
        c.ctx.pid,
        field(&c.ctx.comm),
        c.ctx.tid,
        op_name(c.op),
        io.verdict.map_or("-", |v| v.as_str()),
    )
}

pub fn nvfs_line(io: &NvfsIo, path: Option<&str>) -> String {
    let what = match io.cmd {
        Some(_) => format!(
            "ioctl {} fd {} {}",
            io.name(),
            io.fd.map_or("-".into(), |f| f.to_string()),
            field(path.unwrap_or("-"))
        ),
        None => format!("{} {}", io.name(), if io.write { "write" } else { "read" }),
    };
    format!(
        "NVFS pid {} ({}) {what} size {} off {} ret {}  via {}",
        io.ctx.pid,
        field(&io.ctx.comm),
        human_bytes(io.size),
        io.offset,
        if io.cmd.is_some() { io.io_ret } else { io.ret },
        io.source
    )
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// Narrower than this, the per-file table can't hold its nine columns without splitting
/// words and numbers: each file is a line (and its figures a wrapped line below) instead.
const TABLE_WIDTH: u16 = 120;

/// `path` in at most `max` characters: its start and its end, the middle left out ("…").
pub fn shorten_middle(path: &str, max: usize) -> String {
    let n = path.chars().count();
    if n <= max || max < 5 {
        return path.to_string();
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    let start: String = path.chars().take(head).collect();
    let end: String = path.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// The files of a process for a narrow terminal: the path on its line (shortened from the
/// middle to fit), its figures wrapped below it, each figure whole.
fn file_list(p: &ProcReport, width: u16) -> String {
    let g = crate::term::glue;
    let mut s = String::new();
    for f in p.files.iter().take(TOP_FILES) {
        s.push_str(&format!("  {}\n", shorten_middle(&f.path, usize::from(width).saturating_sub(2))));
        let seq = match f.reads.saturating_sub(f.io_uring_reads) {
            0 => String::new(),
            placed => format!(", {} sequential", pct(Some(f.seq_reads as f64 / placed as f64))),
        };
        let mut figures = vec![
            g(&format!("{} reads ({}{seq})", f.reads, human_bytes(f.bytes_read))),
            g(&format!("{} written", human_bytes(f.bytes_written))),
            g(&format!("{} pages filled", f.pages_filled)),
            g(&format!("cache hit {}", pct(f.cache_hit_ratio))),
        ];
        figures.extend(f.gds_bytes.iter().map(|(v, b)| g(&format!("cuFile {v} {}", human_bytes(*b)))));
        let line = format!("    {}: {}", f.verdict, figures.join(", "));
        s.push_str(&crate::term::wrap(&line, "      "));
        s.push('\n');
    }
    s
}

/// A process's storage in one line: bytes by path, and how many files (`--files` lists them).
fn head_line(p: &ProcReport, files: bool) -> String {
    let by: Vec<String> = p
        .bytes_by_verdict
        .iter()
        .map(|(v, b)| crate::term::glue(&format!("{v} {} ({} calls)", human_bytes(b.bytes), b.calls)))
        .collect();
    let n = p.files.len() + p.files_folded as usize;
    let files = match n {
        _ if !files => String::new(),
        0 => String::new(),
        1 => "; 1 file".into(),
        n => format!("; {n} files"),
    };
    format!(
        "PID {} ({}){}: {}{files}\n",
        p.pid,
        field(&p.comm),
        if p.exited { " exited" } else { "" },
        if by.is_empty() { "no data moved".into() } else { by.join(", ") }
    )
}

fn section(p: &ProcReport) -> String {
    let mut s = wrap_each(&head_line(p, false));
    let narrow = crate::term::current().width.filter(|&w| w < TABLE_WIDTH);
    if let (Some(width), false) = (narrow, p.files.is_empty()) {
        s.push_str(&file_list(p, width));
    } else if !p.files.is_empty() {
        let mut t = crate::term::table();
        t.set_header(["FILE", "VERDICT", "READS", "READ", "SEQ", "WRITTEN", "FILLED", "HIT", "cuFILE"]);
        for f in p.files.iter().take(TOP_FILES) {
            let gds: Vec<String> =
                f.gds_bytes.iter().map(|(v, b)| format!("{v} {}", human_bytes(*b))).collect();
            t.add_row([
                field(&f.path).into_owned(),
                f.verdict.to_string(),
                f.reads.to_string(),
                human_bytes(f.bytes_read),
                match f.reads.saturating_sub(f.io_uring_reads) {
                    0 => "-".into(),
                    placed => pct(Some(f.seq_reads as f64 / placed as f64)),
                },
                human_bytes(f.bytes_written),
                format!("{} pages", f.pages_filled),
                pct(f.cache_hit_ratio),
                gds.join("\n"),
            ]);
        }
        s.push_str(&format!("{}\n", crate::term::render(&t)));
    }
    // What follows the files is text, wrapped to the width line by line.
    let table_end = s.len();
    if p.files.len() > TOP_FILES {
        s.push_str(&format!("  ... and {} more files (--json lists them all)\n", p.files.len() - TOP_FILES));
    }
    if p.files_folded > 0 {
        let kept = if p.archived {
            format!(
                "an exited process's report keeps its {} largest files",
                crate::storage::archive::FILES_KEPT
            )
        } else {
            format!("a running process keeps its {} largest closed files", crate::storage::fold::KEEP_CLOSED)
        };
        s.push_str(&format!(
            "  {} closed files not listed: counted in the totals above ({kept})\n",
            p.files_folded
        ));
    }
    if p.io_uring_reads > 0 {
        s.push_str(&format!(
            "  io_uring: {} of these reads went through a ring (their positions are unknown: SEQ leaves them out)\n",
            p.io_uring_reads
        ));
    }
    let l = &p.io_uring_unattributed;
    if l.reads + l.writes > 0 {
        s.push_str(&format!(
            "  io_uring on registered files (no descriptor, so no file to credit): {} reads {}, {} writes {}\n",
            l.reads,
            human_bytes(l.bytes_read),
            l.writes,
            human_bytes(l.bytes_written)
        ));
    }
    if !p.read_size_hist.is_empty() {
        // Smallest size first (the map is ordered by name).
        let h: Vec<String> = (0..SIZE_BUCKETS)
            .map(bucket_label)
            .filter_map(|k| p.read_size_hist.get(&k).map(|n| format!("{k}: {n}")))
            .collect();
        s.push_str(&format!("  read sizes: {}\n", h.join(", ")));
    }
    for h in &p.hints {
        s.push_str(&format!("  hint: {h}\n"));
    }
    let tail = s.split_off(table_end);
    s.push_str(&wrap_each(&tail));
    s
}

/// Each line of `text` wrapped to the width (continuations indented under it).
fn wrap_each(text: &str) -> String {
    text.lines().map(|l| crate::term::wrap(l, "      ") + "\n").collect()
}

/// Processes given a line of their own per summary, the busiest first (JSON has them all).
const TOP_LINES: usize = 20;
/// Without `--files`, a process that moved less than this (and used no cuFile or nvidia-fs)
/// is counted, not given a line.
const SMALL: u64 = 64 << 10;

/// The storage section of a summary; None when there is nothing to show. A process that used
/// cuFile or nvidia-fs gets its per-file table, the others one line each (`files`: every
/// process its table).
pub fn summary(report: &StorageReport, last: bool, files: bool) -> Option<String> {
    if report.is_empty() {
        return last.then(|| "-- storage: no file I/O seen --".to_string());
    }
    let title = if last { "storage summary" } else { "storage so far" };
    // cuFile / nvidia-fs users first, then by bytes moved (watch sees every process's I/O).
    let mut procs: Vec<&ProcReport> = report.procs.iter().collect();
    let gds = ProcReport::uses_gds;
    let weight = |p: &ProcReport| {
        let bytes: u64 = p.bytes_by_verdict.values().map(|b| b.bytes).sum();
        (gds(p), bytes)
    };
    procs.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.pid.cmp(&b.pid)));
    let (mut body, mut tables, mut lines, mut left, mut small) = (Vec::new(), 0, 0, 0, 0);
    for p in procs {
        if (files || gds(p)) && tables < TOP_PROCS {
            tables += 1;
            body.push(section(p));
        } else if !files && weight(p).1 < SMALL {
            // A shell's helpers (the loader reads each library's header): not a line each.
            small += 1;
        } else if lines < TOP_LINES {
            lines += 1;
            body.push(wrap_each(&head_line(p, true)));
        } else {
            left += 1;
        }
    }
    match (left, small) {
        (0, 0) => {}
        (n, 0) => body.push(format!("... and {n} more processes with file I/O (--json lists them all)\n")),
        (n, s) => body.push(format!(
            "... and {} more processes with file I/O, {s} of them under {} each (--files or --json lists them all)\n",
            n + s,
            human_bytes(SMALL)
        )),
    }
    if lines > 0 && !files {
        body.push("(each file: --files)\n".into());
    }
    Some(format!("-- {title} --\n{}", body.join("")))
}

#[cfg(test)]
mod width_tests;

#[cfg(test)]
mod tests;
