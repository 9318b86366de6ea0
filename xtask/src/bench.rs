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

use std::{io::Write, path::PathBuf, process::Command};

use anyhow::Result;

use crate::{cargo, setup, sh::workspace_root};

mod bpfmaps;
mod configs;
mod filestorm;
mod libcopies;
mod looper;
mod p2p;
mod progtime;
pub mod regstorm;
mod report;
mod soak;
pub mod startup;
mod storms;
mod teardown;
mod tracer;
mod watch;
use configs::{floor_args, probes_use_fexit, tracer_cmd, Config};
use looper::{target_dir, Loop};
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
    /// Uprobes released for the teardown figure, here and in both VM kernels (0: skip it).
    #[arg(long, default_value_t = 200)]
    pub teardown_uprobes: usize,
    /// Library copies hooked and released for the teardown figure as the follower does where
    /// the kernel has uprobe_multi (two links a copy, released from 256 threads): here (up to
    /// what the open-file limit allows) and in the 6.12 VM (0: skip it).
    #[arg(long, default_value_t = 10_000)]
    pub teardown_copies: usize,
    /// Only the teardown case.
    #[arg(long)]
    pub teardown_only: bool,
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
    if args.teardown_only || args.teardown_uprobes > 0 {
        teardown::run(&bins, args.teardown_uprobes.max(1), args.teardown_copies, &dir)?;
        if args.teardown_only {
            return Ok(0);
        }
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
