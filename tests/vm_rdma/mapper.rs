//! A process that maps a library copy before a test's programs start, so that the tracer has
//! hooked the copy (once, for every process that maps it) before they load it.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
};

use gdr_trace_tests::{kernel_has_uprobe_multi, Tracer};
use serde_json::Value;

/// A process mapping `copy` executable until dropped (`gdr-map-file`), once the tracer says the
/// copy is hooked; the tracer's records meanwhile go to `recs`.
pub(crate) fn hooked_before(tracer: &mut Tracer, copy: &Path, recs: &mut Vec<Value>) -> Mapper {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("gdr-map-file");
    let child = Command::new(bin)
        .arg(copy)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("gdr-map-file runs (cargo build --bins)");
    let path = copy.display().to_string();
    let is_it = |r: &Value| r["event"] == "library_copy" && r["path"] == path.as_str();
    recs.extend(tracer.until("the copy hooked", |r| is_it(r) && r["state"] != "detached"));
    let rec = recs.iter().rev().find(|r| is_it(r)).cloned().unwrap_or_default();
    assert_eq!(rec["state"], "attached", "{rec}");
    let via = if kernel_has_uprobe_multi() { "uprobe_multi" } else { "perf_event" };
    assert_eq!(rec["via"], via, "{rec}");
    Mapper(child)
}

pub(crate) struct Mapper(Child);

impl Drop for Mapper {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}
