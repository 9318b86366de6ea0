//! Compatibility-mode reasons as a contained process sees them: the workload in its
//! own mount namespace with a private tmpfs that holds the cufile.json its CUFILE_ENV_PATH_JSON
//! names (force_compat_mode, with comments) — a file no host path reaches, so the tracer can
//! only have read it through /proc/PID/root — and its data on a real mount of the kind under
//! test (tmpfs, overlay, ext4 on a loop device). The test libcufile (no nvidia-fs on this host:
//! compatibility mode), the real tracer.

use std::process::Command;

use gdr_trace_tests::{Tracer, Workload};
use serde_json::Value;

use crate::storage_util::{by, file, s, scratch, u, workload_bin, LIBCUFILE};

const CONFIG: &str = r#"{ // this namespace only
  "properties": { "force_compat_mode": true, /* all POSIX */ }
}"#;

/// Runs `create`, `cufile-open`, `hold`, `cufile-read DATA 64K 0 FLAGS` in a namespace where
/// `mounts` (shell, with {mnt} the private tmpfs) made the data's filesystem; returns the
/// tracer's records, the data path, the config path and the workload's pid.
fn contained(mounts: &str, data_dir: &str, flags: &str) -> (Vec<Value>, String, String, u32) {
    assert!(
        !std::path::Path::new("/sys/module/nvidia_fs").exists(),
        "this test is for a host without nvidia-fs"
    );
    let dir = scratch();
    let mnt = dir.path().join("ctr");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = mnt.display().to_string();
    let mounts = mounts.replace("{mnt}", &mnt);
    let (data, cfg) = (format!("{mnt}/{data_dir}/shard.bin"), format!("{mnt}/cufile.json"));
    let script = format!(
        "mount -t tmpfs gdr-gds {mnt} && printf '%s' '{CONFIG}' > {cfg} && {mounts} && exec {} {} go {} {} {}",
        workload_bin().display(),
        s(&["create", &data, "256K"]),
        s(&["cufile-open"]),
        s(&["hold"]),
        s(&["cufile-read", &data, "64K", "0", flags]),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]).env("CUFILE_ENV_PATH_JSON", &cfg);
    let mut w = Workload::start(cmd);
    loop {
        let l = w.out.next(std::time::Duration::from_secs(60), "the ready line").expect("workload exited");
        if serde_json::from_str::<Value>(&l).is_ok_and(|v| v["event"] == "ready") {
            break;
        }
    }
    let pid = w.pid();
    assert!(!std::path::Path::new(&cfg).exists(), "the cufile.json is the namespace's alone");
    let args = ["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--libcufile".to_string(), LIBCUFILE.to_string()]);
    let mut t = Tracer::spawn(&args);
    w.go();
    // Hold after cuFileDriverOpen until the tracer has decoded it (it reads /proc/PID then).
    let opened = move |v: &Value| v["event"] == "gds_io" && v["op"] == "cuFileDriverOpen";
    let (_, mut recs) = w.hold_until_traced(&mut t, opened);
    let _ = w.finish();
    recs.extend(t.finish());
    drop(dir);
    (recs, data, cfg, pid)
}

/// The read's mode and reasons, the same on the call, the file and the process.
fn check(recs: &[Value], data: &str, cfg: &str, pid: u32, mode: &str, want: &[&str]) {
    let read: Vec<&Value> = by(recs, "gds_io").into_iter().filter(|g| g["op"] == "cuFileRead").collect();
    assert_eq!(read.len(), 1, "{recs:#?}");
    let g = read[0];
    assert_eq!((u(&g["pid"]), &g["gds_mode"]), (pid as u64, &Value::from(mode)), "{g}");
    assert_eq!(g["compat_reason"], serde_json::json!(want), "{g}");
    let sums = by(recs, "storage_summary");
    let sum = sums.iter().find(|s| s["final"] == true).expect("a final storage_summary");
    assert_eq!(sum["compat_reason"], serde_json::json!(want), "{sum}");
    let f = file(recs, data);
    assert_eq!((&f["gds_mode"], &f["compat_reason"]), (&Value::from(mode), &serde_json::json!(want)), "{f}");
    let hints = sum["hints"].to_string();
    assert!(hints.contains(&format!("force_compat_mode is true ({cfg})")), "{hints}");
}

/// This machine's kernel cannot do PCI P2PDMA (the tracer's own evidence): then
/// `kernel-no-p2pdma` is a reason too (nvidia-fs is absent here), after `nvidia-fs-absent`.
fn no_p2pdma() -> bool {
    let fs = gdr_trace::preflight::fs::Fs::new(std::path::Path::new("/sys"), std::path::Path::new("/proc"))
        .unwrap();
    gdr_trace::preflight::gds_mounts::kernel_p2pdma(&fs).usable() == Some(false)
}

/// The reasons the process has on this machine: `fs` (None: a GDS filesystem), then the
/// configuration's and the machine's, then `not-o-direct` when read buffered.
fn reasons(fs: Option<&str>, buffered: bool) -> Vec<String> {
    let mut want: Vec<String> = fs.map(|f| format!("filesystem:{f}")).into_iter().collect();
    want.extend(["force-compat-mode".into(), "nvidia-fs-absent".into()]);
    if no_p2pdma() {
        want.push("kernel-no-p2pdma".into());
    }
    if buffered {
        want.push("not-o-direct".into());
    }
    want
}

#[test]
fn a_contained_process_on_tmpfs_gets_its_filesystem_and_configuration_reasons() {
    let (recs, data, cfg, pid) = contained("mkdir {mnt}/d", "d", "buffered");
    let want = reasons(Some("tmpfs"), true);
    check(&recs, &data, &cfg, pid, "gds-compat", &want.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
fn a_contained_process_on_overlay_gets_the_overlay_reason() {
    let ovl = "mkdir {mnt}/l {mnt}/u {mnt}/w {mnt}/m && \
               mount -t overlay gdr-ovl -o lowerdir={mnt}/l,upperdir={mnt}/u,workdir={mnt}/w {mnt}/m";
    let (recs, data, cfg, pid) = contained(ovl, "m", "buffered");
    let want = reasons(Some("overlay"), true);
    check(&recs, &data, &cfg, pid, "gds-compat", &want.iter().map(String::as_str).collect::<Vec<_>>());
}

/// ext4 (a GDS filesystem) read O_DIRECT: no filesystem or O_DIRECT reason. With no nvidia-fs
/// ioctl and no evidence of the destination, the mode is compat only where the kernel cannot
/// do P2PDMA (and it says so); elsewhere unknown, never compat.
#[test]
fn a_contained_process_on_ext4_with_o_direct_has_only_the_process_and_machine_reasons() {
    let ext4 = "truncate -s 32M {mnt}/img && mkfs.ext4 -q -F {mnt}/img && mkdir {mnt}/e && \
                mount -o loop {mnt}/img {mnt}/e";
    if !no_p2pdma() {
        // There the mode rests on whether the bounce buffer's mapping was still there to read.
        let why = "the kernel can do P2PDMA: the mode rests on the bounce buffer's mapping";
        gdr_trace_tests::skip(
            "a_contained_process_on_ext4_with_o_direct_has_only_the_process_and_machine_reasons",
            why,
        );
        return;
    }
    let (recs, data, cfg, pid) = contained(ext4, "e", "");
    let want = reasons(None, false);
    check(&recs, &data, &cfg, pid, "gds-compat", &want.iter().map(String::as_str).collect::<Vec<_>>());
}
