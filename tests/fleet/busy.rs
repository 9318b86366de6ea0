//! A busy node's recording (thousands of processes and files) is one `report` and
//! `report --json` replay whole. Written by the real recording sink from the real pipeline.

use std::io::Write;

use gdr_trace_tests::gdr_trace;

const PROCS: u32 = 3_000;
const FILES: u32 = 4;

/// Records of one kind in a stream, and of those the final ones.
fn count(text: &str, event: &str) -> (usize, usize) {
    let needle = format!("\"event\":\"{event}\"");
    let all: Vec<&str> = text.lines().filter(|l| l.contains(&needle)).collect();
    (all.len(), all.iter().filter(|l| l.contains("\"final\":true")).count())
}

#[test]
fn report_replays_a_busy_node_recording_whole() {
    let mut file = Vec::new();
    let live = String::from_utf8(gdr_trace::recording::busy::busy_node(PROCS, FILES, &mut file)).unwrap();
    assert!(file.len() > 4 << 20, "a busy node's recording: {} bytes", file.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.ndjson");
    std::fs::File::create(&path).unwrap().write_all(&file).unwrap();

    let report = |args: &[&str]| {
        let out =
            std::process::Command::new(gdr_trace()).arg("report").args(args).arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "report {args:?}: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json = report(&["--json", "--files"]);
    let files = count(&live, "file_io_summary");
    let every = (PROCS * FILES) as usize;
    assert_eq!(files, (2 * every, every), "the live line reported every file, interim and final");
    // `report` shows the final summaries; with --events the interim ones too.
    assert_eq!(count(&json, "file_io_summary").1, every, "report --json --files: every file");
    assert_eq!(count(&json, "storage_summary").1, count(&live, "storage_summary").1, "every process");
    assert_eq!(
        count(&report(&["--json", "--files", "--events"]), "file_io_summary"),
        files,
        "and interim ones"
    );
    // Without --files, no process here used cuFile or nvidia-fs: a storage_summary each, no file lines.
    let plain = report(&["--json"]);
    assert_eq!(count(&plain, "file_io_summary"), (0, 0), "no file lines unless asked");
    assert_eq!(count(&plain, "storage_summary").1, count(&live, "storage_summary").1, "still every process");

    let out = std::process::Command::new(gdr_trace()).arg("report").arg(&path).output().unwrap();
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "report: {err}");
    // The text view gives the 20 busiest processes a line each and counts the rest: all of
    // them are there.
    let more = format!("... and {} more processes with file I/O", PROCS - 20);
    let tail: Vec<&str> = text.lines().rev().take(20).collect();
    assert!(text.contains(&more), "{more}:\n{tail:#?}");
    // Per-file tables only when asked for, as live (`--files`); `--compact`: a line per process.
    assert!(!text.contains(".tfrecord"), "no per-file rows by default");
    let out =
        std::process::Command::new(gdr_trace()).args(["report", "--files"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let files = String::from_utf8_lossy(&out.stdout);
    assert!(files.contains(".tfrecord"), "report --files shows the files");
    let out =
        std::process::Command::new(gdr_trace()).args(["report", "--compact"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let compact = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = compact.lines().take(8).collect();
    assert!(compact.contains("w10000") && !compact.contains(".tfrecord"), "--compact: {first:#?}");
}
