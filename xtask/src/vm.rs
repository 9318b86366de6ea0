//! `cargo xtask vm`: runs a command as root in a Debian kernel under qemu (TCG), with the
//! host's `/` as the guest's root (read-only 9p + tmpfs overlay: writes vanish with the VM)
//! and soft-RoCE (`rxe0` on `lo`) set up.
//!
//! The command runs in the current directory (same path in the guest), with a clean
//! environment: PATH, HOME=/root, and the host's RUST_BACKTRACE, RUST_LOG and `GDR_*`
//! variables. `<workspace>/target/vm/share` is mounted read-write at the same path: files a
//! command writes there appear on the host. Its output (stdout and stderr merged) streams to
//! stdout; the kernel console stays out of it unless `--verbose`.

use crate::initramfs::{self, GuestPlan};
use crate::kernel::{self, KernelImage};
use crate::vm_console::{printable, pump};
use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

pub use crate::kernel::Kernel;

/// Console lines that mean the kernel is dead or dying.
const WATCHDOG: &[&str] =
    &["Kernel panic", "BUG:", "soft lockup", "hard LOCKUP", "Oops:", "general protection fault"];
/// How many console lines a failure shows.
const TAIL: usize = 40;
/// A boot that hasn't reached the command by then is hung (a normal one takes 5-20 s, under
/// load up to a minute); it is retried once.
const BOOT_LIMIT: Duration = Duration::from_secs(150);

/// The guest reports what its processes wait on this long before the run's timeout.
const HANG_MARGIN: Duration = Duration::from_secs(150);
/// At most this many lines of that report go into a failure message.
const HANG_LINES: usize = 400;
/// How many lines of the command's output a failure shows.
const OUTPUT_TAIL: usize = 30;

/// The guest never reached the command.
#[derive(Debug)]
struct BootHang;

impl std::fmt::Display for BootHang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the guest did not reach the command within {} s", BOOT_LIMIT.as_secs())
    }
}

impl std::error::Error for BootHang {}

#[derive(Clone, Debug)]
pub struct VmOptions {
    pub kernel: Kernel,
    /// For the whole run: boot, command, poweroff.
    pub timeout: Duration,
    /// Extra modules (host paths, plain .ko) to insmod after rdma_rxe, in order.
    pub insmod: Vec<PathBuf>,
    /// qemu `-m`, e.g. "2G".
    pub mem: String,
    pub smp: u32,
    /// Extra environment for the command, on top of the allow-listed host variables.
    pub env: Vec<(String, String)>,
    /// Where the command runs; the current directory if None.
    pub cwd: Option<PathBuf>,
    /// Echo the command's output to stdout while it runs.
    pub echo: bool,
    /// Boot with a chatty kernel and copy the console to stderr.
    pub verbose: bool,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            kernel: Kernel::V6_1,
            timeout: Duration::from_secs(600),
            insmod: Vec::new(),
            mem: "2G".into(),
            smp: 2,
            env: Vec::new(),
            cwd: None,
            echo: true,
            verbose: false,
        }
    }
}

/// Runs `cmd` in the VM and returns its exit code. Errors mean the VM failed (timeout,
/// kernel panic or lockup, setup failure), never that the command did.
pub fn run(opts: &VmOptions, cmd: &[String]) -> Result<i32> {
    Ok(run_capture(opts, cmd)?.0)
}

/// Like [`run`], and also returns the command's output (stdout and stderr merged).
pub fn run_capture(opts: &VmOptions, cmd: &[String]) -> Result<(i32, String)> {
    let (rc, out) = match boot(opts, cmd) {
        Err(e) if e.downcast_ref::<BootHang>().is_some() => {
            eprintln!("[vm] {e:#}\n[vm] retrying the boot once");
            boot(opts, cmd)?
        }
        r => r?,
    };
    Ok((rc, String::from_utf8_lossy(&out).into_owned()))
}

