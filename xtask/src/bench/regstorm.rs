//! The registration storm (`cargo xtask bench --storm-only`): in the VM (Debian kernel, rxe0),
//! `gdr-regstorm` loops ibv_reg_mr + ibv_dereg_mr of 4 KiB, untraced and under
//! `gdr-trace watch --json` (every hook family), round after round (the order alternates);
//! medians. Then one run where watch's output is not read (`watch::Stall`): its ring buffer
//! overflows, and the records it delivered plus those it counted lost must make what a clean
//! run of the same loop delivers. Every figure about records comes from gdr-trace's own final
//! `lost` line. The host side boots the VM and runs this same xtask binary in it
//! (`bench-storm-guest`, hidden), which writes `storm.json` to the VM share. Not a test: nothing
//! here asserts a timing.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::{
    bpfmaps::{prog_stats, programs_loaded, wait_programs_gone},
    looper::Loop,
    report::median,
    watch::{cpu_s, recursion_misses, OnLine, Said, Stall, Watch},
};
use crate::vm;

/// `cargo xtask bench-storm-guest` (run inside the VM by the bench).
#[derive(clap::Args, Debug)]
pub struct GuestArgs {
    #[arg(long)]
    pub gdr: PathBuf,
    #[arg(long)]
    pub regstorm: PathBuf,
    #[arg(long)]
    pub iterations: u64,
    #[arg(long)]
    pub rounds: usize,
    #[arg(long)]
    pub out: PathBuf,
}

/// Seconds `storm` took for a loop of `n` registrations (none may fail).
fn run(storm: &mut Loop, n: u64) -> Result<f64> {
    let v = storm.ask(&n.to_string())?;
    if v["failed"].as_u64() != Some(0) {
        bail!("registrations failed: {v}");
    }
    Ok(v["ns_per_op"].as_f64().context("no ns_per_op")? * n as f64 / 1e9)
}

/// One traced loop's figures.
struct Run {
    seconds: f64,
    said: Said,
    /// mr_register and mr_release lines of the workload.
    mr: [u64; 2],
    recursion_misses: u64,
    /// CPU seconds during the loop: the workload's, gdr-trace's.
    cpu: [f64; 2],
    /// With kernel.bpf_stats_enabled on: each program that ran during the loop, its runs and
    /// nanoseconds (every program loaded, whoever loaded it).
    progs: Vec<(String, u64, u64)>,
}

/// One traced loop: seconds, what watch said, its mr_register and mr_release lines for `pid`,
/// and the program runs the kernel skipped.
fn traced(storm: &mut Loop, gdr: &Path, n: u64, stall: Stall, extra: &[&str]) -> Result<Run> {
    let pid = u64::from(storm.child.id());
    let counts = Arc::new(Mutex::new([0u64; 2]));
    let shapes = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let (c, sh) = (counts.clone(), shapes.clone());
    let on_line: OnLine = Box::new(move |v| {
        if v["pid"].as_u64() == Some(pid) {
            let mut c = c.lock().expect("not poisoned");
            match v["event"].as_str() {
                Some("mr_register") => {
                    c[0] += 1;
                    // Which hooks saw it: a registration reported twice shows as two shapes.
                    *sh.lock().expect("not poisoned").entry(v["sources"].to_string()).or_default() += 1;
                }
                Some("mr_release") => c[1] += 1,
                _ => {}
            }
        }
    });
    let baseline = programs_loaded();
    let args: Vec<&str> = ["--interval", "0"].iter().chain(extra).copied().collect();
    let mut w = Watch::start(gdr, &args, stall, on_line)?;
    let (c0, w0) = (cpu_s(storm.child.id()), cpu_s(w.pid()));
    let before = prog_stats();
    let s = run(storm, n)?;
    let cpu = [cpu_s(storm.child.id()) - c0, cpu_s(w.pid()) - w0];
    let mut progs: Vec<(String, u64, u64)> = prog_stats()
        .into_iter()
        .filter_map(|(id, p)| {
            let b = before.get(&id);
            let runs = p.run_cnt - b.map_or(0, |b| b.run_cnt);
            let ns = p.run_time_ns - b.map_or(0, |b| b.run_time_ns);
            (runs > 0).then_some((p.name, runs, ns))
        })
        .collect();
    progs.sort_by_key(|p| std::cmp::Reverse(p.1));
    let misses = recursion_misses(w.pid());
    w.resume();
    // The tracer's stop takes a while in the VM; the loop is already timed.
    let said = w.stop()?;
    let gone = wait_programs_gone(baseline, Duration::from_secs(120))
        .context("gdr-trace's BPF programs still loaded 120 s after it ended")?;
    eprintln!("[storm] programs gone {gone:.1} s after gdr-trace exited");
    let counts = *counts.lock().expect("not poisoned");
    let shapes = shapes.lock().expect("not poisoned");
    if shapes.len() > 1 {
        eprintln!("[storm] mr_register lines by sources: {shapes:?}");
    }
    Ok(Run { seconds: s, said, mr: counts, recursion_misses: misses, cpu, progs })
}

