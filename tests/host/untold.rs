//! What this host's hooks cannot tell, as each command says it (`gdr_trace::untold`). On a
//! kernel that takes neither kprobes nor fentry (this build host's), or without ib_uverbs,
//! the memory type of registrations cannot be told: every command must say so first and none
//! may claim an answer; where it can be told, none says it cannot.

use std::process::{Command, Stdio};

use gdr_trace_tests::{events, gdr_trace, ndjson};
use serde_json::Value;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(gdr_trace()).args(args).stdin(Stdio::null()).output().unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), s(&out.stdout), s(&out.stderr))
}

const MEMORY_TYPE: &str = "memory type of registrations (host or GPU) cannot be told here";

#[test]
fn every_command_says_first_what_cannot_be_told_here_and_none_claims_it() {
    // The hooks record: per family, which facts are told, and a line for each that is not.
    let (_, out, err) = run(&["watch", "--json", "--duration", "1", "--no-storage"]);
    let recs = ndjson(&out);
    let hooks: &Value = events(&recs, "hooks").first().copied().unwrap_or_else(|| panic!("{err}"));
    let state = hooks["facts"]["rdma"]["memory_type"]["state"].as_str().unwrap().to_string();
    assert!(["told", "untold"].contains(&state.as_str()), "{}", hooks["facts"]);
    let blind = state == "untold";
    // What the kernel itself allows decides it, not the tool's own verdict: neither kprobes
    // (no kprobe PMU) nor fentry, and ib_uverbs here (this build host), is blind.
    let kernel = &hooks["kernel"];
    let no_way_in = !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
        && kernel["fentry_unavailable"].is_string();
    assert_eq!(
        kernel["kprobe_unavailable"].is_string() && kernel["fentry_unavailable"].is_string(),
        no_way_in,
        "{kernel}"
    );
    let rdma_here = std::path::Path::new("/sys/module/ib_uverbs").exists();
    if rdma_here || no_way_in {
        assert_eq!(blind, no_way_in, "{}", hooks["facts"]);
    }
    // Blind, the GPU family traces nothing, whatever libibverbs uprobe is on its path.
    if blind {
        assert_eq!(hooks["families"]["gpu"], false, "{}", hooks["families"]);
    }
    let lines: Vec<&str> =
        hooks["untold"].as_array().unwrap().iter().filter_map(|u| u["says"].as_str()).collect();
    assert_eq!(lines.iter().any(|l| l.starts_with(MEMORY_TYPE)), blind, "{lines:?}");
    assert_eq!(hooks["facts"]["storage"]["file_io"]["state"], "left-out", "--no-storage is a choice");
    // Blind, the GPU family's pins cannot be told either (a kernel hook gives them): each
    // family missing here has its line, in the order the facts are said, and no other.
    let facts: Vec<&str> =
        hooks["untold"].as_array().unwrap().iter().filter_map(|u| u["fact"].as_str()).collect();
    if blind {
        assert_eq!(facts, ["memory_type", "gpu_pins"], "{}", hooks["untold"]);
    }

    // probes: the same lines first, and in its JSON.
    let (_, out, _) = run(&["probes"]);
    assert_eq!(
        out.lines().next().unwrap_or_default().starts_with(&format!("! {MEMORY_TYPE}")),
        blind,
        "{out}"
    );
    let (_, out, _) = run(&["probes", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let said = v["untold"].as_array().unwrap().iter().any(|u| u["fact"] == "memory_type");
    assert_eq!(said, blind, "{}", v["untold"]);

    // watch: before anything else, a line per fact.
    let (_, out, _) = run(&["watch", "--duration", "1", "--no-storage"]);
    assert_eq!(
        out.lines().next().unwrap_or_default().starts_with(&format!("! {MEMORY_TYPE}")),
        blind,
        "{out}"
    );
    if blind {
        // (a line may wrap at 80 columns; the facts' lines come before the first other one)
        let head: Vec<&str> = out.lines().take_while(|l| l.starts_with('!') || l.starts_with(' ')).collect();
        assert!(head.iter().any(|l| l.starts_with("! GPU pages pinned for NICs")), "{out}");
    }

    // The gate cannot answer "moved nothing" where it could not have seen GPU memory.
    let mut target = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = target.id().to_string();
    let (code, _, err) = run(&["attach", &pid, "--expect", "gdr", "--within", "1s", "--no-storage"]);
    if blind {
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(&format!("gate: unknown: cannot tell: {MEMORY_TYPE}")), "{err}");
    } else {
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("moved nothing"), "{err}");
    }

    // doctor -p: the live step opens with it, and it is a problem, not "watch longer".
    let (_, out, err) = run(&["doctor", "-p", &pid, "--duration", "1"]);
    assert_eq!(out.contains("cannot tell here: memory_type"), blind, "{out}\n{err}");
    assert_eq!(out.contains("watch longer"), !blind, "{out}");
    assert_eq!(err.contains(&format!("gdr-trace doctor: ! {MEMORY_TYPE}")), blind, "{err}");
    target.kill().unwrap();
    target.wait().unwrap();

    // audit: "findings: none" is no clean bill where memory types cannot be told.
    let (code, out, err) = run(&["audit", "--duration", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.lines().next().unwrap_or_default().starts_with(&format!("! {MEMORY_TYPE}")),
        blind,
        "{out}"
    );
    assert_eq!(out.contains("; cannot tell here: memory_type"), blind, "{out}");
}