fn boot(opts: &VmOptions, cmd: &[String]) -> Result<(i32, Vec<u8>)> {
    let started = Instant::now();
    let img: KernelImage = kernel::ensure(opts.kernel)?;
    let root = kernel::vm_dir();
    let share = share_dir();
    fs::create_dir_all(&share)?;
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?.as_nanos();
    let nonce = format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff);

    let cwd = match &opts.cwd {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let insmod = opts
        .insmod
        .iter()
        .map(|m| fs::canonicalize(m).with_context(|| format!("module {}", m.display())))
        .collect::<Result<Vec<_>>>()?;
    let mut env = initramfs::allowed_env();
    env.extend(opts.env.iter().cloned());
    let plan = GuestPlan {
        nonce: &nonce,
        hang_report_after: opts.timeout.saturating_sub(HANG_MARGIN).max(HANG_MARGIN).as_secs(),
        cwd: &fs::canonicalize(&cwd)?,
        env: &env,
        cmd,
        insmod: &insmod,
        share: &share,
    };
    let initrd_bytes = initramfs::build(&img.modules, &plan)?;
    let run_dir = root.join("runs").join(&nonce);
    fs::create_dir_all(&run_dir)?;
    let initrd = run_dir.join("initrd.cpio");
    fs::write(&initrd, initrd_bytes)?;
    let out_path = run_dir.join("output");
    fs::File::create(&out_path)?;

    let loglevel = if opts.verbose { "loglevel=7" } else { "quiet loglevel=3" };
    let append = format!("console=ttyS0 {loglevel} panic=-1 mitigations=off");
    // setpriv: qemu dies with us, even when we are killed without a chance to clean up.
    let mut qemu = Command::new("setpriv");
    qemu.args(["--pdeathsig", "KILL", "qemu-system-x86_64"])
        // One host thread for all vCPUs: with a thread per vCPU, one vCPU once ran an int3 the
        // kernel had already patched away (a static key of the syscall tracepoints, toggled by a
        // tracer attaching while another detached) and the guest died with "Oops: int3" in
        // syscall_trace_enter. Two vCPUs remain, taking turns, so code stays coherent.
        .args(["-accel", "tcg,thread=single", "-cpu", "max", "-nodefaults"])
        .args(["-smp", &opts.smp.to_string(), "-m", &opts.mem])
        .args(["-nographic", "-no-reboot", "-monitor", "none"])
        .arg("-kernel")
        .arg(&img.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", &append, "-serial", "stdio"])
        .arg("-virtfs")
        .arg("local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap")
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=hostshare,security_model=none,multidevs=remap",
            share.display()
        ))
        .arg("-virtfs")
        .arg(format!("local,path={},mount_tag=gdrrun,security_model=none,multidevs=remap", run_dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    eprintln!("[vm] booting {} ...", img.resolved.release);
    let mut child = qemu.spawn().context("cannot start qemu-system-x86_64")?;
    let spawned = Instant::now();

    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n').map_while(|l| l.ok()) {
            let line = printable(&String::from_utf8_lossy(&line));
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let qemu_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut console_log = fs::File::create(run_dir.join("console.log"))?;
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut out_file = fs::File::open(&out_path)?;
    let mut output = Vec::new();
    let (start_mark, exit_mark) = (format!("GDR-VM-START:{nonce}"), format!("GDR-VM-EXIT:{nonce}:"));
    let fail_mark = format!("GDR-VM-FAIL:{nonce}:");
    let (hang_mark, hang_end) = (format!("GDR-VM-HANG:{nonce}:"), format!("GDR-VM-HANG-END:{nonce}"));
    let mut hang: Vec<String> = Vec::new();
    let mut in_hang = false;
    let deadline = started + opts.timeout;
    let mut rc: Option<i32> = None;
    let mut failure: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    let mut cmd_started: Option<Instant> = None;
    let mut cmd_took: Option<f64> = None;
    let status = loop {
        let mut got_line = false;
        while let Ok(line) = rx.try_recv() {
            got_line = true;
            writeln!(console_log, "{line}")?;
            if opts.verbose {
                eprintln!("[console] {line}");
            }
            if line.contains(&hang_mark) {
                in_hang = true;
            } else if line.contains(&hang_end) {
                in_hang = false;
            }
            if in_hang && hang.len() < HANG_LINES {
                hang.push(line.clone());
            }
            if line.contains(&start_mark) {
                cmd_started = Some(Instant::now());
                eprintln!("[vm] booted in {:.1} s, running {cmd:?}", started.elapsed().as_secs_f64());
            } else if let Some(pos) = line.find(&exit_mark) {
                let code = &line[pos + exit_mark.len()..];
                rc = Some(code.trim().parse().context("bad exit marker")?);
                cmd_took = cmd_started.map(|t| t.elapsed().as_secs_f64());
                kill_at.get_or_insert(Instant::now() + Duration::from_secs(15));
            } else if let Some(pos) = line.find(&fail_mark) {
                failure.get_or_insert(format!("VM setup failed: {}", &line[pos + fail_mark.len()..]));
                kill_at.get_or_insert(Instant::now() + Duration::from_secs(15));
            } else if let Some(w) = WATCHDOG.iter().find(|w| line.contains(*w)) {
                if failure.is_none() && rc.is_none() {
                    failure = Some(format!("kernel failure on the console ({w:?})"));
                    // Let the rest of the oops / panic reach the console first.
                    kill_at = Some(Instant::now() + Duration::from_secs(2));
                }
            }
            if !in_hang {
                tail.push_back(line);
            }
            if tail.len() > TAIL {
                tail.pop_front();
            }
        }
        pump(&mut out_file, &mut output, opts.echo)?;
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let now = Instant::now();
        if cmd_started.is_none() && failure.is_none() && now >= spawned + BOOT_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            let log = run_dir.join("console.log");
            return Err(anyhow::Error::new(BootHang).context(format!("console log: {}", log.display())));
        }
        if now >= deadline && failure.is_none() {
            failure = Some(format!("timed out after {} s", opts.timeout.as_secs()));
        }
        if now >= deadline || kill_at.is_some_and(|t| now >= t) {
            let _ = child.kill();
            break child.wait()?;
        }
        if !got_line {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    pump(&mut out_file, &mut output, opts.echo)?;
    let qemu_err = qemu_err.join().unwrap_or_default();
    let total = started.elapsed().as_secs_f64();
    if failure.is_none() && rc.is_none() {
        failure = Some(format!("qemu exited ({status}) before the command finished"));
    }
    if let (Some(rc), None) = (rc, &failure) {
        let ran = cmd_took.unwrap_or_default();
        eprintln!("[vm] exit code {rc} after {total:.1} s (the command took {ran:.1} s)");
        let _ = fs::remove_dir_all(&run_dir);
        return Ok((rc, output));
    }
    let mut msg = format!(
        "VM run on {} failed after {total:.1} s: {}\n--- last {TAIL} console lines ---\n",
        img.resolved.release,
        failure.unwrap_or_default()
    );
    for l in &tail {
        msg.push_str(l);
        msg.push('\n');
    }
    if !hang.is_empty() {
        msg.push_str("--- what the guest's processes waited on ---\n");
        for l in &hang {
            msg.push_str(l);
            msg.push('\n');
        }
    }
    let output = String::from_utf8_lossy(&output);
    let last: Vec<&str> = output.lines().rev().take(OUTPUT_TAIL).collect();
    if !last.is_empty() {
        msg.push_str(&format!("--- last {} lines of the command's output ---\n", last.len()));
        for l in last.iter().rev() {
            msg.push_str(l);
            msg.push('\n');
        }
    }
    if !qemu_err.trim().is_empty() {
        msg.push_str(&format!("--- qemu stderr ---\n{}\n", qemu_err.trim_end()));
    }
    msg.push_str(&format!("(full console log: {})", run_dir.join("console.log").display()));
    bail!(msg)
}

/// `cargo xtask vm` arguments.
#[derive(clap::Args, Debug)]
pub struct VmArgs {
    /// Kernel to boot: 6.1 (Debian bookworm) or 6.12 (bookworm backport).
    #[arg(long, default_value = "6.1")]
    pub kernel: Kernel,
    /// Seconds for the whole run, boot included.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Extra kernel module (host path, plain .ko) to insmod after rdma_rxe; repeatable.
    #[arg(long, value_name = "FILE.ko")]
    pub insmod: Vec<PathBuf>,
    /// Guest memory (qemu -m).
    #[arg(long, default_value = "2G")]
    pub mem: String,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    pub smp: u32,
    /// Extra environment variable for the command; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Boot with kernel messages and copy the console to stderr.
    #[arg(long, short)]
    pub verbose: bool,
    /// The command (with its arguments) to run as root in the guest.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected KEY=VALUE")?;
    Ok((k.to_owned(), v.to_owned()))
}

/// `cargo xtask vm`: returns the command's exit code.
pub fn main(args: VmArgs) -> Result<i32> {
    crate::setup::ensure()?;
    let opts = VmOptions {
        kernel: args.kernel,
        timeout: Duration::from_secs(args.timeout),
        insmod: args.insmod,
        mem: args.mem,
        smp: args.smp,
        env: args.env,
        cwd: None,
        echo: true,
        verbose: args.verbose,
    };
    run(&opts, &args.command)
}

/// `<workspace>/target/vm/share`: read-write in the guest at the same path.
pub fn share_dir() -> PathBuf {
    kernel::vm_dir().join("share")
}
