//! The files the tracer writes are new, private and never reached through a link.

use std::{os::unix::fs::PermissionsExt, process::Command};

use gdr_trace_tests::gdr_trace;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(gdr_trace()).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn record_and_audit_never_write_through_a_link_or_over_a_file_and_make_private_files() {
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("precious");
    std::fs::write(&precious, "keep me").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("link.ndjson");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let (link, precious_s) = (link.to_str().unwrap(), precious.to_str().unwrap());

    for args in [
        vec!["record", "-o", link, "--duration", "1", "--no-storage"],
        vec!["record", "-o", precious_s, "--duration", "1", "--no-storage"],
        vec!["audit", "--log", link, "--duration", "1"],
        vec!["audit", "--log", precious_s, "--duration", "1"],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("already exists") && err.contains("never overwrites"), "{args:?}: {err}");
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me", "{args:?} wrote through");
    }

    let fresh = dir.path().join("new.ndjson");
    let (code, err) = run(&["record", "-o", fresh.to_str().unwrap(), "--duration", "1", "--no-storage"]);
    assert_eq!(code, Some(0), "{err}");
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a recording is readable by its owner only, not {mode:o}");
}
