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

/// "N/T hooks attached" as every command states it: `facts::HookCount` of `probes --json`.
fn count(v: &Value) -> String {
    let hooks = v["hooks"].as_array().unwrap();
    let c = gdr_trace::facts::HookCount::of(
        hooks
            .iter()
            .map(|h| (h["hook"].as_str().unwrap(), h["attached"].is_string(), h["reasons"][0].as_str())),
    );
    format!("{}/{} hooks attached", c.attached, c.total)
}

/// The total of the first "N/T hooks attached" in `text`.
fn total(text: &str) -> Option<u32> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words.windows(2).position(|w| w == ["hooks", "attached"] || w == ["hooks", "attached,"])?;
    words[at.checked_sub(1)?].split_once('/')?.1.parse().ok()
}

/// The kernel-wide reasons `probes --json` reports on this kernel.
fn kernel_wide(v: &Value) -> Vec<String> {
    ["fentry_unavailable", "kprobe_unavailable"]
        .iter()
        .filter_map(|k| v["kernel"][k].as_str().map(String::from))
        .collect()
}

#[test]
fn probes_fits_80_and_100_columns_and_says_kernel_wide_reasons_once() {
    let v = gdr_trace_tests::probes_json(&[]);
    let hooks = v["hooks"].as_array().unwrap();
    for (args, cols) in [(&["probes"][..], 80), (&["probes"], 100), (&["probes", "-v"], 100)] {
        let s = on_terminal(gdr(args), cols);
        assert_eq!(s.code, Some(0), "{}", s.text);
        assert!(too_wide(&s.text, cols.into()).is_empty(), "{args:?}: {:#?}", too_wide(&s.text, cols.into()));
        assert!(!has_escapes(&s.text), "{}", s.text);
        let text = flat(&s.text);
        for why in kernel_wide(&v) {
            assert_eq!(text.matches(why.as_str()).count(), 1, "{why:?} once:\n{}", s.text);
        }
        let tracepoints = hooks.iter().filter(|h| h["reasons"].to_string().contains("slow path")).count();
        let slow = "put every system call of every process on the slow path";
        assert_eq!(text.matches(slow).count(), usize::from(tracepoints > 0), "{}", s.text);
        assert!(text.contains(&count(&v)), "{}", s.text);
        assert!(text.contains("--wide"), "{}", s.text);
        if args.len() == 2 {
            // -v: a row per hook, in boxes.
            assert!(has_box_lines(&s.text), "{}", s.text);
            for h in hooks {
                let name = h["hook"].as_str().unwrap();
                assert!(s.text.contains(name.split(',').next().unwrap()), "row for {name}:\n{}", s.text);
            }
        } else {
            // Grouped: a family a line and its outcomes, well under a row per hook.
            for family in ["rdma:", "gpu:", "p2p:", "storage:"] {
                assert!(s.text.lines().any(|l| l.starts_with(family)), "{family}\n{}", s.text);
            }
            assert!(
                s.text.lines().count() < hooks.len(),
                "{} lines for {} hooks:\n{}",
                s.text.lines().count(),
                hooks.len(),
                s.text
            );
        }
    }
}

