//! The trace loop, owned by no command: load and attach (`loader`), drain the ring buffer
//! (decode once, enrich from /proc, feed the one `Pipeline`), tick (close correlation windows;
//! at each summary interval read the kernel's counter maps and summarise), and end on the
//! duration, Ctrl-C, SIGTERM or the traced process's exit. `watch`, `attach`, `audit`, `record`,
//! `serve` and `doctor -p` only choose options and sinks.

mod bytes_read;
mod cufile_library;
mod freed;
mod gds_early;
pub mod p2p_live;
pub mod page_fills;
pub mod pin_device;
pub mod storage_live;

use std::time::Duration;

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use gdr_trace_common::{
    maps,
    storage::{FillKey, PageFills},
};
use tokio::io::unix::AsyncFd;

use crate::{
    events,
    exit::Fatal,
    loader::{self, follow_remote::Remote, LoadOptions, MapSet},
    pipeline::{monotonic_ns, Pipeline},
    privilege, procfs,
    sink::{Lost, Output, Sink},
    stop::{self, Stop},
};

/// What to load and how long to trace.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// What to attach, and the process filter (`load.filter_pid`).
    pub load: LoadOptions,
    /// Stop after this many seconds (None: until Ctrl-C, SIGTERM, or the traced process exits).
    pub duration: Option<f64>,
    /// Summaries every this many seconds (0: only at the end).
    pub interval: f64,
}

/// Why tracing stopped.
#[derive(Debug)]
enum End {
    Duration,
    Asked(Stop),
    TargetExited(u32),
}

/// The longest time a trace option may give, in seconds (about 31 years): beyond it a deadline
/// would overflow the clock.
pub const MAX_SECS: f64 = 1e9;

/// Checks the target and privilege, then traces into `sink` until the duration ends, Ctrl-C,
/// SIGTERM, or the traced process and its children exit.
pub fn run(opts: &TraceOptions, sink: &mut dyn Sink) -> anyhow::Result<()> {
    if let Some(pid) = opts.load.filter_pid.filter(|p| !procfs::pid_alive(*p)) {
        return Err(Fatal::cannot_run(format!("no process with PID {pid}")).into());
    }
    let bad = |x: f64, min_ok: f64| !(min_ok..=MAX_SECS).contains(&x);
    if opts.duration.is_some_and(|d| bad(d, f64::MIN_POSITIVE)) || bad(opts.interval, 0.0) {
        return Err(Fatal::cannot_run(format!(
            "--duration must be > 0 and --interval >= 0, both at most {MAX_SECS:e} seconds"
        ))
        .into());
    }
    // Normally done first thing in main; here too for callers that did not.
    stop::install();
    privilege::require_tracing()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let target = opts.load.filter_pid.map(|pid| (pid, procfs::comm(pid).unwrap_or_default()));
    rt.block_on(trace(opts, target, sink))
}

