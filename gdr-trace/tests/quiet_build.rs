//! Issue 26: every build of gdr-trace printed some 40 `warning: gdr-trace@0.1.0: Compiling …`
//! lines, the inner eBPF build's progress relayed by the build script. Runs the build script
//! cargo compiled for this test (the real one, with its real inner `cargo build` of
//! gdr-trace-ebpf) and checks that a successful build says nothing: no `cargo:warning`.
//!
//! Cheap on a small CI machine: the inner build's target directory is a hard-linked copy of
//! the one cargo already has (`core` for the BPF target stays built) with only gdr-trace-ebpf's
//! own outputs removed, so the one crate is compiled and linked again.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::SystemTime,
};

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The newest `target/debug/build/gdr-trace-<hash>/<file>` (not gdr-trace-ebpf's or the tests').
fn newest(file: &str) -> Option<PathBuf> {
    let build = target_dir().join("debug/build");
    let mut found: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(&build)
        .ok()?
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("gdr-trace-").is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .map(|e| e.path().join(file))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

/// Removes what belongs to gdr-trace-ebpf itself, and cargo's lock files, under `dir`.
fn forget_the_crate(dir: &Path, removed: &mut usize) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let ours =
            ["gdr-trace-ebpf", "gdr_trace_ebpf", "libgdr_trace_ebpf"].iter().any(|s| name.starts_with(s));
        let is_dir = e.file_type().unwrap().is_dir();
        if ours || name.starts_with(".cargo") && name.ends_with("lock") {
            *removed += usize::from(ours);
            if is_dir { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) }.unwrap();
        } else if is_dir {
            forget_the_crate(&p, removed);
        }
    }
}

#[test]
fn building_the_ebpf_object_prints_nothing_on_success() {
    let script = newest("build-script-build").expect("cargo compiled gdr-trace's build script");
    // The workspace's one eBPF build (build.rs: target/ebpf, shared by every profile).
    let built =
        Some(target_dir().join("ebpf")).filter(|p| p.is_dir()).expect("a previous build of the eBPF object");
    // Inside target/: hard links need the same file system.
    let out_dir = target_dir().join(format!("quiet-build-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let copy = out_dir.join("aya-build");
    let cp = Command::new("cp").arg("-al").arg(&built).arg(&copy).status().unwrap();
    assert!(cp.success(), "cp -al {}", built.display());
    let mut removed = 0;
    forget_the_crate(&copy, &mut removed);
    assert!(removed > 0, "gdr-trace-ebpf's outputs in {}", built.display());

    let out = Command::new(&script)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("OUT_DIR", &out_dir)
        .env("CARGO_CFG_TARGET_ENDIAN", "little")
        .env("CARGO_CFG_TARGET_ARCH", std::env::consts::ARCH)
        .env("GDR_EBPF_TARGET_DIR", &copy)
        .env_remove("AYA_BUILD_SKIP")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let object = out_dir.join("gdr-trace-ebpf").is_file();
    std::fs::remove_dir_all(&out_dir).unwrap();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The object was built again, from scratch for the crate.
    assert!(object, "{stdout}");
    // Cargo turns `cargo:warning=` into `warning: gdr-trace@…` lines: there must be none.
    let said: Vec<&str> = stdout.lines().filter(|l| !l.starts_with("cargo:rerun-if-")).collect();
    assert!(said.is_empty(), "a successful build prints nothing, not:\n{}", said.join("\n"));
}
