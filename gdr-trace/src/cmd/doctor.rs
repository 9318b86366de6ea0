//! `gdr-trace doctor`: the GPUDirect troubleshooting order as a ranked diagnosis
//! (see `crate::doctor`).
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use comfy_table::Cell;

use crate::doctor::{self, Diagnosis, GpuImport, LiveEvidence, StagingMr};
use crate::exit::Fatal;
use crate::nccl_log::{self, NcclLog};
use crate::options::{preflight_report, PreflightArgs};
use crate::preflight::{GdrLevel, GdrLevelSetting, LevelSource, PreflightReport};

#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub preflight: PreflightArgs,
    /// An NCCL_DEBUG=INFO log of the job (any size; unknown lines are ignored).
    #[arg(long, value_name = "FILE")]
    pub nccl_log: Option<PathBuf>,
    /// Also trace this process's memory registrations and compare with what NCCL says.
    #[arg(long, short, value_name = "PID")]
    pub pid: Option<u32>,
    /// How long to trace the process given with --pid, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = crate::options::positive_secs)]
    pub duration: f64,
    /// Print the diagnosis as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Driver-level evidence for `pid` over `duration`.
/// Attaches to `pid` for `duration` and sums its registrations per (RDMA device, verdict).
pub fn live_evidence(pid: u32, duration: Duration) -> anyhow::Result<LiveEvidence> {
    let opts = crate::trace::TraceOptions {
        // Registrations are the evidence here; file I/O hooks would only cost.
        load: crate::loader::LoadOptions {
            filter_pid: Some(pid),
            uprobes: true,
            storage: false,
            ..Default::default()
        },
        duration: Some(duration.as_secs_f64()),
        interval: 0.0,
    };
    let mut sink = EvidenceSink { ev: LiveEvidence::new(pid, duration.as_secs_f64()) };
    crate::trace::run(&opts, &mut sink)?;
    sink.ev.comm = crate::procfs::comm(pid).or(sink.ev.comm);
    let (proc_root, sys_root) = (std::path::Path::new("/proc"), std::path::Path::new("/sys"));
    sink.ev.cufile = crate::doctor::gds_live::read(proc_root, sys_root, pid);
    Ok(sink.ev)
}

/// Collects the tracer's registrations as doctor's evidence.
struct EvidenceSink {
    ev: LiveEvidence,
}

impl crate::sink::Sink for EvidenceSink {
    fn start(&mut self, facts: &crate::facts::KernelFacts, hooks: &[crate::facts::HookStatus]) {
        // What cannot be known here first; then progress for people (and the signal scripts
        // can wait for): tracing has begun. The storage hooks doctor leaves out on purpose are
        // not in the total.
        self.ev.untold = crate::untold::untold(facts, hooks);
        for u in &self.ev.untold {
            eprintln!("gdr-trace doctor: ! {}", u.says);
        }
        let c = crate::facts::HookCount::statuses(hooks);
        eprintln!(
            "gdr-trace doctor: tracing PID {} for {} s ({}/{} hooks attached)",
            self.ev.pid, self.ev.duration_s, c.attached, c.total
        );
    }
    fn emit(&mut self, out: &crate::sink::Output<'_>) {
        use crate::sink::Output as O;
        match *out {
            O::Registered { reg, verdict } => {
                self.ev.comm.get_or_insert_with(|| reg.ctx.comm.clone());
                let bytes = if reg.failed { 0 } else { reg.length };
                self.ev.add(reg.device.as_deref(), verdict.as_str(), 1, bytes);
                if reg.host_origin.is_some_and(|o| o.is_cuda()) {
                    let device = reg.device.clone();
                    // The call when seen, else the kernel's map (allocated before the trace).
                    let how = reg.host_alloc.map_or("a /dev/nvidiactl mapping (CUDA pinned)", |h| h.as_str());
                    self.ev.staging_mrs.push(StagingMr { device, length: reg.length, host_alloc: how });
                }
            }
            O::GpuIpc(ipc) => self.ev.gpu_imports.push(GpuImport {
                op: ipc.op.clone(),
                exporter_pid: ipc.exporter_pid,
                ok: ipc.ret == 0,
            }),
            O::QueueSummary { report, last: true } => {
                self.ev.queues = report.procs.iter().find(|p| p.queues.pid == self.ev.pid).cloned();
            }
            O::P2pSummary { report, last: true } => {
                let pairs =
                    report.processes.iter().filter(|p| p.pid == self.ev.pid).flat_map(|p| p.pairs.clone());
                self.ev.p2p_pairs = pairs.collect();
            }
            _ => {}
        }
    }
}

