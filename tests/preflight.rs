//! `gdr-trace check` and `gdr-trace doctor` on the fixture trees (tests/fixtures/preflight/*),
//! on generated variants of them, on broken input, and on this machine's real sysfs.

#[path = "preflight/check.rs"]
mod check;
#[path = "preflight/doctor.rs"]
mod doctor;
#[path = "preflight/driver_branch.rs"]
mod driver_branch;
#[path = "preflight/fixtures.rs"]
mod fixtures;
#[path = "preflight/fuzz.rs"]
mod fuzz;
#[path = "fixtures/generate.rs"]
mod generate;
#[path = "fixtures/machines.rs"]
mod machines;
#[path = "preflight/p2p.rs"]
mod p2p;
#[path = "preflight/p2p_doctor.rs"]
mod p2p_doctor;
#[path = "fixtures/pcie_p2p.rs"]
mod pcie_p2p;
#[path = "fixtures/spec.rs"]
mod spec;
#[path = "preflight/term.rs"]
mod term;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use gdr_trace::cmd::check::{run_to as check_to, CheckArgs};
use gdr_trace::cmd::doctor::{run_to as doctor_to, DoctorArgs};
use gdr_trace::exit::Fatal;
use gdr_trace::nccl_log;
use proptest::prelude::*;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn machine(name: &str) -> PathBuf {
    fixtures().join("preflight").join(name)
}

fn nccl(name: &str) -> String {
    fixtures().join("nccl").join(name).display().to_string()
}

#[derive(Parser)]
struct CheckCli {
    #[command(flatten)]
    args: CheckArgs,
}

#[derive(Parser)]
struct DoctorCli {
    #[command(flatten)]
    args: DoctorArgs,
}

fn code(r: &anyhow::Result<ExitCode>) -> u8 {
    match r {
        Ok(c) => (0u8..=2).find(|n| ExitCode::from(*n) == *c).expect("exit code 0-2"),
        Err(e) => e.downcast_ref::<Fatal>().map_or(2, |f| f.code),
    }
}

struct Out {
    code: u8,
    stdout: String,
    error: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }
}

/// Text laid out as for a pipe, whatever the test's own stdout is (a terminal or not).
fn piped<R>(f: impl FnOnce() -> R) -> R {
    gdr_trace::term::with_style(gdr_trace::term::Style::plain(None), f)
}

/// `gdr-trace check ARGS` through the same code path as the binary, output captured.
fn check(args: &[&str]) -> Out {
    let cli =
        CheckCli::try_parse_from(std::iter::once("check").chain(args.iter().copied())).expect("valid args");
    let mut buf = Vec::new();
    let r = piped(|| check_to(&cli.args, &mut buf));
    Out {
        code: code(&r),
        stdout: String::from_utf8(buf).unwrap(),
        error: r.err().map(|e| format!("{e:#}")).unwrap_or_default(),
    }
}

fn doctor(args: &[&str]) -> Out {
    let cli =
        DoctorCli::try_parse_from(std::iter::once("doctor").chain(args.iter().copied())).expect("valid args");
    let mut buf = Vec::new();
    let r = piped(|| doctor_to(&cli.args, &mut buf));
    Out {
        code: code(&r),
        stdout: String::from_utf8(buf).unwrap(),
        error: r.err().map(|e| format!("{e:#}")).unwrap_or_default(),
    }
}

fn roots(dir: &Path) -> Vec<String> {
    vec![
        "--sysfs-root".into(),
        dir.join("sys").display().to_string(),
        "--proc-root".into(),
        dir.join("proc").display().to_string(),
    ]
}

/// `check` on a tree with an explicit level (so an NCCL_NET_GDR_LEVEL in the environment of
/// the test run changes nothing), JSON.
fn check_json(dir: &Path, extra: &[&str]) -> (Out, Value) {
    let mut args = roots(dir);
    args.extend(["--json".to_string()]);
    if !extra.contains(&"--nccl-gdr-level") {
        args.extend(["--nccl-gdr-level".to_string(), "PXB".to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = check(&a);
    let json = if out.code == 2 { Value::Null } else { out.json() };
    (out, json)
}

fn statuses(json: &Value) -> BTreeMap<String, String> {
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap().to_string(), f["status"].as_str().unwrap().to_string()))
        .collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// (gpu index, ib device) -> distance.
fn distances(json: &Value) -> BTreeMap<(u64, String), String> {
    json["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                (p["gpu_index"].as_u64().unwrap(), p["ib_device"].as_str().unwrap().to_string()),
                p["distance"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn finding<'a>(json: &'a Value, id: &str) -> &'a Value {
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}