async fn trace(
    opts: &TraceOptions,
    target: Option<(u32, String)>,
    sink: &mut dyn Sink,
) -> anyhow::Result<()> {
    // SIGTERM (a service manager, Kubernetes), SIGINT and SIGHUP are caught from the start of
    // main (`stop::install`), so none can kill the process between two attaches; `start` tells
    // anyone waiting that tracing began.
    let loader::Tracer { mut ebpf, statuses, extra_links, facts, follower } = loader::load(&opts.load)?;
    // The trace loop reads the maps; the programs (and their links) go to the thread that
    // loads the library follower's programs and starts it, and come back at the end.
    let mut kmaps = MapSet::take_all(&mut ebpf);
    // Library copies found later are hooked by a process of its own that keeps what that
    // needs (loader::follow_remote); this thread keeps only what reading /proc needs.
    let mut follow = Remote::spawn(&follower, ebpf, &kmaps);
    privilege::drop_after_attach();
    // A process gone while the hooks attached was never traced: saying "tracing pid N" and
    // exiting 0 would read as "it did nothing".
    if let Some((pid, comm)) = target.filter(|(pid, _)| !procfs::pid_alive(*pid)) {
        let named =
            if comm.is_empty() { String::new() } else { format!(" ({})", crate::escape::printable(&comm)) };
        return Err(Fatal::cannot_run(format!(
            "process {pid}{named} exited while the hooks attached: nothing of it was traced"
        ))
        .into());
    }
    sink.start(&facts, &statuses);
    tracing::debug!("tracing");
    if let Some(why) = follow.unavailable.clone() {
        sink.emit(&Output::Note(&why));
    }
    // The library follower's own tracepoints hook nothing a user asked for.
    let observes = |h: &&crate::facts::HookStatus| !crate::facts::TRACER_ROWS.contains(&h.hook);
    if statuses.iter().filter(observes).all(|h| h.attached.is_none()) {
        let why: Vec<String> =
            statuses.iter().map(|h| format!("{}: {}", h.hook, h.reasons.join("; "))).collect();
        let hint = privilege::perf_paranoid_hint().map_or(String::new(), |h| format!("\nhint: {h}"));
        return Err(Fatal::cannot_run(format!("no hook could attach:\n  {}{hint}", why.join("\n  "))).into());
    }
    let ring = RingBuf::try_from(kmaps.take_map(maps::EVENTS).context("EVENTS map missing")?)?;
    // SAFETY: the ring buffer's fd stays open as long as the AsyncFd owns the RingBuf.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;

    let mut pipeline = Pipeline::new()
        .with_peermem(facts.peermem.as_ref().map(|p| p.mode))
        .with_io_mapping_visible(crate::queues::io_mapping_visible(&statuses))
        .with_claims_apart(crate::untold::claims_apart(&facts, &statuses))
        .with_gpu_use({
            // Asked again only after a back-off per process: see procfs::GpuUseCache.
            let mut cache = procfs::GpuUseCache::new(procfs::uses_gpu);
            Box::new(move |pid| cache.get(pid))
        })
        .with_host_maps(Box::new(|pid| {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
            Some(crate::p2p::origin::control_node_ranges(&maps))
        }));
    let mut correlate_tick = tokio::time::interval(Duration::from_millis(100));
    let summary_every = Duration::from_secs_f64(if opts.interval > 0.0 { opts.interval } else { 1e9 });
    // One start for both clocks: a summary due when the trace ends is the final one, not an
    // interim copy of it (`--interval` equal to `--duration` printed the summary twice).
    let t0 = tokio::time::Instant::now();
    let mut summary_tick = tokio::time::interval_at(t0 + summary_every, summary_every);
    let mut alive_tick = tokio::time::interval(Duration::from_millis(250));
    let deadline = opts.duration.map(Duration::from_secs_f64);
    let ends_at = deadline.map(|d| t0 + d);
    let sleep = tokio::time::sleep_until(ends_at.unwrap_or(t0 + Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(sleep);
    let mut records = Records::default();
    let mut live = Live::default();
    // SIGINT, SIGTERM, SIGHUP or a closed output, since main started (start-up included): the
    // summaries go out, then the hooks are released.
    let asked = stop::wait();
    tokio::pin!(asked);

    let end = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &mut pipeline, sink, &mut records, &mut follow, &mut live);
                guard.clear_ready();
            }
            _ = correlate_tick.tick() => {
                // The clock first, then every record already in the ring: a record stamped
                // before `now` is never left behind, so closing on `now` splits nothing.
                let now = monotonic_ns();
                drain(ring.get_mut(), &mut pipeline, sink, &mut records, &mut follow, &mut live);
                for c in follow.take_changes() {
                    sink.emit(&Output::LibraryCopy(&c));
                }
                sink.tick(now);
                pipeline.tick(now, sink);
                take_fills(&kmaps, &mut pipeline, &mut live.storage.taken);
            }
            now = summary_tick.tick() => {
                if ends_at.is_some_and(|end| now >= end) {
                    break End::Duration;
                }
                summarize(&mut kmaps, &follow, &mut pipeline, sink, records, &mut live, false)
            }
            _ = alive_tick.tick() => {
                stop::check_stdout();
                if let Some(pid) = opts.load.filter_pid {
                    if !any_tracked_alive(&kmaps, pid) {
                        break End::TargetExited(pid);
                    }
                }
            }
            _ = &mut sleep => break End::Duration,
            why = &mut asked => break End::Asked(why),
        }
    };
    tracing::debug!("trace ended: {end:?}");
    // Let in-flight records land, then read everything left.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drain(ring.get_mut(), &mut pipeline, sink, &mut records, &mut follow, &mut live);
    // Copies whose processes exited are let go (and said so) before the end.
    for c in follow.finish() {
        sink.emit(&Output::LibraryCopy(&c));
    }
    tracing::debug!("library follower finished");
    pipeline.finish(sink);
    match end {
        End::TargetExited(pid) => {
            sink.emit(&Output::Note(&format!("process {pid} and its traced children exited; trace ends")))
        }
        End::Asked(Stop::Interrupted) => sink.emit(&Output::Note("interrupted")),
        End::Asked(Stop::Terminated) => sink.emit(&Output::Note("terminated (SIGTERM)")),
        End::Asked(Stop::HungUp) => sink.emit(&Output::Note("hung up (SIGHUP)")),
        End::Asked(Stop::OutputClosed) => {}
        End::Asked(Stop::Decided) => sink.emit(&Output::Note("the gate has its answer; trace ends")),
        End::Duration => {}
    }
    summarize(&mut kmaps, &follow, &mut pipeline, sink, records, &mut live, true);
    tracing::debug!("final summary written");
    // The programs and their links, back from the follower's thread, stay until the hooks
    // are handed over (dropped here, each would detach on its own, one grace period each).
    let ebpf = follow.end();
    crate::teardown::release_hooks();
    tracing::debug!("hooks handed over");
    drop((ebpf, extra_links));
    Ok(())
}

/// What the loop's live readers keep between records and ticks (one per trace, no statics).
#[derive(Default)]
struct Live {
    /// RDMA devices by their uverbs node, for pins whose device no BTF names.
    devices: pin_device::UverbsDevices,
    /// The storage family's.
    storage: storage_live::StorageLive,
}