fn lost_json(said: &Said) -> serde_json::Value {
    json!({ "delivered": said.delivered(), "lost_total": said.lost_total(), "by_reason": said.lost["by_reason"] })
}

/// The traced configurations: every hook family first (the figure), then without the uprobes on
/// libibverbs, then without the storage hooks (what each part costs).
const CONFIGS: [(&str, &[&str]); 3] =
    [("watch", &[]), ("watch --no-uprobes", &["--no-uprobes"]), ("watch --no-storage", &["--no-storage"])];

/// Inside the VM: rounds, the overflow run, `out` (JSON).
pub fn guest(a: GuestArgs) -> Result<i32> {
    let mut storm = Loop::start(Command::new(&a.regstorm), "gdr-regstorm")?;
    let pid = storm.child.id();
    run(&mut storm, 200)?; // warm: libibverbs' and the kernel's first-use paths
    let (mut untraced, mut untraced_cpu) = (vec![], vec![]);
    let mut traced_s: Vec<Vec<f64>> = vec![vec![]; CONFIGS.len()];
    let mut rows: Vec<Vec<serde_json::Value>> = vec![vec![]; CONFIGS.len()];
    let n = CONFIGS.len() + 1;
    for round in 0..a.rounds {
        for k in 0..n {
            let i = (round + k) % n;
            if i == CONFIGS.len() {
                let c0 = cpu_s(pid);
                let s = run(&mut storm, a.iterations)?;
                let cpu = cpu_s(pid) - c0;
                eprintln!("[storm] round {round} untraced {s:.2} s (workload CPU {cpu:.2} s)");
                untraced.push(s);
                untraced_cpu.push(cpu);
                continue;
            }
            let (name, extra) = CONFIGS[i];
            let Run {
                seconds: s, said, mr: [regs, rels], recursion_misses: misses, cpu: [cpu, wcpu], ..
            } = traced(&mut storm, &a.gdr, a.iterations, Stall::No, extra)?;
            eprintln!(
                "[storm] round {round} {name} {s:.2} s (workload CPU {cpu:.2} s, gdr-trace CPU {wcpu:.2} s): \
                 {regs} mr_register, {rels} mr_release, {} records delivered, {} lost, recursion misses {misses}",
                said.delivered(),
                said.lost_total()
            );
            traced_s[i].push(s);
            rows[i]
                .push(json!({ "seconds": s, "mr_register": regs, "mr_release": rels, "workload_cpu_s": cpu,
                "gdr_trace_cpu_s": wcpu, "recursion_misses": misses, "lost": lost_json(&said) }));
        }
    }
    let Run { seconds: s, said, mr: [regs, rels], recursion_misses: misses, .. } =
        traced(&mut storm, &a.gdr, a.iterations, Stall::Yes, &[])?;
    eprintln!(
        "[storm] stalled reader: {s:.2} s, {} records delivered, lost {}",
        said.delivered(),
        said.lost["by_reason"]
    );
    let overflow = json!({ "seconds": s, "mr_register": regs, "mr_release": rels,
        "recursion_misses": misses, "lost": lost_json(&said) });
    let programs = profile(&mut storm, &a.gdr, a.iterations)?;
    drop(storm.child.stdin.take());
    let _ = storm.child.wait();
    let v = json!({ "programs": programs, "iterations": a.iterations, "rounds": a.rounds, "untraced_s": untraced,
        "untraced_cpu_s": untraced_cpu,
        "traced_s": traced_s[0], "traced": rows[0], "overflow": overflow, "pid": pid,
        "variants": CONFIGS.iter().enumerate().skip(1).map(|(i, (name, _))| json!({
            "name": name, "traced_s": traced_s[i], "traced": rows[i] })).collect::<Vec<_>>() });
    std::fs::write(&a.out, serde_json::to_string_pretty(&v)?)?;
    Ok(0)
}