/// What `doctor --json` prints.
#[derive(serde::Serialize)]
struct Output<'a> {
    schema: &'static str,
    nccl_log: Option<String>,
    diagnosis: &'a Diagnosis,
    nccl: Option<&'a NcclLog>,
    live: Option<&'a LiveEvidence>,
    preflight: &'a PreflightReport,
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    if args.json {
        return run_to(&args, &mut std::io::stdout().lock());
    }
    // NCCL log lines, process names: text for a terminal is escaped.
    run_to(&args, &mut crate::escape::Escaped::new(std::io::stdout().lock()))
}

/// `run`, writing to `out`.
pub fn run_to(args: &DoctorArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let nccl = match &args.nccl_log {
        Some(p) => {
            let bytes = std::fs::File::open(p)
                .and_then(|f| {
                    crate::bounded::read_all(f, crate::bounded::MAX_NCCL_LOG, crate::bounded::MAX_NCCL_LINE)
                })
                .map_err(|e| {
                    Fatal::cannot_run(format!("doctor: cannot read NCCL log {}: {e}", p.display()))
                })?;
            let log = nccl_log::parse_bytes(&bytes);
            // Not an NCCL log at all (a wrong file): bad input, not a finding about the job.
            if log.is_empty() && log.lines > 0 {
                return Err(Fatal::cannot_run(format!(
                    "doctor: {} is not an NCCL log: {} line(s), none of them NCCL's (give the log of a \
                     run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH)",
                    p.display(),
                    log.lines
                ))
                .into());
            }
            Some(log)
        }
        None => None,
    };
    let mut pre_args = args.preflight.clone();
    let mut from_log = None;
    if pre_args.nccl_gdr_level.is_none() {
        if let Some(level) =
            nccl.as_ref().and_then(|l| l.env.get("NCCL_NET_GDR_LEVEL")).and_then(|v| GdrLevel::parse(v).ok())
        {
            pre_args.nccl_gdr_level = Some(level);
            from_log = Some(level);
        }
    }
    let mut pre = preflight_report(&pre_args)?;
    if let Some(level) = from_log {
        pre.nccl_net_gdr_level = GdrLevelSetting { level, source: LevelSource::NcclLog, note: None };
    }
    let live = match args.pid {
        Some(pid) => {
            if !(args.duration > 0.0 && args.duration <= crate::trace::MAX_SECS) {
                return Err(Fatal::cannot_run(format!(
                    "doctor: --duration must be a positive number of seconds, not {}",
                    args.duration
                ))
                .into());
            }
            Some(
                live_evidence(pid, Duration::from_secs_f64(args.duration))
                    .map_err(|e| Fatal::cannot_run(format!("doctor: {e:#}")))?,
            )
        }
        None => None,
    };
    let diag = doctor::diagnose(nccl.as_ref(), &pre, live.as_ref());
    if args.json {
        let o = Output {
            schema: "gdr-trace.doctor/1",
            nccl_log: args.nccl_log.as_ref().map(|p| p.display().to_string()),
            diagnosis: &diag,
            nccl: nccl.as_ref(),
            live: live.as_ref(),
            preflight: &pre,
        };
        serde_json::to_writer_pretty(&mut *out, &o).context("writing JSON")?;
        writeln!(out)?;
    } else {
        write!(out, "{}", render(&diag, &pre, args))?;
    }
    out.flush()?;
    Ok(ExitCode::from(diag.exit_code))
}

