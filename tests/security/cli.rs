//! Command-line arguments, fuzzed: any words after `gdr-trace`, drawn from its own subcommands
//! and options (read from the clap definition, so a new option is fuzzed without a change here)
//! with values that are numbers out of range, NaN, infinities, garbage and long strings. Parsing
//! never panics, a refusal is exit 2 with a message, and the commands that do not trace run to
//! a clean 0, 1 or 2 (never a panic or a signal). CI runs the fixed number of cases below.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use clap::{CommandFactory, Parser};
use gdr_trace::{
    cli::{self, Cli},
    options::TraceArgs,
    trace::MAX_SECS,
};
use gdr_trace_tests::gdr_trace;
use proptest::prelude::*;

/// Every visible subcommand with its long options (`--name`), from the clap definition.
fn vocabulary() -> Vec<(String, Vec<String>)> {
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let flags = c.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect();
            (c.get_name().to_string(), flags)
        })
        .collect()
}

/// A value an option may be given: what a typo, a script bug or an attacker would pass.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "-1",
            "1",
            "0.5",
            "1e9",
            "1e10",
            "1e300",
            "-0",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "0x10",
            "",
            " ",
            "4294967296",
            "18446744073709551616",
            "auto",
            "kprobe",
            "high",
            "PXB",
            "9",
            "/",
            "/nonexistent",
            "/proc/self/mem",
            "-",
            "--",
            "127.0.0.1:0",
            "[::1]:99999",
        ])
        .prop_map(str::to_string),
        any::<f64>().prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        "\\PC{0,24}",
        "[a-z]{200,400}",
    ]
}

/// `gdr-trace SUBCOMMAND` and up to six words: an option of that subcommand (mostly), any
/// other option, or a bare value.
fn argv() -> impl Strategy<Value = Vec<String>> {
    let vocab = vocabulary();
    let all: Vec<String> = vocab.iter().flat_map(|(_, f)| f.clone()).collect();
    (
        prop::sample::select(vocab),
        proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), value()), 0..6),
    )
        .prop_map(move |((cmd, flags), words)| {
            let mut v = vec!["gdr-trace".to_string(), cmd];
            for (kind, i, val) in words {
                match kind {
                    0 | 1 if !flags.is_empty() => v.extend([flags[i.index(flags.len())].clone(), val]),
                    2 => v.push(all[i.index(all.len())].clone()),
                    _ => v.push(val),
                }
            }
            v
        })
}

fn trace_args(c: &cli::Command) -> Option<&TraceArgs> {
    match c {
        cli::Command::Watch(w) => Some(&w.trace),
        cli::Command::Attach(a) => Some(&a.trace),
        cli::Command::Audit(a) => Some(&a.trace),
        cli::Command::Record(r) => Some(&r.trace),
        cli::Command::Serve(s) => Some(&s.trace),
        _ => None,
    }
}

/// Runs the real binary in a scratch directory; (exit code, stderr). Panics on a signal or
/// after `limit`.
fn run(args: &[String], limit: Duration) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(gdr_trace())
        .args(&args[1..])
        .current_dir(dir.path())
        .env_remove("CUFILE_ENV_PATH_JSON")
        .env_remove("NCCL_NET_GDR_LEVEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let code = status.code().unwrap_or_else(|| panic!("{args:?} ended by a signal: {status}\n{err}"));
    (code, err)
}

#[test]
fn the_clap_definition_is_consistent() {
    Cli::command().debug_assert();
    assert!(vocabulary().iter().any(|(c, f)| c == "watch" && f.contains(&"--duration".to_string())));
}

/// The values the fuzz found taking the trace loop down (Duration::from_secs_f64 panics on
/// them) are refused when parsed, with the option named.
#[test]
fn seconds_out_of_range_are_refused_by_name() {
    for (args, what) in [
        (&["watch", "--duration", "inf"][..], "--duration"),
        (&["watch", "--duration", "1e300"], "--duration"),
        (&["watch", "--duration", "0"], "--duration"),
        (&["attach", "1", "--interval=-1"], "--interval"),
        (&["serve", "--interval", "nan"], "--interval"),
        (&["doctor", "--duration", "1e30"], "--duration"),
    ] {
        let e = Cli::try_parse_from(std::iter::once("gdr-trace").chain(args.iter().copied())).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{args:?}");
        assert!(e.to_string().contains(what), "{args:?}: {e}");
    }
    let ok = Cli::try_parse_from(["gdr-trace", "watch", "--duration", "1e9", "--interval", "0"]).unwrap();
    assert_eq!(trace_args(&ok.command).unwrap().duration, Some(MAX_SECS));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Parsing any words: a command whose times are in range, or a refusal with exit 2 (help
    /// and version, asked for, exit 0).
    #[test]
    fn any_arguments_parse_in_range_or_are_refused_with_exit_2(args in argv()) {
        match Cli::try_parse_from(&args) {
            Ok(c) => {
                if let Some(t) = trace_args(&c.command) {
                    prop_assert!((0.0..=MAX_SECS).contains(&t.interval), "{args:?}: {t:?}");
                    prop_assert!(t.duration.is_none_or(|d| d > 0.0 && d <= MAX_SECS), "{args:?}: {t:?}");
                }
            }
            Err(e) => {
                prop_assert_eq!(e.exit_code(), if e.use_stderr() { 2 } else { 0 }, "{:?}: {}", args, e);
                prop_assert!(!e.to_string().trim().is_empty());
            }
        }
    }
}

proptest! {
    // Each case is a process: few of them.
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// The binary with any words, where they do not start a trace: exit 0, 1 or 2, never a
    /// panic or a signal; a refusal says why.
    #[test]
    fn the_binary_ends_cleanly_on_any_arguments(args in argv()) {
        let parsed = Cli::try_parse_from(&args);
        prop_assume!(!parsed.as_ref().is_ok_and(|c| c.traces()));
        let (code, err) = run(&args, Duration::from_secs(60));
        prop_assert!(matches!(code, 0..=2), "{:?}: exit {}\n{}", args, code, err);
        prop_assert!(!err.contains("panicked"), "{:?}: {}", args, err);
        if code == 2 {
            prop_assert!(!err.trim().is_empty(), "{:?}: exit 2 without a word", args);
        }
    }
}
