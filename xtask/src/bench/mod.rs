//! `cargo xtask bench`: what tracing costs the traced process, on this machine's kernel, and what
//! gdr-trace itself costs to start and to keep running (start-up, peak memory; bench/startup.rs).
//!
//! Storage case: `gdr-preadloop` (tests/bench) times its own loops over a warm file — 4 KiB
//! random preads and 1 MiB sequential preads — while, in turn, nothing, `gdr-trace attach`, a
//! bpftrace script doing the same job (calls and bytes per fd on the read system calls), and
//! an empty program on the hook gdr-trace uses for pread here watch it. The floor (what the hook
//! mechanism alone costs) is `gdr-bench-floor`: a program that returns at once, loaded and
//! attached the way gdr-trace attaches its own; bpftrace with an empty action on that hook is
//! measured too. Configurations alternate round after round (the order
//! rotates); each figure is a median over rounds; ratios come from this one run. Not a test:
//! nothing here asserts a timing. GPU↔GPU case: bench/p2p.rs.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::{cargo, kernel::workspace_root, setup};

mod bpfmaps;
mod filestorm;
mod libcopies;
mod p2p;
mod progtime;
pub mod regstorm;
mod report;
mod soak;
pub mod startup;
mod storms;
mod tracer;
mod watch;
use report::report;
use tracer::Tracer;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Rounds (each runs every configuration once). On a shared machine the medians of a few
    /// rounds wander: 21 or more.
    #[arg(long, default_value_t = 21)]
    pub rounds: usize,
    /// 4 KiB preads per measurement.
    #[arg(long, default_value_t = 300_000)]
    pub small: u64,
    /// 1 MiB preads per measurement.
    #[arg(long, default_value_t = 3_000)]
    pub large: u64,
    /// Skip the in-kernel time per call (it turns kernel.bpf_stats_enabled on for a few
    /// seconds, then back to what it was).
    #[arg(long)]
    pub no_prog_stats: bool,
    /// Rounds of the start-up and memory measurement (watch for 2 s, beside bpftrace).
    #[arg(long, default_value_t = 7)]
    pub startup_rounds: usize,
    /// Only the start-up and memory measurement.
    #[arg(long)]
    pub startup_only: bool,
    /// Another gdr-trace binary (say main's release build) measured in the same start-up
    /// rounds, beside this tree's: an A/B comparison on a noisy machine.
    #[arg(long)]
    pub startup_baseline: Option<PathBuf>,
    /// Measure the start-up in the VM on this kernel (emulated CPU) instead of on this machine.
    #[arg(long)]
    pub startup_vm: Option<crate::vm::Kernel>,
    /// 4 KiB cuMemcpyPeer calls per measurement of the GPU↔GPU case (0: skip it).
    #[arg(long, default_value_t = 200_000)]
    pub p2p_calls: u64,
    /// Only the GPU↔GPU case.
    #[arg(long)]
    pub p2p_only: bool,
    /// Library copies dlopened one after another for the mapped-to-hooked figure (0: skip it).
    #[arg(long, default_value_t = 6)]
    pub lib_copies: usize,
    /// Only the library-copies case.
    #[arg(long)]
    pub lib_copies_only: bool,
    /// Only the `serve` soak, in the VM: processes and files churned through the hooks round
    /// after round; memory, series, scrape time and lost events per round (bench/soak.rs).
    #[arg(long)]
    pub soak_only: bool,
    /// VM kernel of the soak.
    #[arg(long, default_value = "6.1")]
    pub soak_kernel: crate::vm::Kernel,
    /// Soak rounds.
    #[arg(long, default_value_t = 10)]
    pub soak_rounds: usize,
    /// Short-lived processes per soak round (half register an MR on rxe0, half read files).
    #[arg(long, default_value_t = 1000)]
    pub soak_procs: usize,
    /// Files created, read once by a churned process and deleted, per soak round.
    #[arg(long, default_value_t = 10_000)]
    pub soak_files: usize,
    #[command(flatten)]
    pub storm: storms::StormArgs,
    /// Use the debug build as it is (a quick look; the figures are the release build's).
    #[arg(long)]
    pub debug_build: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    Untraced,
    GdrTrace,
    Bpftrace,
    EmptyProgram,
    BpftraceEmpty,
}

impl Config {
    const ALL: [Config; 5] =
        [Config::Untraced, Config::GdrTrace, Config::Bpftrace, Config::EmptyProgram, Config::BpftraceEmpty];