/// Ring records read so far: decoded, and refused by the decoder.
#[derive(Debug, Default, Clone, Copy)]
struct Records {
    delivered: u64,
    bad: u64,
}

fn drain(
    ring: &mut RingBuf<MapData>,
    pipeline: &mut Pipeline,
    sink: &mut dyn Sink,
    records: &mut Records,
    follow: &mut Remote,
    live: &mut Live,
) {
    while let Some(item) = ring.next() {
        let decoded = events::decode(&item);
        if decoded.is_ok() {
            records.delivered += 1;
        }
        // The kernel leaves gdr-trace's own processes out; what came before it knew of one
        // (the follower's first instants) is left out here.
        if decoded.as_ref().is_ok_and(|ev| own(follow, ev.pid())) {
            continue;
        }
        match decoded {
            // Which process to look at for new library copies: the follower's, on the next tick.
            Ok(events::Event::LibraryMapped(ctx)) => follow.note(ctx.pid),
            Ok(mut ev) => {
                live.storage.enrich(&mut ev);
                live.devices.enrich(&mut ev);
                sink.raw(&ev);
                pipeline.push(ev, sink);
                // Read at a cuFile process's first call (`gds_early`): its reasons now.
                for (pid, facts) in live.storage.gds.fresh() {
                    pipeline.gds_facts(pid, facts);
                }
            }
            Err(e) => {
                records.bad += 1;
                tracing::warn!("undecodable record: {e}");
            }
        }
    }
}

/// gdr-trace's own processes: this one and its library follower.
fn tracer_own_pids(follow: &Remote) -> [u32; 2] {
    [std::process::id(), follow.pid().unwrap_or(std::process::id())]
}

fn own(follow: &Remote, pid: u32) -> bool {
    tracer_own_pids(follow).contains(&pid)
}

fn lost(kmaps: &MapSet, records: Records) -> Lost {
    let mut l = Lost::from_slots(&loader::lost_counts(kmaps));
    // Records refused by the decoder (unknown kind, too short): lost, under their own reason.
    l.add(gdr_trace_common::lost::UNDECODABLE, records.bad);
    for (slot, t) in l.by_tenant.iter_mut().zip(loader::lost_by_tenant(kmaps)) {
        *slot = t;
    }
    l.delivered = Some(records.delivered);
    l
}

/// Whether the attached process, or any process the kernel filter added for it, still runs.
fn any_tracked_alive(kmaps: &MapSet, pid: u32) -> bool {
    if procfs::pid_alive(pid) {
        return true;
    }
    let Some(map) = kmaps.map(maps::TRACKED) else { return false };
    let Ok(tracked) = BpfHashMap::<_, u32, u8>::try_from(map) else { return false };
    tracked.keys().flatten().any(procfs::pid_alive)
}

/// Page-fill entries the kernel map need not hold any more leave it (it would fill up on a
/// busy node between summaries): folded files' (their growth added now), and exited processes'
/// (final; `taken` keeps them for the next snapshot, so recordings have them too).
fn take_fills(kmaps: &MapSet, pipeline: &mut Pipeline, taken: &mut Vec<(FillKey, PageFills)>) {
    let keys = pipeline.storage_state().folded_fill_keys();
    if !keys.is_empty() {
        pipeline.fills_taken(page_fills::fills(kmaps, &keys));
    }
    let keys = pipeline.exited_fill_keys();
    if !keys.is_empty() {
        taken.extend(page_fills::exited(kmaps, &keys));
    }
}

/// The summary tick (every interval, and `last` at the end): reading the kernel's counter maps
/// is part of it; the pipeline does the rest.
fn summarize(
    kmaps: &mut MapSet,
    follow: &Remote,
    pipeline: &mut Pipeline,
    sink: &mut dyn Sink,
    records: Records,
    live: &mut Live,
    last: bool,
) {
    take_fills(kmaps, pipeline, &mut live.storage.taken);
    // One reading per family, each from its own maps.
    let mut storage = live.storage.read(kmaps, pipeline.storage_state());
    storage.folded_growth = pipeline.take_fill_growth();
    let (copies, peers, comms) = p2p_live::read(kmaps);
    for (pid, comm) in comms {
        storage.comms.entry(pid).or_insert(comm);
    }
    let follow_pid = tracer_own_pids(follow);
    storage.files.retain(|f| !follow_pid.contains(&f.pid));
    storage.fills.retain(|f| !follow_pid.contains(&f.pid));
    let counters = crate::counters::Counters {
        storage,
        p2p: copies,
        peer_access: peers,
        staged: p2p_live::read_staged(kmaps),
        bytes: bytes_read::read(kmaps),
    };
    pipeline.summary_tick(counters, &lost(kmaps, records), last, sink);
    // The tick's reports and the state of the interval's exited processes are freed by now;
    // glibc keeps freed heap at its high mark unless asked (the serve soak on the host: resident
    // memory held ~49 MiB with ~7 MiB of live heap): give it back, every tick.
    crate::heap::trim();
}
