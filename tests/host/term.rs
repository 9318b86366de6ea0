//! `probes` and the `watch` banner as people see them on this kernel: a fact of the whole
//! kernel stated once, every line within the terminal, plain text in a pipe, everything with
//! `--wide`.

use std::process::Command;

use gdr_trace_tests::terminal::{flat, has_box_lines, has_escapes, on_terminal, too_wide};
use serde_json::Value;

fn gdr(args: &[&str]) -> Command {
    let mut c = Command::new(gdr_trace_tests::gdr_trace());
    c.args(args);
    c
}

/// The kernel-wide reasons `probes --json` reports on this kernel.
fn kernel_wide(v: &Value) -> Vec<String> {
    ["fentry_unavailable", "kprobe_unavailable"]
        .iter()
        .filter_map(|k| v["kernel"][k].as_str().map(String::from))
        .collect()
}

#[test]
fn probes_fits_100_columns_and_says_kernel_wide_reasons_once() {
    let v = gdr_trace_tests::probes_json(&[]);
    let s = on_terminal(gdr(&["probes"]), 100);
    assert_eq!(s.code, Some(0), "{}", s.text);
    assert!(too_wide(&s.text, 100).is_empty(), "{:#?}", too_wide(&s.text, 100));
    assert!(has_box_lines(&s.text) && !has_escapes(&s.text), "{}", s.text);
    let text = flat(&s.text);
    for why in kernel_wide(&v) {
        assert_eq!(text.matches(why.as_str()).count(), 1, "{why:?} once:\n{}", s.text);
    }
    let hooks = v["hooks"].as_array().unwrap();
    let tracepoints = hooks.iter().filter(|h| h["reasons"].to_string().contains("slow path")).count();
    let slow = "put every system call of every process on the slow path";
    assert_eq!(text.matches(slow).count(), usize::from(tracepoints > 0), "{}", s.text);
    for h in hooks {
        let name = h["hook"].as_str().unwrap();
        assert!(s.text.contains(name.split(',').next().unwrap()), "row for {name}:\n{}", s.text);
    }
    let attached = hooks.iter().filter(|h| h["attached"].is_string()).count();
    assert!(text.contains(&format!("{attached}/{} hooks attached", hooks.len())), "{}", s.text);
    assert!(text.contains("gdr-trace probes --wide"), "{}", s.text);
}

#[test]
fn probes_in_a_pipe_is_plain_and_wide_has_every_reason() {
    let v = gdr_trace_tests::probes_json(&[]);
    let out = gdr(&["probes"]).env_remove("COLUMNS").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(!has_box_lines(&text) && !has_escapes(&text), "{text}");
    // Not wrapped: a hook's row is one line, from its name to its note.
    for h in v["hooks"].as_array().unwrap() {
        let name = h["hook"].as_str().unwrap();
        let how = h["attached"].as_str().unwrap_or("NO");
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("{name}:\n{text}"));
        assert!(flat(row).starts_with(&format!("{name} {how}")), "{row}");
    }
    let out = gdr(&["probes", "--wide"]).env("COLUMNS", "100").output().unwrap();
    let wide = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success() && !has_box_lines(&wide), "{wide}");
    // Every reason as the loader wrote it, each whole on a line, as often as rows carry it.
    let hooks = v["hooks"].as_array().unwrap();
    let all: Vec<&str> =
        hooks.iter().flat_map(|h| h["reasons"].as_array().unwrap()).filter_map(Value::as_str).collect();
    for r in &all {
        assert!(wide.lines().any(|l| l.contains(r)), "--wide lacks {r:?}:\n{wide}");
    }
    for why in kernel_wide(&v) {
        let rows = hooks.iter().filter(|h| h["reasons"].to_string().contains(why.as_str())).count();
        assert_eq!(wide.matches(why.as_str()).count(), rows, "{why}");
    }
}

#[test]
fn watch_banner_counts_hooks_and_names_only_the_missing() {
    let v = gdr_trace_tests::probes_json(&[]);
    let s = on_terminal(gdr(&["watch", "--duration", "1", "--interval", "0"]), 100);
    assert_eq!(s.code, Some(0), "{}", s.text);
    // The first line and the indented ones under it.
    let mut lines = s.text.lines();
    let first = lines.next().unwrap_or_default();
    let banner: Vec<&str> = std::iter::once(first).chain(lines.take_while(|l| l.starts_with("  "))).collect();
    let banner = banner.join("\n");
    assert!(banner.starts_with("gdr-trace: kernel"), "{banner}");
    assert!(too_wide(&banner, 100).is_empty(), "{:#?}", too_wide(&banner, 100));
    let hooks = v["hooks"].as_array().unwrap();
    let attached: Vec<&str> =
        hooks.iter().filter(|h| h["attached"].is_string()).map(|h| h["hook"].as_str().unwrap()).collect();
    assert!(
        flat(&banner).contains(&format!("{}/{} hooks attached", attached.len(), hooks.len())),
        "{banner}"
    );
    for name in attached.iter().flat_map(|n| n.split(", ")) {
        let named = banner.split([' ', ',', ':', '\n']).any(|w| w == name);
        assert!(!named, "{name} attached: the banner names only what is missing:\n{banner}");
    }
    for why in kernel_wide(&v) {
        assert_eq!(flat(&banner).matches(why.as_str()).count(), 1, "{why}:\n{banner}");
    }
    if attached.len() < hooks.len() {
        assert!(banner.contains("! not attached:") && banner.contains("gdr-trace probes"), "{banner}");
    }
}
