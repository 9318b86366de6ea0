//! Start-up and memory: how long `gdr-trace watch --duration D` runs beyond its D seconds of
//! tracing (start-up plus clean stop), and its peak resident memory, beside bpftrace running
//! one probe for the same D seconds, measured in the same run (configurations alternate round
//! after round; medians). Peak memory is the kernel's `ru_maxrss` of the child (wait4).
//! `--startup-vm KERNEL` makes the same measurement inside the VM (an emulated CPU): the host
//! boots it and runs this xtask binary there (`bench-startup-guest`, hidden), which writes
//! `startup.json` to the VM share.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};

use super::report::median;

/// Seconds each configuration traces.
const TRACE_S: f64 = 2.0;

/// gdr-trace's memo of the kernel's BTF answers (`btf_memo::DEFAULT_PATH`).
const BTF_MEMO: &str = "/run/gdr-trace/btf/memo.json";

struct Config {
    name: &'static str,
    cmd: Box<dyn Fn() -> Command>,
}

/// `cargo xtask bench-startup-guest` (run inside the VM by the bench).
#[derive(clap::Args, Debug)]
pub struct GuestArgs {
    #[arg(long)]
    pub gdr: std::path::PathBuf,
    #[arg(long)]
    pub baseline: Option<std::path::PathBuf>,
    #[arg(long)]
    pub rounds: usize,
    #[arg(long)]
    pub out: std::path::PathBuf,
}

pub fn guest(a: GuestArgs) -> Result<i32> {
    let rows = measure(&a.gdr, a.baseline.as_deref(), a.rounds)?;
    std::fs::write(&a.out, serde_json::to_string_pretty(&json(&rows))?)?;
    Ok(0)
}

