//! A workload in a container of its own: its own mount namespace (unshare -m, private
//! propagation) with a private tmpfs holding its own copy of the test libcufile, in a cgroup of
//! its own. `watch`, `attach` and `serve` must see its cuFile calls through that copy (which no host path
//! reaches), attribute them to the namespace and cgroup, and let the copy go with it.

use std::{path::PathBuf, process::Command};

use gdr_trace_tests::{Tracer, Workload};
use serde_json::Value;

use crate::{
    storage_util::{by, s, scratch, u, workload_bin, LIBCUFILE},
    util::{copies_of, copy_is},
};

/// A cgroup of its own in the unified hierarchy (removed when dropped), if there is one.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Option<Self> {
        let base = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .iter()
            .map(PathBuf::from)
            .find(|b| b.join("cgroup.procs").exists() && b.join("cgroup.controllers").exists())?;
        let dir = base.join(name);
        std::fs::create_dir(&dir).ok()?;
        Some(Self(dir))
    }
    fn path(&self) -> String {
        let base = self.0.parent().unwrap();
        format!("/{}", self.0.strip_prefix(base).unwrap().display())
    }
    /// The cgroup's id, as `bpf_get_current_cgroup_id` gives it (its directory's inode).
    fn id(&self) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&self.0).unwrap())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The storage workload, in its own mount namespace and cgroup, with its own libcufile at
/// `mnt/libcufile.so.0` on a tmpfs only that namespace has; dlopened after "go".
fn contained(mnt: &str, cgroup: Option<&Cgroup>, data: &str) -> Workload {
    let lib = format!("{mnt}/libcufile.so.0");
    let join = cgroup.map_or(String::new(), |c| format!("echo $$ > {}/cgroup.procs && ", c.0.display()));
    let script = format!(
        "{join}mount -t tmpfs gdr-ctr {mnt} && cp {LIBCUFILE} {lib} && exec {} {} go {} {} {}",
        workload_bin().display(),
        s(&["create", data, "256K"]),
        s(&["dlopen", &lib]),
        s(&["hold"]),
        s(&["cufile-read", data, "64K", "0"]),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]).env("GDR_CUFILE_LATE", "1");
    let w = Workload::start(cmd);
    loop {
        let l = w
            .out
            .next(std::time::Duration::from_secs(60), "the ready line")
            .expect("contained workload exited");
        if serde_json::from_str::<Value>(&l).is_ok_and(|v| v["event"] == "ready") {
            return w;
        }
    }
}

fn check(recs: &[Value], pid: u32, lib: &str, cg: Option<&Cgroup>, mode: &str) {
    let reads: Vec<&Value> = by(recs, "gds_io")
        .into_iter()
        .filter(|g| g["op"] == "cuFileRead" && u(&g["pid"]) == pid as u64)
        .collect();
    assert_eq!(reads.len(), 1, "{mode}: the contained cuFileRead: {:#?}", by(recs, "library_copy"));
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let attached = copies_of(recs, lib, "attached");
    assert_eq!(attached.len(), 1, "{mode}: {attached:#?}");
    let c = attached[0];
    assert_eq!(c["own_mnt_ns"], false, "{mode}: {c}");
    if let Some(ns) = ns {
        assert_eq!(format!("mnt:[{}]", c["mnt_ns"]), ns.display().to_string(), "{mode}: {c}");
    }
    if let Some(cg) = cg {
        assert_eq!(c["cgroup"], cg.path(), "{mode}: {c}");
        assert_eq!(u(&reads[0]["cgroup_id"]), cg.id(), "{mode}: the call is the container's: {}", reads[0]);
    }
    let gone = copies_of(recs, lib, "detached");
    assert_eq!(gone.len(), 1, "{mode}: let go with the namespace: {:#?}", by(recs, "library_copy"));
}

#[test]
fn a_container_with_its_own_library_is_seen_by_watch_and_attach_and_let_go() {
    for mode in ["watch", "attach"] {
        let dir = scratch();
        let mnt = dir.path().join("ctr-lib");
        std::fs::create_dir(&mnt).unwrap();
        let mnt = mnt.display().to_string();
        let data = dir.path().join("ctr.bin").display().to_string();
        let cg = Cgroup::new(&format!("gdr-test-libs-{}-{mode}", std::process::id()));
        let mut w = contained(&mnt, cg.as_ref(), &data);
        let pid = w.pid();
        let lib = format!("{mnt}/libcufile.so.0");
        assert!(!std::path::Path::new(&lib).exists(), "the copy is the namespace's alone");
        let args: Vec<String> = match mode {
            "watch" => ["watch", "--json", "--duration", "600", "--interval", "0"].map(String::from).to_vec(),
            _ => ["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"]
                .map(String::from)
                .to_vec(),
        };
        let mut t = Tracer::spawn(&args);
        w.go();
        // The workload holds after its dlopen until the tracer has hooked the copy.
        let (_, mut recs) = w.hold_until_traced(&mut t, copy_is(&lib, "attached"));
        let _ = w.finish();
        if mode == "watch" {
            recs.extend(t.until("the copy let go", copy_is(&lib, "detached")));
            recs.extend(t.terminate());
        } else {
            recs.extend(t.finish());
        }
        check(&recs, pid, &lib, cg.as_ref(), mode);
    }
}

/// `serve` (the DaemonSet's exporter) sees the contained process's cuFile calls too: its copy
/// of the library is followed, and the call is in `/metrics` as a compatibility-mode read (no
/// nvidia-fs here) with its exact bytes. This kernel refuses fentry, so `--storage` turns the
/// storage hooks on.
#[test]
fn a_container_with_its_own_library_is_seen_by_serve() {
    use gdr_trace_tests::prom::{free_port, http_get, samples};
    let dir = scratch();
    let mnt = dir.path().join("ctr-lib");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = mnt.display().to_string();
    let data = dir.path().join("ctr.bin").display().to_string();
    let cg = Cgroup::new(&format!("gdr-test-libs-{}-serve", std::process::id()));
    let mut w = contained(&mnt, cg.as_ref(), &data);
    let pid = w.pid();
    let lib = format!("{mnt}/libcufile.so.0");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut t = Tracer::spawn(
        &["serve", "--json", "--storage", "--listen", &addr, "--interval", "1"].map(String::from),
    );
    w.go();
    let (_, mut recs) = w.hold_until_traced(&mut t, copy_is(&lib, "attached"));
    let _ = w.finish();
    // The compat bytes of this comm, once the one-second tick has put them in the scrape.
    let compat = |text: &str, name: &str| -> f64 {
        samples(text, name)
            .iter()
            .filter(|(l, _)| l["comm"] == "gdr-storage-wor" && l["verdict"] == "gds-compat")
            .map(|(_, v)| v)
            .sum()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let text = loop {
        let (status, head, text) = http_get(&addr, "/metrics").unwrap();
        assert_eq!(status, 200, "{head}");
        if compat(&text, "gdr_trace_storage_calls_total") >= 1.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < until,
            "the contained cuFileRead never reached /metrics:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert_eq!(compat(&text, "gdr_trace_storage_calls_total"), 1.0, "one cuFileRead:\n{text}");
    assert_eq!(compat(&text, "gdr_trace_storage_bytes_total"), 65536.0, "of 64 KiB:\n{text}");
    recs.extend(t.until("the copy let go", copy_is(&lib, "detached")));
    recs.extend(t.terminate());
    check(&recs, pid, &lib, cg.as_ref(), "serve");
}
