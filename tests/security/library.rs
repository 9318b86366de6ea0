//! A process in its own root cannot make the tracer read, or put uprobes on, a file
//! outside that root.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use gdr_trace_tests::gdr_trace;
use serde_json::Value;

fn own_root_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("gdr-own-root")
}

fn system_lib(name: &str) -> PathBuf {
    ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is needed (rdma-core/libc)"))
}

/// A process in its own mount namespace and root mapping `library` as
/// /lib/libibverbs.so.1, whose name was then deleted (and maybe made a symlink to `target`).
struct OwnRoot {
    child: Child,
    pid: u32,
    _dir: tempfile::TempDir,
}

impl OwnRoot {
    fn start(library: &Path, target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut child = Command::new(own_root_bin())
            .args([root.to_str().unwrap(), library.to_str().unwrap(), target])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gdr-own-root runs (cargo build --bins)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let pid = line.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("gdr-own-root did not get ready: {line:?}")
        });
        Self { child, pid, _dir: dir }
    }
}

impl Drop for OwnRoot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn probes(pid: u32) -> (Value, String) {
    let out =
        Command::new(gdr_trace()).args(["probes", "--json", "--pid", &pid.to_string()]).output().unwrap();
    assert!(out.status.success(), "probes failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    (serde_json::from_str(&text).unwrap(), text)
}

fn hook<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["hooks"].as_array().unwrap().iter().find(|h| h["hook"] == name).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn a_symlink_planted_over_a_deleted_library_does_not_lead_the_tracer_out_of_the_root() {
    // Outside the process's root: a real libibverbs, which the tracer must not touch. Inside: a
    // library without the ibv_* functions, mapped as libibverbs.so.1, then its name swapped
    // for an absolute symlink to the outside file.
    let outside = tempfile::tempdir().unwrap();
    let outside_lib = outside.path().join("libibverbs.so.1");
    std::fs::copy(system_lib("libibverbs.so.1"), &outside_lib).unwrap();
    let p = OwnRoot::start(&system_lib("libc.so.6"), outside_lib.to_str().unwrap());

    let (v, text) = probes(p.pid);
    assert!(!text.contains(outside.path().to_str().unwrap()), "the outside file appears: {text}");
    for name in ["ibv_reg_mr", "ibv_reg_mr_iova2", "ibv_dereg_mr"] {
        let h = hook(&v, name);
        assert!(h["attached"].is_null(), "{name} attached to a file the process doesn't map: {h}");
        let why = h["reasons"].to_string();
        assert!(why.contains("has no symbol"), "{name} should be looked up in the mapped file: {h}");
        assert!(h["location"].as_str().unwrap_or("").contains("(deleted) in pid"), "{h}");
    }
}

#[test]
fn a_deleted_library_is_hooked_as_the_file_the_process_maps() {
    // The real libibverbs, mapped, then its name deleted: the tracer hooks that very file
    // (through /proc/PID/map_files), not some host file of the same name.
    let p = OwnRoot::start(&system_lib("libibverbs.so.1"), "-");
    let (v, _) = probes(p.pid);
    let h = hook(&v, "ibv_reg_mr");
    assert_eq!(h["attached"], "uprobe+uretprobe", "{h}");
    assert!(h["location"].as_str().unwrap().contains("/lib/libibverbs.so.1 (deleted) in pid"), "{h}");
}

/// Peak resident memory (VmHWM, KiB) of `pid` and every process it started.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = |p: u32| std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
    let hwm = |s: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let children = std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| {
        let p: u32 = e.file_name().to_str()?.parse().ok()?;
        let ppid = status(p).lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse::<u32>().ok()?;
        (ppid == pid).then_some(p)
    });
    children.chain([pid]).map(|p| hwm(&status(p))).max().unwrap_or(0)
}

/// A process maps one executable page of a sparse 1 GiB file named
/// libcuda.so.0; the tracer (and its follower) reads a few bytes of it, states why it is no
/// library, and its memory does not grow by the file's size.
#[test]
fn a_sparse_gigabyte_named_libcuda_is_not_read_into_memory() {
    use gdr_trace_tests::Tracer;
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libcuda.so.0");
    std::fs::File::create(&fake).unwrap().set_len(1 << 30).unwrap();
    let mut t = Tracer::spawn(&["watch", "--json", "--no-storage", "--interval", "0"].map(String::from));
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("gdr-map-file");
    let mut p = Command::new(bin)
        .arg(&fake)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gdr-map-file runs (cargo build --bins)");
    let mut line = String::new();
    BufReader::new(p.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "mapped");
    let shown = fake.to_str().unwrap().to_string();
    let recs = t.until("the fake libcuda copy", |r| {
        r["event"] == "library_copy" && r["path"].as_str().is_some_and(|p| p.contains(&shown))
    });
    let copy = recs.last().unwrap();
    assert_eq!(copy["state"], "failed", "{copy}");
    assert!(copy["reasons"].to_string().contains("parsing"), "{copy}");
    let peak = peak_rss_kib(t.child.id());
    assert!(peak < 256 * 1024, "the tracer's peak RSS is {peak} KiB after a 1 GiB fake library");
    drop(p.stdin.take());
    let _ = p.wait();
    t.terminate();
}

/// A process of `uid` mapping `paths` executable (held until dropped).
pub struct Mapper(Child);

impl Mapper {
    pub fn start(uid: u32, paths: &[PathBuf]) -> Self {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().unwrap();
        let bin = exe.parent().unwrap().parent().unwrap().join("gdr-map-file");
        let mut p = Command::new(bin)
            .args(paths)
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gdr-map-file runs (cargo build --bins)");
        let mut line = String::new();
        BufReader::new(p.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "mapped", "uid {uid} maps {paths:?}");
        Self(p)
    }
}

