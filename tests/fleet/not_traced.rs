//! A recording replayed says what its tracer did not trace ("not traced"), never
//! "none seen": `report` takes it from the recording's hooks, as live output does at start.

use std::process::Command;

use gdr_trace_tests::gdr_trace;
use serde_json::Value;

#[test]
fn report_says_what_the_recording_did_not_trace() {
    // (the recording's header, what report printed)
    let replayed = |off: &str| -> (Value, String) {
        let p = std::env::temp_dir().join(format!("gdr-fleet-{}{off}.ndjson", std::process::id()));
        let args = [off, "--duration", "1", "--interval", "0"];
        let out = Command::new(gdr_trace()).arg("record").arg("-o").arg(&p).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let header =
            serde_json::from_str(std::fs::read_to_string(&p).unwrap().lines().next().unwrap()).unwrap();
        let out = Command::new(gdr_trace()).arg("report").arg(&p).output().unwrap();
        let _ = std::fs::remove_file(&p);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
        (header, text)
    };
    let (_, text) = replayed("--no-storage");
    assert!(text.contains("-- storage: not traced (storage hooks left out) --"), "{text}");
    assert!(!text.contains("no file I/O seen"), "{text}");
    // With uprobes off, registrations are seen only where a kernel hook attached.
    let (header, text) = replayed("--no-uprobes");
    let kernel_rdma = header["hooks"].as_array().unwrap().iter().any(|h| {
        h["side"] == "kernel"
            && h["hook"].as_str().is_some_and(|n| n.starts_with("ib_umem"))
            && !h["attached"].is_null()
    });
    let said = if kernel_rdma { "no memory registrations seen" } else { "memory registrations not traced" };
    assert!(text.contains(said), "{said}:\n{text}");
}
