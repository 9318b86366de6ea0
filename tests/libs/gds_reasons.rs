//! Compatibility-mode reasons as a contained process sees them (issue 25): the workload in its
//! own mount namespace with a private tmpfs that holds its data and the cufile.json its
//! CUFILE_ENV_PATH_JSON names (force_compat_mode, with comments) — a file no host path reaches,
//! so the tracer can only have read it through /proc/PID/root. A real tmpfs mount, the test
//! libcufile (no nvidia-fs on this host: compatibility mode), the real tracer.

use std::process::Command;

use gdr_trace_tests::{Tracer, Workload};
use serde_json::Value;

use crate::storage_util::{by, file, s, scratch, u, workload_bin, LIBCUFILE};

#[test]
fn a_contained_process_gets_its_own_filesystem_and_configuration_reasons() {
    assert!(
        !std::path::Path::new("/sys/module/nvidia_fs").exists(),
        "this test is for a host without nvidia-fs"
    );
    let dir = scratch();
    let mnt = dir.path().join("ctr-data");
    std::fs::create_dir(&mnt).unwrap();
    let mnt = mnt.display().to_string();
    let (data, cfg) = (format!("{mnt}/shard.bin"), format!("{mnt}/cufile.json"));
    let json = r#"{ // this namespace only
  "properties": { "force_compat_mode": true, /* all POSIX */ }
}"#;
    let script = format!(
        "mount -t tmpfs gdr-gds {mnt} && printf '%s' '{json}' > {cfg} && exec {} {} go {} {} {}",
        workload_bin().display(),
        s(&["create", &data, "256K"]),
        s(&["cufile-open"]),
        s(&["hold"]),
        s(&["cufile-read", &data, "64K", "0", "buffered"]),
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
    let args = [
        "attach",
        &pid.to_string(),
        "--json",
        "--duration",
        "120",
        "--interval",
        "0",
        "--libcufile",
        LIBCUFILE,
    ]
    .map(String::from);
    let mut t = Tracer::spawn(&args);
    w.go();
    // Hold after cuFileDriverOpen until the tracer has decoded it (it reads /proc/PID then).
    let opened = move |v: &Value| v["event"] == "gds_io" && v["op"] == "cuFileDriverOpen";
    let (_, mut recs) = w.hold_until_traced(&mut t, opened);
    let _ = w.finish();
    recs.extend(t.finish());

    let want = ["filesystem:tmpfs", "force-compat-mode", "nvidia-fs-absent", "not-o-direct"];
    let read: Vec<&Value> = by(&recs, "gds_io").into_iter().filter(|g| g["op"] == "cuFileRead").collect();
    assert_eq!(read.len(), 1, "{recs:#?}");
    assert_eq!(
        (u(&read[0]["pid"]), &read[0]["gds_mode"]),
        (pid as u64, &Value::from("gds-compat")),
        "{}",
        read[0]
    );
    assert_eq!(read[0]["compat_reason"], serde_json::json!(want), "{}", read[0]);
    let sums = by(&recs, "storage_summary");
    let sum = sums.iter().find(|s| s["final"] == true).expect("a final storage_summary");
    assert_eq!(sum["compat_reason"], serde_json::json!(want), "{sum}");
    let f = file(&recs, &data);
    assert_eq!(
        (&f["gds_mode"], &f["compat_reason"]),
        (&Value::from("gds-compat"), &serde_json::json!(want)),
        "{f}"
    );
    let hints = sum["hints"].to_string();
    assert!(hints.contains(&format!("force_compat_mode is true ({cfg})")), "{hints}");
}
