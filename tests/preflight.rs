//! `gdr-trace check` and `gdr-trace doctor` on the fixture trees (tests/fixtures/preflight/*),
//! on generated variants of them, on broken input, and on this machine's real sysfs.

#[path = "fixtures/generate.rs"]
mod generate;

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

/// `gdr-trace check ARGS` through the same code path as the binary, output captured.
fn check(args: &[&str]) -> Out {
    let cli =
        CheckCli::try_parse_from(std::iter::once("check").chain(args.iter().copied())).expect("valid args");
    let mut buf = Vec::new();
    let r = check_to(&cli.args, &mut buf);
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
    let r = doctor_to(&cli.args, &mut buf);
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

// ---------------------------------------------------------------- fixtures are the generator's

#[derive(Debug, PartialEq)]
enum Entry {
    File(Vec<u8>),
    Link(String),
    Dir,
}

fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Entry::Link(std::fs::read_link(&p).unwrap().display().to_string()));
            } else if meta.is_dir() {
                out.insert(rel, Entry::Dir);
                stack.push(p);
            } else {
                out.insert(rel, Entry::File(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

#[test]
fn committed_fixtures_are_what_the_generator_writes() {
    let regen = std::env::var_os("GDR_TRACE_REGEN_FIXTURES").is_some();
    for spec in generate::all() {
        let committed = machine(spec.name);
        if regen {
            let _ = std::fs::remove_dir_all(&committed);
            generate::build(&spec, &committed).unwrap();
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        generate::build(&spec, tmp.path()).unwrap();
        let (want, have) = (snapshot(tmp.path()), snapshot(&committed));
        let diff: Vec<&String> =
            want.keys().chain(have.keys()).filter(|k| want.get(*k) != have.get(*k)).take(5).collect();
        assert!(
            diff.is_empty(),
            "tests/fixtures/preflight/{} differs from the generator at {diff:?}; \
             run GDR_TRACE_REGEN_FIXTURES=1 cargo test -p gdr-trace-tests --test preflight",
            spec.name
        );
    }
}

// ---------------------------------------------------------------- (a) rail-optimized, all good

#[test]
fn rail_pix_passes_everything() {
    let (out, j) = check_json(&machine("rail-pix"), &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(
        statuses(&j),
        expect(&[
            ("gpus", "pass"),
            ("rdma-nics", "pass"),
            ("driver", "pass"),
            ("peermem", "pass"),
            ("memory-peers", "pass"),
            ("dmabuf", "pass"),
            ("versions", "pass"),
            ("topology", "pass"),
            ("acs", "pass"),
            ("iommu", "pass"),
            ("bar1", "pass"),
            ("link", "pass"),
            ("gds", "pass"),
        ])
    );
    assert_eq!(j["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(j["nics"].as_array().unwrap().len(), 8, "the onboard I210 is neither RDMA nor Mellanox");
    assert_eq!(j["pairs"].as_array().unwrap().len(), 64);
    let d = distances(&j);
    for g in 0..8u64 {
        for n in 0..8u64 {
            let want = if g == n {
                "PIX"
            } else if g / 4 == n / 4 {
                "NODE"
            } else {
                "SYS"
            };
            assert_eq!(d[&(g, format!("mlx5_{n}"))], want, "GPU {g} - mlx5_{n}");
        }
    }
    let p0 = &j["pairs"][0];
    assert_eq!(p0["gpu"], "0000:18:00.0");
    assert_eq!(p0["nic"], "0000:19:00.0");
    assert_eq!(p0["common_bridge"], "0000:16:00.0");
    assert_eq!(p0["ports"], serde_json::json!(["0000:17:00.0", "0000:17:01.0"]));
    assert_eq!(p0["nearest"], true);
    assert_eq!(p0["nccl_gdr"], true);
    assert_eq!(j["gpus"][0]["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(j["gpus"][7]["bridges"], serde_json::json!(["0000:ca:01.0", "0000:cb:00.0", "0000:cc:00.0"]));
    assert!(finding(&j, "peermem")["summary"].as_str().unwrap().contains("560.35.03"));
    assert!(finding(&j, "acs")["evidence"][0]["value"].as_str().unwrap().contains("ctl 0x0000"));
    assert!(finding(&j, "iommu")["summary"].as_str().unwrap().contains("passthrough"));
    assert!(finding(&j, "bar1")["summary"].as_str().unwrap().contains("128 GiB"));
}

#[test]
fn json_shape() {
    let (_, j) = check_json(&machine("rail-pix"), &[]);
    assert_eq!(j["schema"], "gdr-trace.check/1");
    for k in [
        "sysfs_root",
        "proc_root",
        "nccl_net_gdr_level",
        "status",
        "exit_code",
        "counts",
        "gpus",
        "nics",
        "pairs",
        "findings",
    ] {
        assert!(j.get(k).is_some(), "missing {k}");
    }
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PXB");
    assert_eq!(j["nccl_net_gdr_level"]["source"], "flag");
    assert_eq!(j["status"], "pass");
    assert_eq!(j["exit_code"], 0);
    assert_eq!(j["counts"]["pass"], 13);
    for k in ["index", "bdf", "id", "model", "numa_node", "host_bridge", "bridges", "driver"] {
        assert!(j["gpus"][0].get(k).is_some(), "gpus[].{k}");
    }
    for k in
        ["bdf", "id", "ib_devices", "net_devices", "rdma", "numa_node", "host_bridge", "bridges", "driver"]
    {
        assert!(j["nics"][0].get(k).is_some(), "nics[].{k}");
    }
    for k in [
        "gpu_index",
        "gpu",
        "nic",
        "ib_device",
        "distance",
        "common_bridge",
        "ports",
        "bridges",
        "nccl_gdr",
        "nearest",
    ] {
        assert!(j["pairs"][0].get(k).is_some(), "pairs[].{k}");
    }
    let f = &j["findings"][0];
    for k in ["id", "status", "summary", "evidence", "hint"] {
        assert!(f.get(k).is_some(), "findings[].{k}");
    }
    assert!(f["evidence"][0]["path"].as_str().unwrap().starts_with("/sys/"));
    assert!(f["evidence"][0].get("value").is_some());
}

// ---------------------------------------------------------------- (b) everything wrong

#[test]
fn cross_socket_fails_where_it_should() {
    let (out, j) = check_json(&machine("cross-socket"), &[]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert_eq!(
        statuses(&j),
        expect(&[
            ("gpus", "pass"),
            ("rdma-nics", "pass"),
            ("driver", "pass"),
            ("peermem", "fail"),
            ("memory-peers", "not-applicable"),
            ("dmabuf", "fail"),
            ("versions", "pass"),
            ("topology", "fail"),
            ("acs", "fail"),
            ("iommu", "fail"),
            ("bar1", "pass"),
            ("link", "pass"),
            ("gds", "fail"),
        ])
    );
    // mlx5_N follow bus order: rail 7's NIC (moved to socket 0, bus 6b) is mlx5_4, and rails
    // 4-6's NICs are mlx5_5..7.
    let d = distances(&j);
    let pix = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (5, 6), (6, 7)];
    for g in 0..8u64 {
        for n in 0..8u64 {
            let gpu_node = g / 4;
            let nic_node = if n <= 4 { 0 } else { 1 };
            let want = if pix.contains(&(g, n)) {
                "PIX"
            } else if gpu_node == nic_node {
                "NODE"
            } else {
                "SYS"
            };
            assert_eq!(d[&(g, format!("mlx5_{n}"))], want, "GPU {g} - mlx5_{n}");
        }
    }
    assert_eq!(d[&(7, "mlx5_4".to_string())], "SYS");
    let topo = finding(&j, "topology");
    assert!(
        topo["summary"].as_str().unwrap().starts_with(
            "1 of 8 GPU(s) have no RDMA NIC within PXB: GPU 7 (0000:cd:00.0) nearest mlx5_5 is NODE"
        ),
        "{}",
        topo["summary"]
    );
    let acs = finding(&j, "acs");
    assert!(
        acs["summary"].as_str().unwrap().starts_with("ACS redirect (RR/CR) on 14 port(s)"),
        "{}",
        acs["summary"]
    );
    assert!(acs["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["value"].as_str().unwrap().contains("ctl 0x001d [SV RR CR UF]")));
    assert!(finding(&j, "iommu")["summary"].as_str().unwrap().contains("(DMA)"));
    assert!(finding(&j, "dmabuf")["evidence"][1]["value"].as_str().unwrap().contains("535.183.01"));
    assert!(finding(&j, "gds")["summary"].as_str().unwrap().contains("compatibility mode"));
    assert!(finding(&j, "peermem")["hint"].as_str().unwrap().contains("modprobe nvidia-peermem"));
}

#[test]
fn gdr_level_changes_the_topology_verdict() {
    let dir = machine("cross-socket");
    let (_, j) = check_json(&dir, &["--nccl-gdr-level", "SYS"]);
    assert_eq!(statuses(&j)["topology"], "pass");
    let (_, j) = check_json(&dir, &["--nccl-gdr-level", "3"]);
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PHB");
    assert_eq!(statuses(&j)["topology"], "pass", "NODE counts as PHB for NCCL");
    let (out, j) = check_json(&machine("rail-pix"), &["--nccl-gdr-level", "LOC"]);
    assert_eq!(out.code, 1);
    assert_eq!(statuses(&j)["topology"], "fail");
    let (_, j) = check_json(&machine("rail-pix"), &["--nccl-gdr-level", "1"]);
    assert_eq!(j["nccl_net_gdr_level"]["level"], "PIX");
    assert_eq!(statuses(&j)["topology"], "pass");
}

// ---------------------------------------------------------------- (c) no GPU

#[test]
fn no_gpu_is_not_applicable_and_exits_0() {
    let (out, j) = check_json(&machine("no-gpu"), &[]);
    assert_eq!(out.code, 0);
    assert!(statuses(&j).values().all(|s| s == "not-applicable"), "{:?}", statuses(&j));
    assert_eq!(j["status"], "not-applicable");
    assert_eq!(j["nics"][0]["ib_devices"], serde_json::json!(["irdma0"]));
    let mut args = roots(&machine("no-gpu"));
    args.push("--nccl-gdr-level=PXB".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = check(&a);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("No NVIDIA GPU on this machine"), "{}", text.stdout);
    assert!(text
        .stdout
        .contains("13 checks: 0 pass, 0 warn, 0 fail, 0 unknown, 13 not-applicable -> exit 0"));
}

// ---------------------------------------------------------------- variants built at test time

fn variant(f: impl FnOnce(&mut generate::Spec)) -> tempfile::TempDir {
    let mut spec = generate::rail_pix();
    f(&mut spec);
    let tmp = tempfile::tempdir().unwrap();
    generate::build(&spec, tmp.path()).unwrap();
    tmp
}

#[test]
fn short_config_is_unknown_needs_root() {
    let tmp = variant(|s| s.short_config = true);
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0);
    let acs = finding(&j, "acs");
    assert_eq!(acs["status"], "unknown");
    assert!(acs["summary"].as_str().unwrap().contains("needs root"));
    assert!(acs["evidence"][0]["value"].as_str().unwrap().contains("only 64 bytes"));
}

#[test]
fn small_bar1_and_narrow_link_warn() {
    let tmp = variant(|s| {
        s.bar1 = 256 << 20;
        s.narrow_nic = Some(2);
    });
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0, "warnings do not fail");
    assert_eq!(statuses(&j)["bar1"], "warn");
    assert!(finding(&j, "bar1")["summary"].as_str().unwrap().contains("256 MiB"));
    assert_eq!(statuses(&j)["link"], "warn");
    assert!(finding(&j, "link")["summary"].as_str().unwrap().contains("0000:4c:00.0 x8/x16"));
}

#[test]
fn peermem_missing_with_dmabuf_only_warns() {
    let tmp = variant(|s| s.peermem = false);
    let (out, j) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 0);
    assert_eq!(statuses(&j)["peermem"], "warn");
    assert_eq!(statuses(&j)["dmabuf"], "pass");
}

#[test]
fn cufile_json_flag_and_compat_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("cufile.json");
    std::fs::write(&p, "{ \"properties\": { \"allow_compat_mode\": true, } }").unwrap();
    let (out, j) = check_json(&machine("rail-pix"), &["--cufile-json", p.to_str().unwrap()]);
    assert_eq!(out.code, 0);
    assert_eq!(statuses(&j)["gds"], "warn");
    std::fs::write(&p, "{ \"properties\": ").unwrap();
    let (_, j) = check_json(&machine("rail-pix"), &["--cufile-json", p.to_str().unwrap()]);
    assert_eq!(statuses(&j)["gds"], "unknown");
}

// ---------------------------------------------------------------- could not run: exit 2

#[test]
fn unreadable_input_exits_2_with_a_clear_error() {
    let out = check(&["--sysfs-root", "/nonexistent/sys"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("sysfs root /nonexistent/sys does not exist"), "{}", out.error);

    let empty = tempfile::tempdir().unwrap();
    let out = check(&["--sysfs-root", empty.path().to_str().unwrap()]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("does not look like a sysfs tree"), "{}", out.error);

    let tmp = variant(|_| {});
    std::fs::write(tmp.path().join("sys/bus/pci/devices/0000:18:00.0/vendor"), "nvidia?\n").unwrap();
    let (out, _) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.error.contains(
            "malformed sysfs/procfs file /sys/bus/pci/devices/0000:18:00.0/vendor: expected a hex number"
        ),
        "{}",
        out.error
    );

    let tmp = variant(|_| {});
    std::fs::write(tmp.path().join("sys/bus/pci/devices/0000:19:00.0/numa_node"), "one\n").unwrap();
    let (out, _) = check_json(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("numa_node"), "{}", out.error);

    let (out, _) = check_json(&machine("rail-pix"), &["--cufile-json", "/nonexistent/cufile.json"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("/nonexistent/cufile.json: no such file"), "{}", out.error);

    assert!(CheckCli::try_parse_from(["check", "--nccl-gdr-level", "NODE"]).is_err());
}

// ---------------------------------------------------------------- this machine

#[test]
fn check_runs_on_this_machine() {
    let out = check(&["--json"]);
    assert!(out.code < 2, "check failed on the real sysfs: {}", out.error);
    let j = out.json();
    if j["gpus"].as_array().unwrap().is_empty() {
        assert_eq!(out.code, 0);
        assert!(statuses(&j).values().all(|s| s == "not-applicable"));
    }
    let text = check(&["--verbose"]);
    assert!(text.code < 2, "{}", text.error);
    assert!(text.stdout.contains("checks:"));
}

// ---------------------------------------------------------------- doctor

fn doctor_on(dir: &Path, extra: &[&str]) -> Out {
    let mut args = roots(dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    if !extra.contains(&"--nccl-gdr-level") {
        args.extend(["--nccl-gdr-level".to_string(), "PXB".to_string()]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    doctor(&a)
}

#[test]
fn doctor_healthy_machine_with_gdr_log() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", &nccl("gdr-enabled.log")]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("nothing found that keeps GPU memory from the NIC"), "{}", out.stdout);
    assert!(out.stdout.contains("32 of 32 network channel(s) via GDRDMA"), "{}", out.stdout);
    assert!(out.stdout.contains("GPU Direct RDMA: enabled for [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7], disabled for []"));
    assert!(out
        .stdout
        .contains("mlx5_0 (0000:19:00.0): nearest GPU 0 (0000:18:00.0) is PIX; NCCL GDR at PXB: yes"));
    assert!(
        out.stdout
            .contains("CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda=0 -d mlx5_0 -a --report_gbits"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("ib_write_bw -d mlx5_0 -a --report_gbits <this-node>"));
}

#[test]
fn doctor_ranks_the_broken_machine() {
    let out = doctor_on(&machine("cross-socket"), &["--nccl-log", &nccl("gdr-disabled.log"), "--json"]);
    assert_eq!(out.code, 1);
    let j = out.json();
    assert_eq!(j["schema"], "gdr-trace.doctor/1");
    let problems = j["diagnosis"]["problems"].as_array().unwrap();
    let titles: Vec<&str> = problems.iter().map(|p| p["title"].as_str().unwrap()).collect();
    let sev: Vec<&str> = problems.iter().map(|p| p["severity"].as_str().unwrap()).collect();
    assert!(sev.windows(2).all(|w| rank(w[0]) <= rank(w[1])), "ranked: {sev:?}");
    assert!(titles[0].starts_with("NCCL: GPU Direct RDMA Disabled for HCA mlx5_0, mlx5_1"), "{titles:#?}");
    assert!(
        titles.iter().any(|t| t.starts_with("32 of 32 network channel(s) run without GDRDMA")),
        "{titles:#?}"
    );
    assert!(titles.iter().any(|t| t.starts_with("peermem: nvidia-peermem not loaded")));
    assert!(titles.iter().any(|t| t.starts_with("topology: 1 of 8 GPU(s)")));
    assert!(titles.iter().any(|t| t.starts_with("acs: ACS redirect (RR/CR)")));
    assert!(titles.iter().any(|t| t.starts_with("iommu: IOMMU translates DMA")));
    let steps: Vec<&str> = problems.iter().map(|p| p["step"].as_str().unwrap()).collect();
    assert_eq!(steps[0], "nccl-log");
    let ab = &j["diagnosis"]["ab_tests"];
    assert_eq!(ab[0]["gpu_index"], 7, "the worst pair first");
    assert_eq!(
        ab[0]["gpu_server"],
        "CUDA_DEVICE_ORDER=PCI_BUS_ID ib_write_bw --use_cuda=7 -d mlx5_5 -a --report_gbits"
    );
    assert_eq!(ab[0]["host_client"], "ib_write_bw -d mlx5_5 -a --report_gbits <this-node>");
    assert_eq!(ab[1]["gpu_index"], 0, "a good pair as the control");
    assert_eq!(j["nccl"]["version"], "2.21.5+cuda12.4");
    assert!(j["preflight"]["findings"].is_array());
}

fn rank(s: &str) -> u8 {
    ["critical", "high", "medium", "info"].iter().position(|x| *x == s).unwrap() as u8
}

#[test]
fn doctor_dmabuf_log_and_level_from_log() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", &nccl("dmabuf.log")]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("DMA-BUF available on GPU device(s) 0, 1, 2, 3, 4, 5, 6, 7"));
    assert!(out.stdout.contains("NCCL_DMABUF_ENABLE=1 (set by environment)"));

    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("nccl.log");
    std::fs::write(&log, "host:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to SYS\n").unwrap();
    let mut args = roots(&machine("cross-socket"));
    args.extend(["--nccl-log".to_string(), log.display().to_string(), "--json".to_string()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let j = doctor(&a).json();
    assert_eq!(j["preflight"]["nccl_net_gdr_level"]["level"], "SYS");
    assert_eq!(j["preflight"]["nccl_net_gdr_level"]["source"], "nccl-log");
}

#[test]
fn doctor_cannot_run_cases_exit_2() {
    let out = doctor_on(&machine("rail-pix"), &["--nccl-log", "/nonexistent/nccl.log"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("cannot read NCCL log /nonexistent/nccl.log"), "{}", out.error);
    let out = doctor_on(&machine("rail-pix"), &["-p", "999999999", "--duration", "1"]);
    assert_eq!(out.code, 2);
    assert!(out.error.contains("no process with PID 999999999"), "{}", out.error);
    let out = doctor_on(&machine("rail-pix"), &["-p", "1", "--duration=-3"]);
    assert_eq!(out.code, 2);
}

#[test]
fn doctor_on_no_gpu_and_this_machine() {
    let out = doctor_on(&machine("no-gpu"), &[]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stdout.contains("no GPU–NIC pair on this machine to measure"));
    let out = doctor(&[]);
    assert!(out.code < 2, "{}", out.error);
}

// ---------------------------------------------------------------- the NCCL log parser, fuzzed

fn fixture_logs() -> Vec<Vec<u8>> {
    ["gdr-enabled.log", "gdr-disabled.log", "dmabuf.log"]
        .iter()
        .map(|n| std::fs::read(nccl(n)).unwrap())
        .collect()
}

#[test]
fn fixture_logs_parse_as_written() {
    let logs = fixture_logs();
    let enabled = nccl_log::parse_bytes(&logs[0]);
    assert_eq!(enabled.hcas().len(), 8);
    assert!(enabled.hcas().values().all(|e| *e));
    assert_eq!(enabled.channel_counts(), (32, 0));
    assert_eq!(enabled.gpu_gdr.len(), 8);
    assert_eq!(enabled.processes.len(), 8);
    let disabled = nccl_log::parse_bytes(&logs[1]);
    assert!(disabled.hcas().values().all(|e| !*e));
    assert_eq!(disabled.channel_counts(), (0, 32));
    assert_eq!(disabled.ring_gdr, Some(false));
    let dmabuf = nccl_log::parse_bytes(&logs[2]);
    assert_eq!(dmabuf.dmabuf_gpus.len(), 8);
    assert_eq!(dmabuf.version.as_deref(), Some("2.23.4+cuda12.6"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn nccl_parser_survives_any_text(s in "\\PC*") {
        let log = nccl_log::parse(&s);
        prop_assert!(log.recognized <= log.lines);
    }

    #[test]
    fn nccl_parser_survives_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = nccl_log::parse_bytes(&b);
    }

    #[test]
    fn nccl_parser_survives_spliced_tokens(parts in proptest::collection::vec(prop_oneof![
        Just("NCCL INFO ".to_string()), Just("GPU Direct RDMA ".to_string()), Just("Enabled for HCA ".to_string()),
        Just("Disabled for GPU ".to_string()), Just(" / HCA ".to_string()), Just("(distance ".to_string()),
        Just("Channel ".to_string()), Just(" : ".to_string()), Just(" -> ".to_string()), Just(" via NET/".to_string()),
        Just("IB/".to_string()), Just("/GDRDMA".to_string()), Just("NET/IB : Using ".to_string()), Just("[".to_string()),
        Just("]".to_string()), Just("'".to_string()), Just("\n".to_string()), Just("use ring PXN 0 GDR ".to_string()),
        "[0-9a-z_:/ .'\\[\\]()<>=-]{0,8}",
    ], 0..60)) {
        let _ = nccl_log::parse(&parts.concat());
    }

    #[test]
    fn truncated_logs_yield_a_subset(which in 0usize..3, cut in 0usize..20_000) {
        let logs = fixture_logs();
        let full_bytes = &logs[which];
        let part = nccl_log::parse_bytes(&full_bytes[..cut.min(full_bytes.len())]);
        let full = nccl_log::parse_bytes(full_bytes);
        prop_assert!(part.channels.len() <= full.channels.len());
        prop_assert!(part.hca_gdr.len() <= full.hca_gdr.len());
        for h in &part.hca_gdr {
            prop_assert!(full.hca_gdr.iter().any(|f| f.name == h.name && f.enabled == h.enabled), "{:?}", h);
        }
    }
}

#[test]
fn doctor_with_a_live_pid_adds_driver_level_evidence() {
    // PID 1 registers no memory: the trace runs for real and says so (needs root, like every
    // tracing test here).
    let out = doctor_on(&machine("rail-pix"), &["-p", "1", "--duration", "1", "--json"]);
    assert!(out.code == 0 || out.code == 1, "{} {}", out.stdout, out.error);
    let j = out.json();
    assert_eq!(j["live"]["pid"], 1, "{j}");
    assert_eq!(j["live"]["registrations"].as_array().map(Vec::len), Some(0), "{j}");
}
