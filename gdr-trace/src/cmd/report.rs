//! `gdr-trace report FILE`: replays a recording through the same pipeline as live mode and
//! prints the per-process summary and the audit findings. No BPF, no privilege.

use std::{fs::File, io::BufReader, path::PathBuf, process::ExitCode};

use serde_json::json;

use crate::{
    audit::Severity,
    exit::Fatal,
    options::exit_for,
    recording::{self, Header, Reader},
    sink::{audit::AuditSink, json::JsonSink, text::TextSink, Sink},
};

#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// A recording made by `gdr-trace record`.
    pub file: PathBuf,
    /// NDJSON instead of tables (the same records as `watch --json` and `audit --json`).
    #[arg(long)]
    pub json: bool,
    /// Also print every registration and release, not only the summary and findings.
    #[arg(long)]
    pub events: bool,
    /// Exit 1 when a finding at or above this severity exists.
    #[arg(long, value_enum, value_name = "SEVERITY")]
    pub fail_on: Option<Severity>,
    /// What the text shows, as for `watch`: `--files` (every process's per-file table),
    /// `--compact` (a line per process).
    #[command(flatten)]
    pub view: crate::options::ViewArgs,
}

fn describe(h: &Header) -> String {
    let hooks = h.hooks.as_array().map_or(&[][..], Vec::as_slice);
    // The count live commands state (hooks left out on purpose are not in the total).
    let c = crate::facts::HookCount::of(hooks.iter().map(|h| {
        (h["hook"].as_str().unwrap_or_default(), !h["attached"].is_null(), h["reasons"][0].as_str())
    }));
    format!(
        "recording from {} (kernel {}, gdr-trace {}), {}/{} hooks attached{}",
        h.host,
        h.kernel["kernel"].as_str().unwrap_or("?"),
        h.version,
        c.attached,
        c.total,
        h.target_pid.map_or(String::new(), |p| format!(", process {p} and its children")),
    )
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let name = args.file.display().to_string();
    let file = File::open(&args.file).map_err(|e| Fatal::cannot_run(format!("{name}: {e}")))?;
    let (header, reader) =
        Reader::open(BufReader::new(file)).map_err(|e| Fatal::cannot_run(format!("{name}: {e}")))?;
    let inner: Box<dyn Sink> = if args.json {
        let v = json!({ "event": "recording", "schema": crate::clock::EVENTS_SCHEMA, "file": name,
            "format": header.format, "host": header.host, "version": header.version,
            "boot_id": header.boot_id, "kernel": header.kernel, "hooks": header.hooks,
            "target_pid": header.target_pid, "started_unix_ms": header.started_unix_ms,
            "started_monotonic_ns": header.started_monotonic_ns, "unix_ms": crate::clock::unix_ms() });
        println!("{v}");
        // Records with a time get it as wall-clock too, through the recording's anchor.
        match header.anchor() {
            Some(anchor) => Box::new(JsonSink::anchored(std::io::stdout(), anchor).files(args.view.files)),
            None => Box::new(JsonSink::new(std::io::stdout()).files(args.view.files)),
        }
    } else {
        println!("{}", crate::term::wrap(&crate::escape::printable(&describe(&header)), "    "));
        Box::new(TextSink::new(crate::escape::Escaped::new(std::io::stdout())).view(args.view.view()))
    };
    let out: Box<dyn std::io::Write> = if args.json {
        Box::new(std::io::stdout())
    } else {
        Box::new(crate::escape::Escaped::new(std::io::stdout()))
    };
    let mut sink = AuditSink::new(inner, out, args.json, header.posture.clone())
        .anchored(header.anchor())
        .host_markers(header.container_host_markers.clone())
        .events(args.events);
    // What the recording traced, as live said it: a family off is "not traced", not "none seen".
    sink.traced(&header.hook_statuses());
    let done = recording::replay(reader, &mut sink, |s, facts| s.auditor.learn(facts.clone()));
    if let Some(e) = done.error {
        return Err(Fatal::cannot_run(format!(
            "{name}: {e} ({} record(s) before it are reported above)",
            done.records
        ))
        .into());
    }
    Ok(exit_for(sink.worst(), args.fail_on))
}
