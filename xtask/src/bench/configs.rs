//! The configurations the storage case compares (untraced, gdr-trace, bpftrace, the floor) and
//! how each one's tracer is started.

use std::{path::Path, process::Command};

use anyhow::{Context, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Config {
    Untraced,
    GdrTrace,
    Bpftrace,
    EmptyProgram,
    BpftraceEmpty,
}

impl Config {
    pub(super) const ALL: [Config; 5] =
        [Config::Untraced, Config::GdrTrace, Config::Bpftrace, Config::EmptyProgram, Config::BpftraceEmpty];

    pub(super) fn name(self) -> &'static str {
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
pub(super) fn floor_args(fexit: bool) -> Vec<String> {
    if fexit {
        vec!["fexit".into(), "__x64_sys_pread64".into()]
    } else {
        vec!["tracepoint".into()]
    }
}

pub(super) fn floor_script(fexit: bool) -> String {
    if fexit {
        "kretfunc:__x64_sys_pread64 { }".into()
    } else {
        "tracepoint:syscalls:sys_exit_pread64 { }".into()
    }
}

/// The tracer's start command for a configuration (None: untraced).
pub(super) fn tracer_cmd(
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
pub(super) fn probes_use_fexit(gdr: &Path) -> Result<bool> {
    let out = Command::new(gdr).args(["probes", "--json"]).output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("gdr-trace probes --json")?;
    let how = v["hooks"]
        .as_array()
        .and_then(|hs| hs.iter().find(|h| h["hook"].as_str().is_some_and(|n| n.contains("pread64"))))
        .and_then(|h| h["attached"].as_str().map(str::to_string))
        .unwrap_or_default();
    Ok(how == "fexit")
}