/// One more traced loop with kernel.bpf_stats_enabled on (then set back): which programs ran
/// during it, how often per registration, and for how long (in-kernel time; the trap and
/// trampoline around each run are not in it).
fn profile(storm: &mut Loop, gdr: &Path, n: u64) -> Result<serde_json::Value> {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let was = std::fs::read_to_string(KNOB).context("reading kernel.bpf_stats_enabled")?;
    std::fs::write(KNOB, "1").context("enabling kernel.bpf_stats_enabled")?;
    let run = traced(storm, gdr, n, Stall::No, &[]);
    std::fs::write(KNOB, was.trim()).context("restoring kernel.bpf_stats_enabled")?;
    let run = run?;
    eprintln!("[storm] program runs during {n} registrations ({:.2} s, stats on):", run.seconds);
    let mut rows = vec![];
    for (name, runs, ns) in &run.progs {
        let (per, ns_run) = (*runs as f64 / n as f64, *ns as f64 / (*runs).max(1) as f64);
        eprintln!("[storm]   {name:<16} {runs:>9} runs  {per:>7.2} per registration  {ns_run:>8.0} ns a run");
        rows.push(
            json!({ "program": name, "runs": runs, "runs_per_registration": per, "ns_per_run": ns_run }),
        );
    }
    Ok(json!(rows))
}

/// On the host: boots the VM, runs the guest side, prints and keeps the figures.
pub fn measure(bins: &Path, iterations: u64, rounds: usize, dir: &Path) -> Result<()> {
    let out = vm::share_dir().join("storm.json");
    let _ = std::fs::remove_file(&out);
    let cmd: Vec<String> = vec![
        super::looper::guest_exe()?,
        "bench-storm-guest".into(),
        "--gdr".into(),
        bins.join("gdr-trace").display().to_string(),
        "--regstorm".into(),
        bins.join("gdr-regstorm").display().to_string(),
        "--iterations".into(),
        iterations.to_string(),
        "--rounds".into(),
        rounds.to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    let opts = vm::VmOptions { timeout: Duration::from_secs(1800), ..Default::default() };
    let rc = vm::run(&opts, &cmd)?;
    if rc != 0 {
        bail!("the storm in the VM failed (exit {rc})");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let summary = summarize(&v);
    print(&summary);
    std::fs::write(
        dir.join("storm.json"),
        serde_json::to_string_pretty(&json!({ "runs": v, "summary": summary }))?,
    )?;
    Ok(())
}

/// The median, NaN for none.
fn med(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        median(v)
    }
}

fn nums(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect()).unwrap_or_default()
}

