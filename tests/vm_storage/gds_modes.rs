//! GDS mode and fallback reasons in the VM, from the tracer's real output: nvidia-fs (the
//! simulated driver, tests/kmod/nvidia_fs.c), compatibility mode forced by the process's own
//! cufile.json or CUFILE_FORCE_COMPAT_MODE (the test libcufile reads them as the real library
//! does), files on filesystems without a direct path (tmpfs, overlay, squashfs: real mounts),
//! no nvidia-fs on a kernel without PCI P2PDMA (Debian's 6.1 and 6.12: "# CONFIG_PCI_P2PDMA is
//! not set"), and unknown where that evidence is missing (a recording without the kernel fact
//! and the destinations).
//! A real P2PDMA read (O_DIRECT into GPU memory) cannot run on these kernels.

use std::process::Command;

use gdr_trace_tests::{gdr_trace, kmods::Module, ndjson};
use serde_json::Value;

use super::{driver, ext4, of, sh, storage_util::*, MNT};

/// The final storage summary of the job: the process that made the run's cuFile calls (not a
/// kernel thread with I/O on the same files, such as ext4's journal `jbd2/loop0-8`).
fn summary(recs: &[Value]) -> &Value {
    let finals: Vec<&Value> =
        by(recs, "storage_summary").into_iter().filter(|s| s["final"] == true).collect();
    // A replayed recording may carry no calls: then its first.
    let Some(pid) = by(recs, "gds_io").first().map(|g| g["pid"].clone()) else {
        return finals.first().expect("a final summary");
    };
    let job = finals.iter().find(|s| s["pid"] == pid);
    job.unwrap_or_else(|| panic!("no final storage_summary of the cuFile process {pid}: {finals:#?}"))
}

/// The one cuFileRead of a run, the final report of its file and of its process.
fn read_of<'a>(recs: &'a [Value], path: &str) -> (&'a Value, &'a Value, &'a Value) {
    let g = of(recs, "gds_io", "op", "cuFileRead");
    assert_eq!(g.len(), 1, "{g:#?}");
    (g[0], file(recs, path), summary(recs))
}