/// `watch` once said 79 hooks, `attach` 80. Every command states one total: the hooks
/// that observe (attach's fork follower is the tracer's own), as `probes` counts them.
#[test]
fn watch_attach_and_probes_state_the_same_hook_total() {
    let v = gdr_trace_tests::probes_json(&[]);
    let want = count(&v);
    let want_total = total(&want).unwrap();
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let runs: [&[&str]; 3] =
        [&["probes"], &["watch", "--duration", "1", "--interval", "0"], &["attach", &pid, "--duration", "1"]];
    for args in runs {
        let out = gdr(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {text}");
        assert_eq!(total(&text), Some(want_total), "{args:?} against probes' {want}:\n{text}");
    }
    let out = gdr(&["attach", &pid, "--duration", "1", "--json"]).output().unwrap();
    let hooks_rec: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|r: &Value| r["event"] == "hooks")
        .expect("the hooks record");
    assert_eq!(total(&count(&hooks_rec)), Some(want_total), "attach --json: {hooks_rec}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn probes_in_a_pipe_is_plain_and_wide_has_every_reason() {
    let v = gdr_trace_tests::probes_json(&[]);
    let out = gdr(&["probes", "-v"]).env_remove("COLUMNS").output().unwrap();
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
    // What cannot be told here comes first (`! ...` and its wrapped lines), then the banner:
    // its first line and the indented ones under it.
    let before: Vec<&str> = s.text.lines().take_while(|l| !l.starts_with("gdr-trace: kernel")).collect();
    assert!(before.iter().all(|l| l.starts_with("! ") || l.starts_with("    ")), "{before:#?}");
    let mut lines = s.text.lines().skip(before.len());
    let first = lines.next().unwrap_or_default();
    let banner: Vec<&str> = std::iter::once(first).chain(lines.take_while(|l| l.starts_with("  "))).collect();
    let banner = banner.join("\n");
    assert!(banner.starts_with("gdr-trace: kernel"), "{banner}");
    assert!(too_wide(&banner, 100).is_empty(), "{:#?}", too_wide(&banner, 100));
    let hooks = v["hooks"].as_array().unwrap();
    let attached: Vec<&str> =
        hooks.iter().filter(|h| h["attached"].is_string()).map(|h| h["hook"].as_str().unwrap()).collect();
    assert!(flat(&banner).contains(&count(&v)), "{banner}");
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

#[test]
fn doctor_fits_80_columns() {
    // Its head line names the roots and NCCL's GDR level: 81 columns before it wrapped.
    let s = on_terminal(gdr(&["doctor"]), 80);
    assert!(s.text.contains("gdr-trace doctor: sysfs"), "{}", s.text);
    assert!(too_wide(&s.text, 80).is_empty(), "{:#?}", too_wide(&s.text, 80));
}

#[test]
fn readme_examples_state_todays_hook_totals() {
    // Example output pasted into README drifts when hooks are added: its totals (all hooks, and
    // each family's) are the same on every machine, so they are checked against this build's.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let want = total(&count(&gdr_trace_tests::probes_json(&[]))).unwrap();
    let stated: Vec<u32> = readme.lines().filter_map(total).collect();
    assert!(!stated.is_empty(), "README shows no hook total");
    assert!(stated.iter().all(|&t| t == want), "README states {stated:?} hooks, this build has {want}");
    let probes = String::from_utf8(gdr(&["probes"]).env("COLUMNS", "100").output().unwrap().stdout).unwrap();
    // "rdma: 5/15 attached": the family's total after the slash.
    let family = |text: &str, name: &str| -> Option<String> {
        let line = text.lines().find(|l| l.starts_with(&format!("{name}: ")) && l.ends_with(" attached"))?;
        Some(line.split('/').nth(1)?.split(' ').next()?.to_string())
    };
    for name in ["rdma", "gpu", "p2p", "storage"] {
        if let Some(t) = family(&readme, name) {
            assert_eq!(Some(t), family(&probes, name), "{name} in README against probes:\n{probes}");
        }
    }
}

#[test]
fn help_is_wrapped_to_the_terminal_and_to_80_columns_in_a_pipe() {
    // `--help` took up to 185 columns whatever the terminal: clap's own 100 without a width.
    for sub in ["", "watch", "attach", "probes", "check", "doctor", "audit", "record", "report", "serve"] {
        let args: Vec<&str> = [sub, "--help"].into_iter().filter(|a| !a.is_empty()).collect();
        let narrow = on_terminal(gdr(&args), 64);
        assert_eq!(narrow.code, Some(0), "{sub} --help: {}", narrow.text);
        assert!(!has_escapes(&narrow.text), "{sub} --help on a terminal: {:?}", narrow.text);
        assert!(
            too_wide(&narrow.text, 64).is_empty(),
            "{sub} on 64 columns: {:#?}",
            too_wide(&narrow.text, 64)
        );
        let piped = gdr(&args).env_remove("COLUMNS").output().unwrap();
        let text = String::from_utf8(piped.stdout).unwrap();
        assert!(too_wide(&text, 80).is_empty(), "{sub} in a pipe: {:#?}", too_wide(&text, 80));
        // Wrapped to 80, not narrower: the pipe's lines use the width they have.
        assert!(text.lines().any(|l| l.chars().count() > 64), "{sub} in a pipe:\n{text}");
        let examples = text.find("\nExamples:\n").map(|at| &text[at + 11..]).unwrap_or_default();
        let block: Vec<&str> = examples.lines().take_while(|l| !l.is_empty()).collect();
        assert!(
            block.len() >= 2 && block.iter().all(|l| l.starts_with("  ")),
            "{sub}: examples wrapped out of their indentation:\n{examples}"
        );
    }
}
