//! The per-process summaries for people: the registration table `watch` leads with, and the
//! one-line-per-process status view of `--compact` (registrations and storage side by side, as
//! `nvidia-smi` lists processes).

use comfy_table::Table;

use crate::{escape::field, mr::aggregate::Aggregator, storage::aggregate::ProcReport, units::human_bytes};

/// Rows of the status view at most (JSON has every process).
pub const STATUS_ROWS: usize = 40;

pub fn summary_table(agg: &Aggregator) -> Table {
    // A size ("2.0 MiB") is not split over two lines of a cell.
    let human_bytes = |n: u64| crate::term::glue(&human_bytes(n));
    let mut t = crate::term::table();
    t.set_header([
        "PID",
        "COMM",
        "VERDICT",
        "GPU?",
        "MRS",
        "FAILED",
        "REGISTERED",
        "LIVE PINNED",
        "BY VERDICT (count, bytes, live)",
        "MOVED BY WORK REQUESTS",
    ]);
    for p in agg.summaries() {
        let by = by_verdict(p, &human_bytes, false);
        t.add_row([
            p.pid.to_string(),
            field(&p.comm).into_owned(),
            p.process_verdict.as_str().to_string(),
            match p.uses_gpu {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "?".into(),
            },
            p.registrations.to_string(),
            p.failed.to_string(),
            human_bytes(p.bytes_registered),
            human_bytes(p.live_bytes),
            by.join("\n"),
            crate::mr::bytes::lines(&p.bytes_by_verdict),
        ]);
    }
    t
}

/// A process's registrations by verdict and its other evidence, a line each.
/// `words`: each figure says what it is (the table's header says it for its column).
fn by_verdict(
    p: &crate::mr::aggregate::ProcessSummary,
    human_bytes: &dyn Fn(u64) -> String,
    words: bool,
) -> Vec<String> {
    let mut by: Vec<String> = p
        .by_verdict
        .iter()
        .map(|(v, t)| match words {
            true => format!(
                "{v}: {} MR(s), {}, {} live",
                t.count,
                human_bytes(t.bytes),
                human_bytes(t.live_bytes)
            ),
            false => format!("{v}: {}, {}, {}", t.count, human_bytes(t.bytes), human_bytes(t.live_bytes)),
        })
        .collect();
    if !p.unverified.is_zero() {
        let u = &p.unverified;
        by.push(format!(
            "unverified (libibverbs only, no kernel pin): {}, {}, {} live",
            u.count,
            human_bytes(u.bytes),
            human_bytes(u.live_bytes)
        ));
    }
    if p.gpu_pins_outside_rdma > 0 {
        by.push(format!(
            "GPU pins outside RDMA (GDS/other): {}, {}",
            p.gpu_pins_outside_rdma,
            human_bytes(p.gpu_pin_bytes_outside_rdma)
        ));
    }
    if !p.staging_mrs.is_empty() {
        let bytes: u64 = p.staging_mrs.iter().map(|m| m.length).sum();
        let ids: Vec<String> = p.staging_mrs.iter().map(|m| format!("#{}", m.id)).collect();
        by.push(format!(
            "evidence: {} MR(s), {} in CUDA pinned/registered host memory ({})",
            p.staging_mrs.len(),
            human_bytes(bytes),
            ids.join(" ")
        ));
    }
    if !p.staged_bytes.is_zero() {
        by.push(format!(
            "staged through pinned host memory: {} device->host, {} host->device (cuMemcpy)",
            human_bytes(p.staged_bytes.dtoh),
            human_bytes(p.staged_bytes.htod)
        ));
    }
    if p.gpu_freed_under_registration > 0 {
        by.push(format!("GPU memory freed under a live MR: {}", p.gpu_freed_under_registration));
    }
    by
}

/// Narrower than this, the summary's nine columns can't fit without splitting words: each
/// process is a line (its evidence indented below) instead.
const TABLE_WIDTH: u16 = 120;

/// The registration summary: a table, or on a narrow terminal a line per process.
pub fn summary(agg: &Aggregator) -> String {
    match crate::term::current().width.filter(|&w| w < TABLE_WIDTH) {
        Some(_) => summary_lines(agg),
        None => crate::term::render(&summary_table(agg)),
    }
}

fn summary_lines(agg: &Aggregator) -> String {
    let g = crate::term::glue;
    let mut out = String::new();
    for p in agg.summaries() {
        let gpu = match p.uses_gpu {
            Some(true) => "uses a GPU",
            Some(false) => "no GPU",
            None => "GPU use unknown",
        };
        let figures = [
            g(gpu),
            g(&format!("{} MRs ({} failed)", p.registrations, p.failed)),
            g(&format!("{} registered", human_bytes(p.bytes_registered))),
            g(&format!("{} live", human_bytes(p.live_bytes))),
        ];
        let head = format!(
            "PID {} ({}): {}, {}",
            p.pid,
            field(&p.comm),
            p.process_verdict.as_str(),
            figures.join(", ")
        );
        out.push_str(&crate::term::wrap(&head, "      "));
        out.push('\n');
        for b in by_verdict(p, &|n| g(&human_bytes(n)), true) {
            out.push_str(&crate::term::wrap(&format!("  {b}"), "      "));
            out.push('\n');
        }
        // What its work requests moved, by the memory they named (the wide table's last column).
        for m in crate::mr::bytes::lines(&p.bytes_by_verdict).lines() {
            out.push_str(&crate::term::wrap(&format!("  moved by work requests, {m}"), "      "));
            out.push('\n');
        }
    }
    out.trim_end().to_string()
}