fn summarize(v: &serde_json::Value) -> serde_json::Value {
    let n = v["iterations"].as_f64().unwrap_or(1.0);
    let (u, t) = (med(&nums(&v["untraced_s"])), med(&nums(&v["traced_s"])));
    let rows = v["traced"].as_array().cloned().unwrap_or_default();
    let col =
        |k: &str| med(&rows.iter().filter_map(|r| r.pointer(k).and_then(|x| x.as_f64())).collect::<Vec<_>>());
    let (events, delivered) = (col("/mr_register") + col("/mr_release"), col("/lost/delivered"));
    let o = &v["overflow"];
    let o_delivered = o["lost"]["delivered"].as_f64().unwrap_or(0.0);
    let o_lost = o["lost"]["lost_total"].as_f64().unwrap_or(0.0);
    json!({
        "iterations": n, "rounds": v["rounds"],
        "untraced_s": u, "traced_s": t, "ratio": t / u,
        "registrations_per_s_untraced": n / u, "registrations_per_s_traced": n / t,
        "mr_events_per_s": events / t, "records_per_s": delivered / t,
        "records_per_iteration": delivered / n,
        "clean_lost_total": col("/lost/lost_total"),
        "workload_cpu_s_untraced": med(&nums(&v["untraced_cpu_s"])),
        "variants": v["variants"].as_array().cloned().unwrap_or_default().iter().map(|x| {
            let r = x["traced"].as_array().cloned().unwrap_or_default();
            let c = |k: &str| med(&r.iter().filter_map(|r| r.pointer(k).and_then(|x| x.as_f64())).collect::<Vec<_>>());
            let ts = med(&nums(&x["traced_s"]));
            json!({ "name": x["name"], "traced_s": ts, "ratio": ts / u,
                "workload_cpu_s": c("/workload_cpu_s"), "gdr_trace_cpu_s": c("/gdr_trace_cpu_s") })
        }).collect::<Vec<_>>(),
        "workload_cpu_s_traced": col("/workload_cpu_s"), "gdr_trace_cpu_s": col("/gdr_trace_cpu_s"),
        "programs": v["programs"],
        "overflow": {
            "delivered": o_delivered, "lost_total": o_lost, "by_reason": o["lost"]["by_reason"],
            "delivered_plus_lost": o_delivered + o_lost, "clean_delivered_median": delivered,
            "mr_register": o["mr_register"], "recursion_misses": o["recursion_misses"],
        },
    })
}

fn print(s: &serde_json::Value) {
    let f = |k: &str| s.pointer(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
    println!("\n== registration storm in the VM: ibv_reg_mr + ibv_dereg_mr of 4 KiB on rxe0 ==");
    println!("  {} iterations a run, median of {} rounds", f("/iterations"), s["rounds"]);
    println!(
        "  untraced                     {:>8.2} s  {:>8.0} registrations/s",
        f("/untraced_s"),
        f("/registrations_per_s_untraced")
    );
    println!(
        "  under gdr-trace watch        {:>8.2} s  {:>8.0} registrations/s",
        f("/traced_s"),
        f("/registrations_per_s_traced")
    );
    println!("  traced / untraced            {:>8.3}     (goal <= 1.03)", f("/ratio"));
    println!(
        "  delivered: {:.0} mr events/s, {:.0} records/s ({:.2} records per iteration), lost {:.0}",
        f("/mr_events_per_s"),
        f("/records_per_s"),
        f("/records_per_iteration"),
        f("/clean_lost_total")
    );
    println!(
        "  CPU during a run: workload {:.2} s untraced, {:.2} s traced; gdr-trace itself {:.2} s",
        f("/workload_cpu_s_untraced"),
        f("/workload_cpu_s_traced"),
        f("/gdr_trace_cpu_s")
    );
    for x in s["variants"].as_array().into_iter().flatten() {
        let g = |k: &str| x[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:<28} {:>8.2} s  ratio {:.3}; CPU: workload {:.2} s, gdr-trace {:.2} s",
            x["name"].as_str().unwrap_or(""),
            g("traced_s"),
            g("ratio"),
            g("workload_cpu_s"),
            g("gdr_trace_cpu_s")
        );
    }
    println!("  programs that ran (one more traced run, kernel.bpf_stats_enabled on):");
    for p in s["programs"].as_array().into_iter().flatten() {
        let g = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "    {:<16} {:>7.2} runs per registration  {:>8.0} ns a run",
            p["program"].as_str().unwrap_or(""),
            g("runs_per_registration"),
            g("ns_per_run")
        );
    }
    println!(
        "  output not read (ring overflows): delivered {:.0} + lost {:.0} = {:.0} (a clean run delivers {:.0}); lost by reason {}",
        f("/overflow/delivered"),
        f("/overflow/lost_total"),
        f("/overflow/delivered_plus_lost"),
        f("/overflow/clean_delivered_median"),
        s["overflow"]["by_reason"]
    );
}