/// The diagnosis for people: ranked problems, then the walkthrough, then the A/B commands.
pub fn render(d: &Diagnosis, pre: &PreflightReport, args: &DoctorArgs) -> String {
    let mut out = format!(
        "gdr-trace doctor: sysfs {}, procfs {}, {}",
        pre.sysfs_root,
        pre.proc_root,
        pre.nccl_net_gdr_level.describe()
    );
    if let Some(p) = &args.nccl_log {
        let _ = write!(out, ", NCCL log {}", p.display());
    }
    if let Some(pid) = args.pid {
        let _ = write!(out, ", PID {pid} for {} s", args.duration);
    }
    // Within the terminal: the head line wraps at a word (80 columns: it was 81 wide).
    out = crate::term::wrap(&out, "    ");
    out.push_str("\n\nRanked diagnosis\n");
    if d.problems.is_empty() && pre.gpus.is_empty() {
        // Not a pass: there is nothing here for GPUDirect to work with.
        out.push_str("  no NVIDIA GPU on this machine: nothing to diagnose (run doctor on a GPU node)\n");
    } else if d.problems.is_empty() {
        out.push_str("  nothing found that keeps GPU memory from the NIC\n");
    } else {
        let mut t = crate::term::table();
        t.set_header(vec!["#", "severity", "step", "problem"]);
        for (i, p) in d.problems.iter().enumerate() {
            let mut text = p.title.clone();
            for e in &p.evidence {
                let _ = write!(text, "\n  {e}");
            }
            if let Some(f) = &p.fix {
                let _ = write!(text, "\nfix: {f}");
            }
            t.add_row(vec![
                Cell::new(i + 1),
                Cell::new(format!("{:?}", p.severity).to_lowercase()),
                Cell::new(p.step.title()),
                Cell::new(text),
            ]);
        }
        let _ = writeln!(out, "{}", crate::term::render(&t));
    }
    out.push_str("\nWalkthrough\n");
    for (i, s) in d.steps.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", i + 1, s.step.title());
        for l in &s.lines {
            let _ = writeln!(out, "   {l}");
        }
        if s.step == doctor::Step::Bandwidth {
            for t in &d.ab_tests {
                let _ = writeln!(out, "   GPU {} ({}) ↔ {}:", t.gpu_index, t.gpu, t.ib_device);
                let _ = writeln!(out, "     A, GPU memory   here:    {}", t.gpu_server);
                let _ = writeln!(out, "                     on peer: {}", t.gpu_client);
                let _ = writeln!(out, "     B, host memory  here:    {}", t.host_server);
                let _ = writeln!(out, "                     on peer: {}", t.host_client);
            }
            if !d.ab_tests.is_empty() {
                out.push_str("     (on the peer use its own GPU index and RDMA device; A well below B = GPU memory is not reaching the NIC at full speed)\n");
            }
        }
    }
    // The README's rule: a problem is what makes the exit code 1 (high or critical); the rest
    // are warnings and context, counted as such.
    let problems = d.problems.iter().filter(|p| p.severity <= doctor::Severity::High).count();
    let others = d.problems.len() - problems;
    let also = if others > 0 { format!(", {others} warning(s) or note(s)") } else { String::new() };
    if d.problems.is_empty() && pre.gpus.is_empty() {
        // Not "0 problem(s)": nothing was looked at that could have had one.
        let _ = writeln!(out, "\nnothing diagnosed: no NVIDIA GPU on this machine -> exit {}", d.exit_code);
    } else {
        let _ = writeln!(out, "\n{problems} problem(s){also} -> exit {}", d.exit_code);
    }
    out
}