/// One process's storage as the status view's last column: the bytes it moved and by which
/// path, the path that moved the most first ("12.0 MiB page-cache +1").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageCell {
    pub pid: u32,
    pub comm: String,
    pub bytes: u64,
    pub text: String,
    /// Its file data went to or from GPU memory through nvidia-fs or P2PDMA: it uses a GPU
    /// (else unknown: cuFile also takes host buffers).
    pub gpu: bool,
}

impl StorageCell {
    pub fn of(p: &ProcReport) -> Self {
        let bytes: u64 = p.bytes_by_verdict.values().map(|b| b.bytes).sum();
        let mut by: Vec<_> = p.bytes_by_verdict.iter().collect();
        by.sort_by_key(|b| std::cmp::Reverse(b.1.bytes));
        let text = match by.as_slice() {
            [] => "no data moved".to_string(),
            [(v, _), rest @ ..] => {
                let more = if rest.is_empty() { String::new() } else { format!(" +{}", rest.len()) };
                format!("{} {v}{more}", human_bytes(bytes))
            }
        };
        use crate::storage::classify::StorageVerdict as V;
        let gpu =
            p.bytes_by_verdict.iter().any(|(v, b)| b.bytes > 0 && matches!(v, V::GdsNvfs | V::GdsP2pdma));
        Self { pid: p.pid, comm: p.comm.clone(), bytes, text, gpu }
    }
}

/// `--compact`: one line per process, registrations first (as the summary orders them), then
/// the processes that only moved file data, most bytes first. Columns are fixed: no cell wraps.
pub fn status_view(
    agg: &Aggregator,
    storage: &[StorageCell],
    storage_traced: bool,
    rdma_traced: bool,
) -> String {
    // 62 columns before STORAGE: a cell of up to 18 ("2.0 MiB page-cache") fits 80.
    let row = |pid: &dyn std::fmt::Display,
               comm: &str,
               verdict: &str,
               gpu: &str,
               mrs: &dyn std::fmt::Display,
               reg: &str,
               moved: &str,
               st: &str| {
        format!(
            "{pid:>7} {:<12} {verdict:<11} {gpu:<3} {mrs:>4} {reg:>9} {moved:>9} {st}",
            clip(&field(comm), 12)
        )
    };
    let mut out = row(&"PID", "COMM", "VERDICT", "GPU", &"MRS", "MR BYTES", "MOVED", "STORAGE");
    out.push('\n');
    let cell = |pid: u32| -> String {
        match storage.iter().find(|c| c.pid == pid) {
            Some(c) => c.text.clone(),
            None if storage_traced => "-".into(),
            None => "not traced".into(),
        }
    };
    let mut rows = Vec::new();
    for p in agg.summaries() {
        let gpu = match p.uses_gpu {
            Some(true) => "yes",
            Some(false) => "no",
            None => "?",
        };
        // Bytes its work requests moved (out + in), through any memory.
        let moved: u64 = p.bytes_by_verdict.values().map(crate::mr::bytes::Moved::bytes).sum();
        let moved = if p.bytes_by_verdict.is_empty() { "-".to_string() } else { human_bytes(moved) };
        rows.push(row(
            &p.pid,
            &p.comm,
            p.process_verdict.as_str(),
            gpu,
            &p.registrations,
            &human_bytes(p.bytes_registered),
            &moved,
            &cell(p.pid),
        ));
    }
    let mut only_storage: Vec<&StorageCell> =
        storage.iter().filter(|c| !agg.summaries().any(|p| p.pid == c.pid)).collect();
    only_storage.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));
    // No registration seen: none made, or none could be seen.
    let verdict = if rdma_traced { "no-rdma" } else { "not traced" };
    for c in only_storage {
        rows.push(row(&c.pid, &c.comm, verdict, if c.gpu { "yes" } else { "?" }, &0, "-", "-", &c.text));
    }
    if rows.is_empty() {
        return "no process registered memory or moved file data\n".into();
    }
    let more = rows.len().saturating_sub(STATUS_ROWS);
    for r in rows.into_iter().take(STATUS_ROWS) {
        out.push_str(r.trim_end());
        out.push('\n');
    }
    if more > 0 {
        out.push_str(&format!("... and {more} more processes (--json lists them all)\n"));
    }
    out
}

/// `s` in at most `n` characters.
fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