    fn name(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::GdrTrace => "gdr-trace attach",
            Config::Bpftrace => "bpftrace (calls+bytes per fd)",
            Config::EmptyProgram => "empty program (floor)",
            Config::BpftraceEmpty => "bpftrace empty action",
        }
    }
}

const READ_CALLS: [&str; 5] = ["read", "pread64", "readv", "preadv", "preadv2"];

/// The bpftrace equivalent of what gdr-trace counts for reads: calls and bytes per (pid, fd).
fn bpftrace_script(pid: u32) -> String {
    let list = |dir: &str| READ_CALLS.map(|c| format!("tracepoint:syscalls:sys_{dir}_{c}")).join(",");
    format!(
        "{} /pid == {pid}/ {{ @fd[tid] = args->fd + 1; }}\n\
         {} /@fd[tid]/ {{ @calls[pid, @fd[tid] - 1] = count(); @bytes[pid, @fd[tid] - 1] = sum(args->ret); \
         delete(@fd[tid]); }}",
        list("enter"),
        list("exit")
    )
}

/// gdr-trace hooks pread64 at syscall exit: fexit where the kernel allows it, else the
/// `sys_exit_pread64` tracepoint. The floor is an empty program on that same hook.
fn floor_args(fexit: bool) -> Vec<String> {
    if fexit {
        vec!["fexit".into(), "__x64_sys_pread64".into()]
    } else {
        vec!["tracepoint".into()]
    }
}