/// The measurement in the VM on `kernel`: its rows, read back from the guest's `startup.json`.
pub fn in_vm(
    kernel: crate::vm::Kernel,
    gdr: &Path,
    baseline: Option<&Path>,
    rounds: usize,
) -> Result<Vec<Row>> {
    let out = crate::vm::share_dir().join("startup.json");
    let _ = std::fs::remove_file(&out);
    let mut cmd: Vec<String> = vec![
        super::looper::guest_exe()?,
        "bench-startup-guest".into(),
        "--gdr".into(),
        gdr.display().to_string(),
        "--rounds".into(),
        rounds.to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    if let Some(b) = baseline {
        cmd.extend(["--baseline".into(), b.display().to_string()]);
    }
    let opts =
        crate::vm::VmOptions { kernel, timeout: std::time::Duration::from_secs(1800), ..Default::default() };
    let rc = crate::vm::run(&opts, &cmd)?;
    if rc != 0 {
        bail!("the start-up measurement in the {kernel} VM failed (exit {rc})");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let names = configs(gdr, baseline);
    let rows = v.as_array().context("startup.json is not a list")?;
    rows.iter()
        .map(|r| {
            let name = r["configuration"].as_str().context("no configuration")?;
            let name = names.iter().find(|c| c.name == name).context("unknown configuration")?.name;
            let num = |k: &str| r[k].as_f64().with_context(|| format!("no {k}"));
            Ok(Row { name, extra_s: num("seconds_beyond_duration")?, rss_mib: num("peak_rss_mib")? })
        })
        .collect()
}

pub struct Row {
    pub name: &'static str,
    /// Median seconds beyond TRACE_S.
    pub extra_s: f64,
    /// Median peak RSS, MiB.
    pub rss_mib: f64,
}

fn configs(gdr: &Path, baseline: Option<&Path>) -> Vec<Config> {
    let d = TRACE_S.to_string();
    let watch = move |gdr: std::path::PathBuf, d: String, extra: &'static [&'static str]| {
        move || {
            let mut c = Command::new(&gdr);
            c.args(["watch", "--json", "--duration", &d]).args(extra);
            c
        }
    };
    let mut out = vec![
        Config {
            name: "gdr-trace watch (every hook family)",
            cmd: Box::new(watch(gdr.into(), d.clone(), &[])),
        },
        Config {
            name: "gdr-trace watch --no-storage",
            cmd: Box::new(watch(gdr.into(), d.clone(), &["--no-storage"])),
        },
    ];
    // The first start of a boot parses the kernel's BTF and writes the memo that later starts
    // read (gdr-trace's loader/btf_memo.rs). Removed just before this configuration's run; that
    // run writes it again, so every other configuration still finds it.
    out.push(Config {
        name: "gdr-trace watch, a boot's first start",
        cmd: Box::new({
            let w = watch(gdr.into(), d.clone(), &[]);
            move || {
                let _ = std::fs::remove_file(BTF_MEMO);
                w()
            }
        }),
    });
    // Another build (e.g. main's), measured in the same rounds: an A/B on a noisy machine.
    if let Some(b) = baseline {
        out.push(Config {
            name: "baseline: watch (every hook family)",
            cmd: Box::new(watch(b.into(), d.clone(), &[])),
        });
        out.push(Config {
            name: "baseline: watch --no-storage",
            cmd: Box::new(watch(b.into(), d.clone(), &["--no-storage"])),
        });
    }
    out.extend([Config {
        name: "bpftrace, one tracepoint",
        cmd: Box::new(move || {
            let mut c = Command::new("bpftrace");
            c.arg("-e").arg(format!(
                "tracepoint:syscalls:sys_enter_pread64 {{ @n = count(); }} interval:ms:{} {{ exit(); }}",
                (TRACE_S * 1000.0) as u64
            ));
            c
        }),
    }]);
    out
}

/// Runs `cmd` to its end; (wall seconds, peak RSS in MiB).
fn run_once(mut cmd: Command) -> Result<(f64, f64)> {
    let t = Instant::now();
    let child =
        cmd.stdout(Stdio::null()).stderr(Stdio::null()).stdin(Stdio::null()).spawn().context("spawn")?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; status and ru are valid for writes.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall = t.elapsed().as_secs_f64();
    if r != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{cmd:?} ended with status {status:#x}");
    }
    std::mem::forget(child); // reaped above
    Ok((wall, ru.ru_maxrss as f64 / 1024.0))
}

pub fn measure(gdr: &Path, baseline: Option<&Path>, rounds: usize) -> Result<Vec<Row>> {
    let configs = configs(gdr, baseline);
    let n = configs.len();
    let mut extra: Vec<Vec<f64>> = vec![vec![]; n];
    let mut rss: Vec<Vec<f64>> = vec![vec![]; n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let (wall, mib) = run_once((configs[i].cmd)()).with_context(|| configs[i].name)?;
            eprintln!(
                "[bench] start-up round {round} {:<38} {:>6.2} s beyond {TRACE_S} s, peak RSS {mib:>6.1} MiB",
                configs[i].name,
                wall - TRACE_S
            );
            extra[i].push(wall - TRACE_S);
            rss[i].push(mib);
        }
    }
    Ok(configs
        .iter()
        .enumerate()
        .map(|(i, c)| Row { name: c.name, extra_s: median(&extra[i]), rss_mib: median(&rss[i]) })
        .collect())
}

pub fn print(rows: &[Row]) {
    println!("\nstart-up and memory (medians; time beyond {TRACE_S} s of tracing = start-up + clean stop)");
    println!("{:<40} {:>12} {:>14}", "configuration", "beyond D", "peak RSS");
    for r in rows {
        println!("{:<40} {:>10.2} s {:>10.1} MiB", r.name, r.extra_s, r.rss_mib);
    }
    println!("(targets: gdr-trace start-up + stop <= 0.5 s on the host, <= 3 s in the VM)");
}

pub fn json(rows: &[Row]) -> serde_json::Value {
    serde_json::json!(rows
        .iter()
        .map(|r| serde_json::json!({ "configuration": r.name, "seconds_beyond_duration": r.extra_s, "peak_rss_mib": r.rss_mib, "duration_s": TRACE_S }))
        .collect::<Vec<_>>())
}