impl Drop for Mapper {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// Distinct copies (inodes) of the system's libibverbs, each in its own folder.
pub fn ibverbs_copies(dir: &Path, n: usize) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    (0..n)
        .map(|i| {
            let d = dir.join(format!("c{i}"));
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
            let p = d.join("libibverbs.so.1");
            std::fs::copy(system_lib("libibverbs.so.1"), &p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            p
        })
        .collect()
}

/// `--max-uprobes` bounds the uprobes that copies found after start hold on the whole node,
/// whoever maps them: a coalition of users, each under its own cap (`--max-copies-per-user 2`),
/// gets no more. With a node cap of 1 the first copy seen is hooked (whatever its count:
/// libibverbs' versioned symbols make it 18 perf-event uprobes, or two uprobe_multi links) and
/// every later one is refused with the node's reason, whichever of three users maps it; the
/// system's copy, hooked at start, is not counted and stays hooked.
#[test]
fn a_coalition_of_users_holds_no_more_uprobes_for_library_copies_than_the_nodes_cap() {
    use gdr_trace_tests::Tracer;
    let dir = tempfile::tempdir().unwrap();
    let copies = ibverbs_copies(dir.path(), 4);
    let args = ["watch", "--json", "--no-storage", "--interval", "0", "--max-copies-per-user", "2"];
    let args: Vec<String> = args.iter().chain(&["--max-uprobes", "1"]).map(|s| s.to_string()).collect();
    let mut t = Tracer::spawn(&args);
    assert_eq!(
        t.attached("ibv_reg_mr").as_deref(),
        Some("uprobe+uretprobe"),
        "the system's copy: {}",
        t.hooks
    );
    let mine = |r: &Value, p: &Path| r["event"] == "library_copy" && r["path"] == p.to_str().unwrap();
    let first = Mapper::start(65534, &copies[..2]);
    let mut recs = Vec::new();
    for p in &copies[..2] {
        if !recs.iter().any(|r| mine(r, p)) {
            recs.extend(t.until("the first tenant's copy", |r| mine(r, p)));
        }
    }
    let mut others = Vec::new();
    for (uid, p) in [(65533, &copies[2]), (65532, &copies[3])] {
        others.push(Mapper::start(uid, std::slice::from_ref(p)));
        recs.extend(t.until("another tenant's copy", |r| mine(r, p)));
    }
    let of = |p: &Path| recs.iter().rev().find(|r| mine(r, p)).unwrap_or_else(|| panic!("{p:?}")).clone();
    let all: Vec<Value> = copies.iter().map(|p| of(p)).collect();
    let attached: Vec<&Value> = all.iter().filter(|r| r["state"] == "attached").collect();
    assert_eq!(attached.len(), 1, "one copy hooked: {all:#?}");
    assert!(
        copies[..2].iter().any(|p| attached[0]["path"] == p.to_str().unwrap()),
        "the first tenant's came first"
    );
    let held = attached[0]["hooked"].as_array().map_or(0, |h| h.len());
    assert!(held > 0, "{}", attached[0]);
    for r in all.iter().filter(|r| r["state"] != "attached") {
        assert_eq!(r["state"], "failed", "{r}");
        let why = r["reasons"].to_string();
        assert!(why.contains("already hold") && why.contains("the node's cap is 1 (--max-uprobes"), "{r}");
    }
    drop((first, others));
    t.terminate();
}

/// One user mapping many copies of a hooked library gets no more than
/// `--max-copies-per-user` of them hooked (the rest listed as not hooked, with the reason);
/// another user's copy is hooked all the same.
#[test]
fn one_user_gets_no_more_library_copies_hooked_than_the_cap() {
    use gdr_trace_tests::Tracer;
    let dir = tempfile::tempdir().unwrap();
    let copies = ibverbs_copies(dir.path(), 4);
    let args = ["watch", "--json", "--no-storage", "--interval", "0", "--max-copies-per-user", "2"];
    let mut t = Tracer::spawn(&args.map(String::from));
    let mine = |r: &Value, p: &Path| r["event"] == "library_copy" && r["path"] == p.to_str().unwrap();
    let tenant = Mapper::start(65534, &copies[..3]);
    let mut recs = Vec::new();
    for p in &copies[..3] {
        if !recs.iter().any(|r| mine(r, p)) {
            recs.extend(t.until("a copy of the tenant's", |r| mine(r, p)));
        }
    }
    let of = |p: &Path| recs.iter().rev().find(|r| mine(r, p)).unwrap_or_else(|| panic!("{p:?}")).clone();
    let states: Vec<Value> = copies[..3].iter().map(|p| of(p)["state"].clone()).collect();
    assert_eq!(states.iter().filter(|s| *s == "attached").count(), 2, "{states:?}");
    let refused = copies[..3].iter().map(|p| of(p)).find(|r| r["state"] == "failed").expect("one refused");
    assert!(
        refused["reasons"].to_string().contains("user 65534 already has 2 library copies hooked"),
        "{refused}"
    );
    assert!(refused["hooked"].as_array().is_none_or(|h| h.is_empty()), "{refused}");
    // Another user is not held to the first one's cap.
    let other = Mapper::start(65533, &copies[3..]);
    let r = t.until("the other user's copy", |r| mine(r, &copies[3]));
    assert_eq!(r.last().unwrap()["state"], "attached", "{}", r.last().unwrap());
    drop((tenant, other));
    t.terminate();
}
