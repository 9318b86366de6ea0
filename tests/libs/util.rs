//! Helpers for the library-copy tests: copies of the test libcufile at new paths, and the
//! `library_copy` records about one of them.

use std::path::Path;

use serde_json::Value;

use crate::storage_util::LIBCUFILE;

/// A copy of the test libcufile where a pip wheel puts NVIDIA's (a new file: its own inode).
pub fn wheel_copy(dir: &Path) -> String {
    let d = dir.join("site-packages/nvidia/cufile/lib");
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("libcufile.so.0");
    std::fs::copy(LIBCUFILE, &p).unwrap();
    p.display().to_string()
}

/// `library_copy` records of `path` in `state`.
pub fn copies_of<'a>(recs: &'a [Value], path: &str, state: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event"] == "library_copy" && r["path"] == path && r["state"] == state).collect()
}

/// A tracer record saying `path` is now in `state` ("attached", "detached"): what a test waits
/// for before it lets a workload go on, or before it stops the tracer.
pub fn copy_is<'a>(path: &'a str, state: &'static str) -> impl Fn(&Value) -> bool + 'a {
    move |r| r["event"] == "library_copy" && r["path"] == path && r["state"] == state
}

/// A shared library of the system that is not a hooked one (it has no cuFile function).
pub fn any_system_library() -> std::path::PathBuf {
    [
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .find(|p| p.exists())
    .expect("libz or libm")
}