/// Mode and reasons, the same on the call, its file and its process; the old `verdict` field
/// says the same mode.
fn assert_mode(recs: &[Value], path: &str, mode: &str, reasons: &[&str]) {
    let (g, f, p) = read_of(recs, path);
    let want_reasons: Value = if reasons.is_empty() { Value::Null } else { reasons.into() };
    assert_eq!((&g["gds_mode"], &g["compat_reason"]), (&Value::from(mode), &want_reasons), "call: {g}");
    let verdict = if mode == "unknown" { "gds-unknown" } else { mode };
    assert_eq!(g["verdict"], verdict, "{g}");
    let listed =
        |v: &Value| v.as_array().map_or(vec![], |a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    let want: Vec<String> = reasons.iter().map(|r| format!("\"{r}\"")).collect();
    assert_eq!(
        (&f["gds_mode"], listed(&f["compat_reason"])),
        (&Value::from(mode), want.clone()),
        "file: {f}"
    );
    assert_eq!((&p["gds_mode"], listed(&p["compat_reason"])), (&Value::from(mode), want), "process: {p}");
}

fn hints(recs: &[Value]) -> String {
    summary(recs)["hints"].to_string()
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string()
}

/// A 1 MiB cuFile read of `f` with `CUFILE_ENV_PATH_JSON=json`, held twice: after the driver
/// open (the process's facts), then after the buffer's registration (its mappings, GPU memory
/// among them, are read then: the read that follows may be decoded after the process unmapped
/// it and exited).
fn read_held_twice(f: &str, json: &str) -> Run {
    let steps = [s(&["cufile-open"]), s(&["hold"]), s(&["cufile-read", f, "1M", "0", "hold"])];
    let mut w = storage_workload(&[s(&["create", f, "1M"])], &steps, &[("CUFILE_ENV_PATH_JSON", json)]);
    let pid = w.pid().to_string();
    let args = ["attach", &pid, "--libcufile", LIBCUFILE, "--json", "--duration", "120", "--interval", "0"];
    let mut t = gdr_trace_tests::Tracer::spawn(&args.map(String::from));
    w.go();
    let (mut truth_recs, mut recs) = w.hold_until_traced(&mut t, |v| v["op"] == "cuFileDriverOpen");
    let (more, seen) = w.hold_until_traced(&mut t, |v| v["op"] == "cuFileBufRegister");
    truth_recs.extend(more);
    recs.extend(seen);
    truth_recs.extend(w.finish());
    recs.extend(t.finish());
    Run { pid: w.pid(), truth: truth_recs, recs, tracer: t }
}

fn read_1m(f: &str, flags: &str, env: &[(&str, &str)]) -> Run {
    let mut step = vec!["cufile-read", f, "1M", "0"];
    if !flags.is_empty() {
        step.push(flags);
    }
    traced_held(&[s(&["create", f, "1M"])], &[s(&step)], &["attach", "PID", "--libcufile", LIBCUFILE], env)
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_nvfs_on_ext4_with_o_direct() {
    ext4();
    driver(Module::NoBtf);
    let dir = scratch();
    let f = dir.path().join("nvfs.bin").display().to_string();
    let r = read_1m(&f, "", &[]);
    assert_mode(&r.recs, &f, "gds-nvfs", &[]);
    let (g, _, _) = read_of(&r.recs, &f);
    assert_eq!((u(&g["posix_calls"]), u(&g["nvfs_bytes"])), (0, 1 << 20), "{g}");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_compat_forced_by_cufile_json_or_environment() {
    ext4();
    driver(Module::NoBtf);
    let dir = scratch();
    let f = dir.path().join("forced.bin").display().to_string();
    let json = dir.path().join("cufile.json").display().to_string();
    // cufile.json is JSON with comments; a commented-out key is no setting.
    std::fs::write(
        &json,
        "{\n  // \"force_compat_mode\": false,\n  \"properties\": {\n    \"force_compat_mode\": true // all POSIX\n  }\n}\n",
    )
    .unwrap();
    let r = read_held_twice(&f, &json);
    assert_mode(&r.recs, &f, "gds-compat", &["force-compat-mode"]);
    assert!(hints(&r.recs).contains(&format!("force_compat_mode is true ({json})")), "{}", hints(&r.recs));
    assert!(of(&r.recs, "nvfs_io", "ioctl", "READ").is_empty(), "nvidia-fs was there but unused");

    let g = dir.path().join("forced-env.bin").display().to_string();
    let r = read_1m(&g, "", &[("CUFILE_FORCE_COMPAT_MODE", "true")]);
    assert_mode(&r.recs, &g, "gds-compat", &["force-compat-mode"]);
    assert!(hints(&r.recs).contains("force_compat_mode is true (CUFILE_FORCE_COMPAT_MODE=true)"));
}

/// A real mount of `fstype` at `at` (made once per test process).
fn mounted(fstype: &str, at: &str, how: &str) -> String {
    if !std::fs::read_to_string("/proc/mounts").unwrap().contains(&format!(" {at} ")) {
        sh(&format!("mkdir -p {at} && {how}"));
    }
    let line = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        line.lines().any(|l| l.contains(&format!(" {at} ")) && l.contains(&format!(" - {fstype} "))),
        "{line}"
    );
    at.to_string()
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_compat_on_tmpfs_and_overlay() {
    ext4();
    driver(Module::NoBtf);
    let tmp = mounted("tmpfs", "/mnt/gdr-tmpfs", "mount -t tmpfs tmpfs /mnt/gdr-tmpfs");
    let ovl = format!("{MNT}/ovl");
    let merged = mounted(
        "overlay",
        "/mnt/gdr-overlay",
        &format!(
            "mkdir -p {ovl}/lower {ovl}/upper {ovl}/work && mount -t overlay overlay \
             -o lowerdir={ovl}/lower,upperdir={ovl}/upper,workdir={ovl}/work /mnt/gdr-overlay"
        ),
    );
    for (fs, at) in [("tmpfs", tmp), ("overlay", merged)] {
        // Buffered: tmpfs has no O_DIRECT before 6.6; both reasons apply and both are said.
        let f = format!("{at}/compat-{}.bin", std::process::id());
        let r = read_1m(&f, "buffered", &[]);
        let by_fs = format!("filesystem:{fs}");
        assert_mode(&r.recs, &f, "gds-compat", &[&by_fs, "not-o-direct"]);
        assert!(hints(&r.recs).contains(&format!("the file is on {fs}, which has no GPUDirect path")));
        let _ = std::fs::remove_file(&f);
    }
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_compat_on_a_read_only_squashfs() {
    ext4();
    driver(Module::NoBtf);
    let src = format!("{MNT}/squash-src");
    let img = format!("{MNT}/data.squashfs");
    sh(&format!(
        "mkdir -p {src} && head -c 1048576 /dev/urandom > {src}/data.bin && \
         mksquashfs {src} {img} -noappend -quiet"
    ));
    let at = mounted(
        "squashfs",
        "/mnt/gdr-squashfs",
        &format!("mount -t squashfs -o loop,ro {img} /mnt/gdr-squashfs"),
    );
    let f = format!("{at}/data.bin");
    // The file is already there (read-only): no create step. squashfs refuses O_DIRECT.
    let step = s(&["cufile-read", &f, "1M", "0", "buffered"]);
    let r = traced_held(&[], &[step], &["attach", "PID", "--libcufile", LIBCUFILE], &[]);
    assert_mode(&r.recs, &f, "gds-compat", &["filesystem:squashfs", "not-o-direct"]);
    let (g, _, _) = read_of(&r.recs, &f);
    assert_eq!((u(&g["posix_bytes"]), u(&g["nvfs_ioctls"])), (1 << 20, 0), "{g}");
    // `check` lists the mount as compat-only, for the same reason.
    let out = Command::new(gdr_trace()).args(["check", "--json"]).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("check --json: {e}"));
    let mounts =
        json["findings"].as_array().unwrap().iter().find(|f| f["id"] == "gds-mounts").expect("gds-mounts");
    let row = mounts["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"].as_str().is_some_and(|p| p.ends_with(" /mnt/gdr-squashfs")))
        .unwrap_or_else(|| panic!("{mounts:#}"));
    let v = row["value"].as_str().unwrap();
    assert!(
        v.starts_with("squashfs on /dev/loop")
            && v.contains(": compat-only (squashfs: compressed and read-only, no O_DIRECT)"),
        "{v}"
    );
}

/// No nvidia-fs, O_DIRECT POSIX I/O: on these kernels it cannot be P2PDMA, so it is compat and
/// says why; a recording without the kernel fact and the destinations (made before they were
/// read) says unknown.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_without_nvidia_fs_p2pdma_not_possible_else_unknown() {
    ext4();
    gdr_trace_tests::kmods::module(Module::Absent);
    assert!(!std::path::Path::new("/proc/driver/nvidia-fs").exists());
    let dir = scratch();
    let f = dir.path().join("nofs.bin").display().to_string();
    let r = read_1m(&f, "", &[]);
    assert_mode(&r.recs, &f, "gds-compat", &["nvidia-fs-absent", "kernel-no-p2pdma"]);
    let why = format!("p2pdma not possible: kernel {} built without CONFIG_PCI_P2PDMA", release());
    assert!(hints(&r.recs).contains(&why), "{why}: {}", hints(&r.recs));

    // The same run recorded; replayed with and without that evidence.
    let g = dir.path().join("nofs-rec.bin").display().to_string();
    let rec = dir.path().join("trace.ndjson").display().to_string();
    let step = s(&["cufile-read", &g, "1M", "0"]);
    traced_held(
        &[s(&["create", &g, "1M"])],
        &[step],
        &["record", "-o", &rec, "--pid", "PID", "--libcufile", LIBCUFILE],
        &[],
    );
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.contains("\"kernel_p2pdma\":[false,"), "the recording carries the kernel fact");
    let replay = |file: &str| {
        let out = Command::new(gdr_trace()).args(["report", file, "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        ndjson(&String::from_utf8_lossy(&out.stdout))
    };
    let with = replay(&rec);
    assert_eq!(file(&with, &g)["gds_mode"], "gds-compat", "{}", file(&with, &g));
    let older = dir.path().join("older.ndjson").display().to_string();
    std::fs::write(&older, strip_kernel_fact(&text)).unwrap();
    let without = replay(&older);
    let x = file(&without, &g);
    assert_eq!(
        (&x["gds_mode"], &x["compat_reason"]),
        (&Value::from("unknown"), &Value::from(vec!["nvidia-fs-absent"])),
        "{x}"
    );
    let sum = summary(&without);
    assert_eq!(sum["gds_mode"], "unknown", "{sum}");
    assert!(sum["hints"].to_string().contains("may be PCI P2PDMA"), "{sum}");
}

/// The recording as a tracer that read neither the kernel's P2PDMA nor where a call's I/O
/// landed would have written it.
fn strip_kernel_fact(text: &str) -> String {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("kernel_p2pdma");
                m.remove("dest_gpu");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut out = String::new();
    for l in text.lines() {
        let mut v: Value = serde_json::from_str(l).unwrap();
        strip(&mut v);
        out.push_str(&v.to_string());
        out.push('\n');
    }
    assert!(!out.contains("kernel_p2pdma") && !out.contains("dest_gpu"));
    out
}

/// cuFile set to PCI P2PDMA (`use_pci_p2pdma` in its cufile.json) reads an O_DIRECT file
/// straight into GPU memory: the simulated driver's /dev/nvidia0 mapping (VM_IO | VM_PFNMAP,
/// as the real driver maps GPU memory). These kernels have no P2PDMA pages to pin there, so the
/// real kernel refuses the read with EFAULT; the tracer sees the read's buffer in GPU memory
/// and says it: not P2PDMA (nothing landed), not compat (no bounce buffer), and why.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_p2pdma_into_gpu_memory_refused_without_kernel_p2pdma() {
    ext4();
    driver(Module::NoBtf);
    assert!(std::path::Path::new("/dev/nvidia0").exists());
    let dir = scratch();
    let f = dir.path().join("p2p.bin").display().to_string();
    let json = dir.path().join("cufile.json").display().to_string();
    std::fs::write(&json, "{ \"properties\": { \"use_pci_p2pdma\": true } }\n").unwrap();
    let r = read_held_twice(&f, &json);
    let t = truth(&r.truth, "cufile_read", &f);
    assert_eq!(t["ret"], -(libc::EFAULT as i64), "the kernel refused O_DIRECT into GPU memory: {t}");
    let (g, _, _) = read_of(&r.recs, &f);
    assert_eq!((u(&g["posix_calls"]), u(&g["posix_bytes"]), u(&g["nvfs_ioctls"])), (1, 0, 0), "{g}");
    assert_eq!(
        (&g["gds_mode"], &g["verdict"]),
        (&Value::from("unknown"), &Value::from("gds-unknown")),
        "{g}"
    );
    assert_eq!(g["compat_reason"], serde_json::json!(["p2pdma-failed:EFAULT"]), "{g}");
}

/// A cuFile job that ran and exited while the tracer was stopped (SIGSTOP, then SIGCONT): every
/// record is read after the process is gone, its /proc with it, the race a short job on a busy
/// node loses. Its reasons must not depend on winning it.
fn gone_before_read(f: &str, flags: &str, env: &[(&str, &str)]) -> Vec<Value> {
    // Written before the trace: only the job's read is its I/O on the file.
    std::fs::write(f, vec![0x5a_u8; 1 << 20]).unwrap();
    let args = ["watch", "--libcufile", LIBCUFILE, "--json", "--files", "--interval", "0"];
    let mut t = gdr_trace_tests::Tracer::spawn(&args.map(String::from));
    let mut step = vec!["cufile-read", f, "1M", "0"];
    if !flags.is_empty() {
        step.push(flags);
    }
    let mut w = storage_workload(&[], &[s(&step)], env);
    let signal = |sig| {
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(t.child.id() as i32, sig) }, 0);
    };
    signal(libc::SIGSTOP);
    w.go();
    w.finish();
    signal(libc::SIGCONT);
    t.terminate()
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_mode_reasons_of_a_job_gone_before_its_records_are_read() {
    ext4();
    driver(Module::NoBtf);
    let dir = scratch();
    // Its cufile.json (CUFILE_ENV_PATH_JSON): the JSON file it opened while opening the driver.
    let f = dir.path().join("gone-forced.bin").display().to_string();
    let json = dir.path().join("gone-cufile.json").display().to_string();
    std::fs::write(&json, "{ \"properties\": { \"force_compat_mode\": true } }\n").unwrap();
    let recs = gone_before_read(&f, "", &[("CUFILE_ENV_PATH_JSON", &json)]);
    assert_mode(&recs, &f, "gds-compat", &["force-compat-mode"]);
    // tmpfs: the file's device in this tracer's own mount table.
    let tmp = mounted("tmpfs", "/mnt/gdr-tmpfs", "mount -t tmpfs tmpfs /mnt/gdr-tmpfs");
    let g = format!("{tmp}/gone-{}.bin", std::process::id());
    let recs = gone_before_read(&g, "buffered", &[]);
    assert_mode(&recs, &g, "gds-compat", &["filesystem:tmpfs", "not-o-direct"]);
    let _ = std::fs::remove_file(&g);
}
