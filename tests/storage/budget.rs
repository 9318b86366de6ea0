//! One user's flood of records cannot blind the tracer to another's, nor can a coalition's:
//! processes of three uids open and close a file as fast as they can while one of uid 65533
//! reads 20 files of its own; under `--events-per-uid` each flooder loses its own records
//! (counted `over_budget`, charged to its uid), the ring buffer never fills, nothing is charged
//! to the victim, and every one of its files is named with its bytes.
//! (Both are users of their own: root's budget is per cgroup, shared with whatever else runs
//! as root in the test's cgroup on a busy machine.)

use std::{
    os::unix::{fs::PermissionsExt, process::CommandExt},
    process::{Command, Stdio},
};

use super::storage_util::*;
use gdr_trace_tests::{events, stash_flood::charged, Tracer, Workload};

const FILES: usize = 20;

#[test]
fn flooding_users_lose_their_own_records_not_another_users() {
    let dir = scratch();
    let (mut victim, files) = victim(&dir);

    let mut tracer = Tracer::spawn(
        &["watch", "--json", "--files", "--interval", "1", "--events-per-uid", "1000"].map(String::from),
    );
    // Three processes, each of its own uid, open, read a byte of and close a world-readable
    // file as fast as an interpreter can: two records a round, far more together than the
    // ring buffer takes between two drains.
    let bait = dir.path().join("bait").display().to_string();
    std::fs::write(&bait, b"x").unwrap();
    std::fs::set_permissions(&bait, std::fs::Permissions::from_mode(0o644)).unwrap();
    let script = format!(
        "import os\n\
         def once():\n    fd = os.open('{bait}', os.O_RDONLY)\n    os.read(fd, 1)\n    os.close(fd)\n\
         for _ in range(1000): once()\n\
         print('flooding', flush=True)\n\
         while True: once()"
    );
    let floods: Vec<std::process::Child> =
        FLOODERS.iter().map(|&uid| python_as(uid, &script, "flooding")).collect();
    victim.go();
    let _ = victim.finish();
    for mut f in floods {
        let _ = f.kill();
        let _ = f.wait();
    }
    let all = tracer.terminate();

    let lost = events(&all, "lost");
    let lost = lost.last().expect("a lost record at the end");
    assert!(u(&lost["by_reason"]["over_budget"]) > 0, "the flooder was held to its budget: {lost}");
    assert_eq!(u(&lost["by_reason"]["ringbuf_full"]), 0, "the ring buffer never filled: {lost}");
    for uid in FLOODERS {
        assert!(charged(lost, &format!("uid {uid}")).is_some_and(|n| n > 0), "uid {uid} charged: {lost}");
    }
    assert_eq!(charged(lost, "uid 65533"), None, "nothing charged to the victim: {lost}");
    every_victim_file(&all, victim.pid(), &files);
}

/// The flooders' uids (the victim is 65533).
const FLOODERS: [u32; 3] = [65534, 65532, 65531];

/// A python3 `script` run as uid 65534, once it has printed `ready` (its stdin a pipe: it
/// ends when the test drops it, or when killed).
fn nobody_python(script: &str, ready: &str) -> std::process::Child {
    python_as(65534, script, ready)
}

/// [`nobody_python`] as `uid` (group 65534).
fn python_as(uid: u32, script: &str, ready: &str) -> std::process::Child {
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .uid(uid)
        .gid(65534)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut said = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut said)
        .unwrap();
    assert_eq!(said.trim(), ready, "the script started");
    child
}

/// Each of the victim's files, named, with its two reads of 4 KiB.
fn every_victim_file(all: &[serde_json::Value], pid: u32, files: &[String]) {
    for f in files {
        let seen: Vec<_> = events(all, "file_io_summary")
            .into_iter()
            .filter(|r| r["pid"] == pid && r["path"] == f.as_str() && r["final"] == true)
            .collect();
        assert_eq!(seen.len(), 1, "the victim's {f}, named: {seen:?}");
        assert_eq!((u(&seen[0]["reads"]), u(&seen[0]["bytes_read"])), (2, 8192), "{f}: {}", seen[0]);
    }
}