fn floor_script(fexit: bool) -> String {
    if fexit {
        "kretfunc:__x64_sys_pread64 { }".into()
    } else {
        "tracepoint:syscalls:sys_exit_pread64 { }".into()
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// A measuring loop program: prints "ready", then answers each line on its stdin with one JSON
/// line (gdr-preadloop, gdr-cuda-workload peerloop, gdr-regstorm).
pub(super) struct Loop {
    pub(super) child: Child,
    out: BufReader<ChildStdout>,
}

impl Loop {
    pub(super) fn start(mut cmd: Command, what: &str) -> Result<Self> {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.contains("ready") {
            bail!("{what} did not start: {line:?}");
        }
        Ok(Self { child, out })
    }

    /// Sends one line; the JSON answer.
    pub(super) fn ask(&mut self, ask: &str) -> Result<serde_json::Value> {
        let stdin = self.child.stdin.as_mut().context("stdin")?;
        writeln!(stdin, "{ask}")?;
        stdin.flush()?;
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        serde_json::from_str(&line).with_context(|| format!("loop said {line:?}"))
    }

    /// The answer's `ns_per_op`.
    pub(super) fn ns_per_op(&mut self, ask: &str) -> Result<f64> {
        self.ask(ask)?["ns_per_op"].as_f64().context("no ns_per_op")
    }

    /// Closes its stdin (it ends) and waits.
    pub(super) fn end(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// This xtask binary's path for the VM to run: rebuilt while a bench runs, the running one is
/// "(deleted)" and the path names the new build.
fn guest_exe() -> Result<String> {
    let exe = std::env::current_exe()?.display().to_string();
    Ok(exe.strip_suffix(" (deleted)").map(str::to_string).unwrap_or(exe))
}

pub fn main(args: BenchArgs) -> Result<i32> {
    setup::ensure()?;
    if !args.debug_build {
        cargo::build_bins(true)?;
    }
    let bins = target_dir().join(if args.debug_build { "debug" } else { "release" });
    let (gdr, looper, floor) =
        (bins.join("gdr-trace"), bins.join("gdr-preadloop"), bins.join("gdr-bench-floor"));
    let dir = workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("preadloop.bin");
    if std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) != 64 << 20 {
        let mut f = std::fs::File::create(&file)?;
        let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for _ in 0..64 {
            f.write_all(&chunk)?;
        }
    }
    if args.soak_only {
        let a = soak::SoakArgs {
            kernel: args.soak_kernel,
            rounds: args.soak_rounds,
            procs: args.soak_procs,
            files: args.soak_files,
            top: 20,
        };
        soak::run(&bins, &a, &dir)?;
        return Ok(0);
    }
    if args.storm.storm_only || !(args.lib_copies_only || args.p2p_only || args.startup_only) {
        storms::run(&args.storm, &bins, &dir)?;
        if args.storm.storm_only {
            return Ok(0);
        }
    }
    if args.lib_copies_only || args.lib_copies > 1 {
        let f = libcopies::measure(&bins, &target_dir(), args.lib_copies.max(2), &dir)?;
        libcopies::print(&f);
        std::fs::write(dir.join("libcopies.json"), serde_json::to_string_pretty(&libcopies::json(&f))?)?;
        if args.lib_copies_only {
            return Ok(0);
        }
    }
    if args.p2p_only {
        p2p::measure(&gdr, args.rounds, args.p2p_calls.max(1), &dir)?;
        return Ok(0);
    }
    let rows = match args.startup_vm {
        Some(kernel) => startup::in_vm(kernel, &gdr, args.startup_baseline.as_deref(), args.startup_rounds)?,
        None => startup::measure(&gdr, args.startup_baseline.as_deref(), args.startup_rounds)?,
    };
    startup::print(&rows);
    std::fs::write(dir.join("startup.json"), serde_json::to_string_pretty(&startup::json(&rows))?)?;
    if args.startup_only {
        return Ok(0);
    }
    let fexit = probes_use_fexit(&gdr)?;
    let mut lp = Loop::start(
        {
            let mut c = Command::new(&looper);
            c.arg(&file);
            c
        },
        "gdr-preadloop",
    )?;
    let pid = lp.child.id();
    eprintln!(
        "[bench] storage: pread loop pid {pid}, {} rounds of {} x 4 KiB random + {} x 1 MiB sequential; \
         floor = gdr-bench-floor {}",
        args.rounds,
        args.small,
        args.large,
        floor_args(fexit).join(" ")
    );
    let n = Config::ALL.len();
    let mut small: Vec<Vec<f64>> = vec![vec![]; n];
    let mut large: Vec<Vec<f64>> = vec![vec![]; n];
    for round in 0..args.rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let config = Config::ALL[i];
            let tracer = match tracer_cmd(config, &gdr, &floor, pid, fexit) {
                Some((cmd, marker)) => Some(Tracer::start(cmd, marker)?),
                None => None,
            };
            let s = lp.ns_per_op(&format!("4k {}", args.small))?;
            let l = lp.ns_per_op(&format!("1m {}", args.large))?;
            if let Some(t) = tracer {
                t.stop()?;
            }
            eprintln!("[bench] round {round} {:<30} 4 KiB {s:>8.1} ns   1 MiB {l:>10.1} ns", config.name());
            small[i].push(s);
            large[i].push(l);
        }
    }
    let per_call = if args.no_prog_stats {
        vec![]
    } else {
        progtime::prog_stats(&mut lp, &gdr, &floor, pid, fexit, args.small)?
    };
    lp.end();
    report(&small, &large, &per_call, fexit, &dir)?;
    if args.p2p_calls > 0 {
        p2p::measure(&gdr, args.rounds, args.p2p_calls, &dir)?;
    }
    Ok(0)
}

/// The tracer's start command for a configuration (None: untraced).
fn tracer_cmd(
    config: Config,
    gdr: &Path,
    floor: &Path,
    pid: u32,
    fexit: bool,
) -> Option<(Command, &'static str)> {
    match config {
        Config::Untraced => None,
        Config::GdrTrace => {
            let mut c = Command::new(gdr);
            c.args(["attach", &pid.to_string(), "--json", "--interval", "0"]);
            Some((c, "\"event\":\"hooks\""))
        }
        Config::Bpftrace => {
            let mut c = Command::new("bpftrace");
            c.args(["-e", &bpftrace_script(pid)]);
            Some((c, "Attaching"))
        }
        Config::EmptyProgram => {
            let mut c = Command::new(floor);
            c.args(floor_args(fexit));
            Some((c, "attached"))
        }
        Config::BpftraceEmpty => {
            let mut c = Command::new("bpftrace");
            c.args(["-e", &floor_script(fexit)]);
            Some((c, "Attaching"))
        }
    }
}

/// Whether gdr-trace hooks pread64 with fexit here (else a tracepoint).
fn probes_use_fexit(gdr: &Path) -> Result<bool> {
    let out = Command::new(gdr).args(["probes", "--json"]).output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("gdr-trace probes --json")?;
    let how = v["hooks"]
        .as_array()
        .and_then(|hs| hs.iter().find(|h| h["hook"].as_str().is_some_and(|n| n.contains("pread64"))))
        .and_then(|h| h["attached"].as_str().map(str::to_string))
        .unwrap_or_default();
    Ok(how == "fexit")
}
