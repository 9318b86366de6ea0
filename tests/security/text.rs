//! Names other people chose reach the terminal escaped.

use std::process::Command;

use gdr_trace::{
    audit::ProcessFacts,
    events::{Context, MrKind, MrRecord},
    recording::{End, Header, Item, FORMAT},
};
use gdr_trace_tests::gdr_trace;

const NASTY: &str = "\x1b]0;pwned\x07\x1b[2J\u{9b}31m\u{202e}";

fn assert_clean(what: &str, out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    let bad: Vec<char> = text.chars().filter(|c| c.is_control() && *c != '\n' && *c != '\t').collect();
    assert!(bad.is_empty(), "{what} printed control characters {bad:?}: {text}");
    assert!(!text.contains('\u{202e}'), "{what} printed a bidi override: {text}");
    assert!(text.contains("\\x1b]0;pwned\\x07"), "{what} shows the escaped text: {text}");
}

#[test]
fn report_escapes_the_header_comm_and_user_of_a_hostile_recording() {
    let header = Item::Header(Header {
        format: FORMAT.into(),
        version: format!("0.1.0{NASTY}"),
        host: format!("node{NASTY}"),
        kernel: serde_json::json!({ "kernel": format!("6.1{NASTY}") }),
        hooks: serde_json::json!([]),
        target_pid: None,
        posture: Default::default(),
        container_host_markers: vec![],
        started_unix_ms: 1,
        ..Default::default()
    });
    let comm = format!("w{NASTY}");
    let ctx = Context { pid: 42, tid: 42, comm: comm.clone(), uid: 1000, cgroup_id: 1, ts_ns: 1_000_000 };
    let facts =
        ProcessFacts { pid: 42, comm, uid: 1000, user: Some(format!("u{NASTY}")), ..Default::default() };
    let mut reg = MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx, 0x1000, 4096, 0xa1);
    reg.access = 1 << 1;
    reg.device = Some(format!("rxe0{NASTY}"));
    let end = Item::End(End { lost: Default::default(), records: 1, ended_unix_ms: 2 });
    let text: String = [header, Item::Process(facts), Item::Record(reg), end]
        .iter()
        .map(|i| serde_json::to_string(i).unwrap() + "\n")
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nasty.ndjson");
    std::fs::write(&f, text).unwrap();
    let out = Command::new(gdr_trace()).arg("report").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_clean("report", &out.stdout);
    // JSON output keeps the exact strings (escaped the JSON way).
    let out = Command::new(gdr_trace()).args(["report", "--json"]).arg(&f).output().unwrap();
    let first: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["host"], format!("node{NASTY}"));
}

#[test]
fn doctor_escapes_nccl_log_text() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nccl.log");
    let log = format!(
        "node:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB\n\
         node:1:1 [0] NCCL WARN {NASTY} bad things\n"
    );
    std::fs::write(&f, log).unwrap();
    let out = Command::new(gdr_trace()).args(["doctor", "--nccl-log"]).arg(&f).output().unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_clean("doctor", &out.stdout);
}
