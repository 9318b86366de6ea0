//! `gdr-trace watch` and `gdr-trace attach PID`: hooks -> ring buffer -> pipeline -> sink.

use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use gdr_trace_common::maps;
use tokio::io::unix::AsyncFd;

use crate::{
    cli::TraceArgs,
    events,
    exit::{self, Fatal},
    loader::{self, LoadOptions, Tracer},
    pipeline::{monotonic_ns, Pipeline},
    privilege, procfs,
    sink::{json::JsonSink, text::TextSink, Lost, Sink},
    storage,
};

#[derive(Debug, Clone, Copy)]
pub enum Target {
    All,
    Pid(u32),
}

/// Why tracing stopped.
enum End {
    Duration,
    Interrupted,
    Terminated,
    TargetExited(u32),
}

pub fn run(target: Target, args: TraceArgs) -> anyhow::Result<ExitCode> {
    let mut sink: Box<dyn Sink> = if args.json {
        Box::new(JsonSink::new(std::io::stdout()))
    } else {
        Box::new(TextSink::new(crate::escape::Escaped::new(std::io::stdout())))
    };
    trace_into(target, &args, sink.as_mut())?;
    Ok(ExitCode::from(exit::OK))
}

/// Checks the target and privilege, then traces into `sink` until the duration ends, Ctrl-C,
/// or the attached process exits. Shared by `watch`, `attach` and `doctor -p`.
pub fn trace_into(target: Target, args: &TraceArgs, sink: &mut dyn Sink) -> anyhow::Result<()> {
    let filter_pid = match target {
        Target::Pid(pid) if !procfs::pid_alive(pid) => {
            return Err(Fatal::cannot_run(format!("no process with PID {pid}")).into());
        }
        Target::Pid(pid) => Some(pid),
        Target::All => None,
    };
    let bad = |x: f64, min_ok: f64| x.is_nan() || x < min_ok;
    if args.duration.is_some_and(|d| bad(d, f64::MIN_POSITIVE)) || bad(args.interval, 0.0) {
        return Err(Fatal::cannot_run("--duration must be > 0 and --interval >= 0").into());
    }
    privilege::require_tracing()?;
    let opts = LoadOptions {
        filter_pid,
        attach_mode: args.attach_mode,
        uprobes: !args.no_uprobes,
        libibverbs: args.libibverbs.clone(),
        libcuda: args.libcuda.clone(),
        libcufile: args.libcufile.clone(),
        storage: !args.no_storage,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(trace(opts, args, sink))
}

async fn trace(opts: LoadOptions, args: &TraceArgs, sink: &mut dyn Sink) -> anyhow::Result<()> {
    let mut tracer = loader::load(&opts)?;
    privilege::drop_after_attach();
    sink.start(&tracer.facts, &tracer.statuses);
    if tracer.statuses.iter().all(|h| h.attached.is_none()) {
        let why: Vec<String> =
            tracer.statuses.iter().map(|h| format!("{}: {}", h.hook, h.reasons.join("; "))).collect();
        let hint = privilege::perf_paranoid_hint().map_or(String::new(), |h| format!("\nhint: {h}"));
        return Err(Fatal::cannot_run(format!("no hook could attach:\n  {}{hint}", why.join("\n  "))).into());
    }
    let ring = RingBuf::try_from(tracer.ebpf.take_map(maps::EVENTS).context("EVENTS map missing")?)?;
    // SAFETY: the ring buffer's fd stays open as long as the AsyncFd owns the RingBuf.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;

    let mut pipeline = Pipeline::new().with_gpu_use(Box::new(procfs::uses_gpu));
    let mut correlate_tick = tokio::time::interval(Duration::from_millis(100));
    let summary_every = Duration::from_secs_f64(if args.interval > 0.0 { args.interval } else { 1e9 });
    let mut summary_tick =
        tokio::time::interval_at(tokio::time::Instant::now() + summary_every, summary_every);
    let mut alive_tick = tokio::time::interval(Duration::from_millis(250));
    let deadline = args.duration.map(Duration::from_secs_f64);
    let sleep = tokio::time::sleep(deadline.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(sleep);
    let mut bad_records = 0u64;
    // SIGTERM (a service manager, Kubernetes) ends the trace as Ctrl-C does: summaries out,
    // links dropped with the tracer.
    let mut sigterm = crate::shutdown::requests()?;

    let end = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &mut pipeline, sink, &mut bad_records);
                guard.clear_ready();
            }
            _ = correlate_tick.tick() => {
                let now = monotonic_ns();
                sink.tick(now);
                pipeline.tick(now, sink)
            }
            _ = summary_tick.tick() => {
                storage::summarize(&mut tracer.ebpf, pipeline.storage_state(), sink, false);
                pipeline.refresh_gpu_use();
                sink.summary(pipeline.aggregator(), &lost(&tracer, bad_records), false)
            }
            _ = alive_tick.tick() => {
                if let Some(pid) = opts.filter_pid {
                    if !any_tracked_alive(&tracer, pid) {
                        break End::TargetExited(pid);
                    }
                }
            }
            _ = &mut sleep => break End::Duration,
            _ = tokio::signal::ctrl_c() => break End::Interrupted,
            _ = sigterm.recv() => break End::Terminated,
        }
    };
    // Let in-flight records land, then read everything left.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drain(ring.get_mut(), &mut pipeline, sink, &mut bad_records);
    pipeline.finish(sink);
    pipeline.refresh_gpu_use();
    match end {
        End::TargetExited(pid) => {
            sink.note(&format!("process {pid} and its traced children exited; trace ends"))
        }
        End::Interrupted => sink.note("interrupted"),
        End::Terminated => sink.note("terminated (SIGTERM)"),
        End::Duration => {}
    }
    storage::summarize(&mut tracer.ebpf, pipeline.storage_state(), sink, true);
    sink.summary(pipeline.aggregator(), &lost(&tracer, bad_records), true);
    Ok(())
}

fn drain(ring: &mut RingBuf<MapData>, pipeline: &mut Pipeline, sink: &mut dyn Sink, bad: &mut u64) {
    while let Some(item) = ring.next() {
        if storage::is_storage(&item) {
            match storage::from_ring(&item) {
                Ok(ev) => pipeline.storage(ev, sink),
                Err(e) => {
                    *bad += 1;
                    tracing::warn!("undecodable storage record: {e}");
                }
            }
            continue;
        }
        match events::from_bytes(&item) {
            Ok(rec) => {
                sink.raw(&rec);
                pipeline.record(rec, sink)
            }
            Err(e) => {
                *bad += 1;
                tracing::warn!("undecodable record: {e}");
            }
        }
    }
}

fn lost(tracer: &Tracer, bad: u64) -> Lost {
    let mut l = Lost::from_slots(&loader::lost_counts(&tracer.ebpf));
    // Undecodable records are lost too (they would mean a build mismatch).
    l.ringbuf_full += bad;
    l
}

/// Whether the attached process, or any process the kernel filter added for it, still runs.
fn any_tracked_alive(tracer: &Tracer, pid: u32) -> bool {
    if procfs::pid_alive(pid) {
        return true;
    }
    let Some(map) = tracer.ebpf.map(maps::TRACKED) else { return false };
    let Ok(tracked) = BpfHashMap::<_, u32, u8>::try_from(map) else { return false };
    tracked.keys().flatten().any(procfs::pid_alive)
}