/// The victim of uid 65533 with its files, waiting for `go`.
fn victim(dir: &tempfile::TempDir) -> (Workload, Vec<String>) {
    let files: Vec<String> =
        (0..FILES).map(|i| dir.path().join(format!("victim-{i}.bin")).display().to_string()).collect();
    let setup: Vec<String> = files.iter().map(|f| s(&["create", f, "8K"])).collect();
    let steps: Vec<String> = files.iter().map(|f| s(&["read", f, "4K", "2"])).collect();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = Command::new(workload_bin());
    cmd.args(&setup).arg("go").args(&steps).uid(65533).gid(65534);
    (storage_workload_cmd(cmd), files)
}

/// The node-wide table of counted descriptors (16,384) filled by one user holding opens: past
/// half full, that user gets no more entries (its uncounted reads are lost `over_budget`), and
/// another user's files are all counted. Without the share, 17,000 held descriptors of uid
/// 65534 left no room and the victim's files went uncounted (`storage_map_full`).
#[test]
fn a_user_holding_opens_cannot_crowd_out_another_users_files() {
    let dir = scratch();
    let (mut victim, files) = victim(&dir);
    let mut tracer = Tracer::spawn(&["watch", "--json", "--files", "--interval", "1"].map(String::from));
    let mut hog = nobody_python(&holding(&dir, 17_000), "holding");
    victim.go();
    let _ = victim.finish();
    drop(hog.stdin.take());
    let _ = hog.wait();
    let all = tracer.terminate();

    held_to_shares(&all, victim.pid(), &files);
    // What the hog got counted (a read on each counted descriptor): about half the table.
    let hog_reads = events(&all, "storage_summary")
        .into_iter()
        .filter(|r| r["comm"] == "python3" && r["final"] == true)
        .map(|r| u(&r["reads"]))
        .max()
        .unwrap_or(0);
    assert!((4_000..=9_000).contains(&hog_reads), "the hog's counted reads: {hog_reads}");
}

/// A python3 script that opens `held` descriptors of one bait file, reads one byte through
/// each, says `holding` and waits; its descriptor limit raised by root (the test) first.
fn holding(dir: &tempfile::TempDir, held: usize) -> String {
    let bait = dir.path().join("bait").display().to_string();
    std::fs::write(&bait, b"x").unwrap();
    std::fs::set_permissions(&bait, std::fs::Permissions::from_mode(0o644)).unwrap();
    let lim = libc::rlimit { rlim_cur: 20_000, rlim_max: 20_000 };
    // SAFETY: a plain system call on this process (the children inherit it).
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0, "raise RLIMIT_NOFILE");
    format!(
        "import os, sys\n\
         fds = [os.open('{bait}', os.O_RDONLY) for _ in range({held})]\n\
         for fd in fds: os.pread(fd, 1, 0)\n\
         print('holding', flush=True)\n\
         sys.stdin.read()"
    )
}

/// Coalitions: three uids, one after another, each opening 7,000 counted descriptors (21,000:
/// more than the table's 16,384): the first gets 7,000 (the table was under half full), the
/// others 4,096 each (their share past half), and a fourth user's files are all counted (a
/// full table left them uncounted).
#[test]
fn a_coalition_of_users_holding_opens_cannot_crowd_out_another_users_files() {
    let dir = scratch();
    let (mut victim, files) = victim(&dir);
    let mut tracer = Tracer::spawn(&["watch", "--json", "--files", "--interval", "1"].map(String::from));
    let script = holding(&dir, 7_000);
    let mut hogs: Vec<_> =
        [65534, 65532, 65531].iter().map(|&uid| python_as(uid, &script, "holding")).collect();
    victim.go();
    let _ = victim.finish();
    for hog in &mut hogs {
        drop(hog.stdin.take());
        let _ = hog.wait();
    }
    let all = tracer.terminate();
    held_to_shares(&all, victim.pid(), &files);
}

/// The hogs were held to their shares (lost `over_budget`), the table never filled, and every
/// one of the victim's files was counted.
fn held_to_shares(all: &[serde_json::Value], victim: u32, files: &[String]) {
    let lost = events(all, "lost");
    let lost = lost.last().expect("a lost record at the end");
    assert!(u(&lost["by_reason"]["over_budget"]) > 0, "the hogs were held to their shares: {lost}");
    assert_eq!(u(&lost["by_reason"]["storage_map_full"]), 0, "the table never filled: {lost}");
    every_victim_file(all, victim, files);
}
