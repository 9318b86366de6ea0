//! Recordings and NCCL logs are untrusted input: bounded, validated, never a panic.

use std::{io::Cursor, process::Command};

use gdr_trace::{
    audit::{container::Container, ProcessFacts},
    events::{Context, MrKind, MrRecord},
    recording::{End, Header, Item, Reader},
};
use gdr_trace_tests::gdr_trace;
use proptest::prelude::*;

fn header() -> Item {
    Item::Header(Header {
        host: "node-1".into(),
        kernel: serde_json::json!({ "kernel": "6.1.0" }),
        hooks: serde_json::json!([]),
        started_unix_ms: 1,
        ..Default::default()
    })
}

fn lines(items: &[Item]) -> String {
    items.iter().map(|i| serde_json::to_string(i).unwrap() + "\n").collect()
}

fn report(path: &std::path::Path, json: bool) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(gdr_trace());
    cmd.arg("report").arg(path);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), s(&out.stdout), s(&out.stderr))
}

#[test]
fn a_recording_with_a_short_container_id_is_reported_not_a_panic() {
    let ctx = Context { pid: 42, tid: 42, comm: "w".into(), uid: 1000, cgroup_id: 1, ts_ns: 1_000_000 };
    let facts = ProcessFacts {
        pid: 42,
        comm: "w".into(),
        uid: 1000,
        container: Some(Container {
            runtime: Some("docker".into()),
            id: Some("abc".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut reg = MrRecord::at(MrKind::Register, "fexit:ib_umem_get", ctx, 0x1000, 4096, 0xa1);
    reg.access = 1 << 1; // REMOTE_WRITE: a finding names the container
    reg.device = Some("rxe0".into());
    let end = Item::End(End { lost: Default::default(), records: 1, ended_unix_ms: 2 });
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("short-id.ndjson");
    std::fs::write(&f, lines(&[header(), Item::Process(facts), Item::Record(reg), end])).unwrap();
    for json in [false, true] {
        let (code, out, err) = report(&f, json);
        assert!(!err.contains("panicked"), "report panicked: {err}");
        assert_eq!(code, Some(0), "{err}");
        assert!(json || out.contains("docker:abc"), "the short id is shown as it is: {out}");
    }
}

#[test]
fn report_of_an_endless_or_lineless_file_is_a_clear_error() {
    let (code, _, err) = report("/dev/zero".as_ref(), false);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 1") && err.contains("longer than"), "{err}");
    // A sparse file: a header line, then 64 MiB without a newline.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("sparse.ndjson");
    std::fs::write(&f, lines(&[header()])).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    file.set_len(64 << 20).unwrap();
    let (code, _, err) = report(&f, true);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 2") && err.contains("longer than"), "{err}");
}

#[test]
fn doctor_refuses_an_nccl_log_over_its_cap() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nccl.log");
    std::fs::File::create(&f).unwrap().set_len(100 << 20).unwrap();
    let out = Command::new(gdr_trace()).args(["doctor", "--json", "--nccl-log"]).arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot read NCCL log") && err.contains("more than"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes after a valid header: records or errors, never a panic, and at most as many
    /// items as lines.
    #[test]
    fn the_recording_reader_takes_any_bytes(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut file = lines(&[header()]).into_bytes();
        file.extend(&tail);
        if let Ok((_, reader)) = Reader::open(Cursor::new(file)) {
            let n = reader.take(10_000).count();
            prop_assert!(n <= tail.split(|&b| b == b'\n').count());
        }
    }

    /// Lines that look like records, with fields of any JSON type.
    #[test]
    fn the_recording_reader_takes_any_json_fields(
        event in prop::sample::select(vec!["process", "record", "tick", "flush", "note", "end", "header", "storage_summary"]),
        key in "[a-z_]{1,12}",
        value in prop_oneof![Just("null".to_string()), any::<i64>().prop_map(|v| v.to_string()),
                             "\\PC{0,20}".prop_map(|s| serde_json::to_string(&s).unwrap())],
    ) {
        let line = format!("{{\"event\":\"{event}\",\"{key}\":{value}}}\n");
        let file = lines(&[header()]) + &line;
        let (_, reader) = Reader::open(Cursor::new(file)).unwrap();
        let _ = reader.take(10).count();
    }

    /// NCCL log text of any shape parses without a panic.
    #[test]
    fn the_nccl_log_parser_takes_any_bytes(raw in proptest::collection::vec(any::<u8>(), 0..4096),
                                           words in proptest::collection::vec(
        prop::sample::select(vec!["NCCL INFO ", "NCCL WARN ", "NET/IB : ", "GPU Direct RDMA ", "[0]", ":", " ",
                                  "\n", "Enabled", "Disabled", "for HCA ", "via NET/IB/0/GDRDMA", "Channel 00/0 : ",
                                  "NCCL_NET_GDR_LEVEL set by environment to ", "mlx5_0", "->", "\u{1b}[2J"]), 0..64)) {
        let _ = gdr_trace::nccl_log::parse_bytes(&raw);
        let _ = gdr_trace::nccl_log::parse(&words.concat());
    }
}
