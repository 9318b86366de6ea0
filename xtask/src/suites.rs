//! Reading test runs: turns what `cargo test` (or a test executable in the VM) prints into one
//! result per suite, so `cargo xtask test` can end with one line per suite whatever failed.
//!
//! A suite starts at a cargo-style `Running <what> (<executable>)` or `Doc-tests <crate>` line
//! and ends at its `test result:` line. A suite that starts and never prints a result crashed
//! (or was killed); it counts as one failure. An optional `GDR-SUITE-RC <n>` line right after a
//! suite (the VM script prints one) marks it failed when its exit code was not 0.

use std::time::Duration;

/// Printed by the VM script after each suite with the suite's exit code.
pub const RC_MARK: &str = "GDR-SUITE-RC ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    pub name: String,
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// A `test result:` line was seen.
    pub finished: bool,
    /// Non-zero exit code reported after the suite, if any.
    pub rc: Option<i32>,
    /// What its tests skipped: the `SKIP <test>: <reason>` lines (tests/harness.rs `skip`).
    pub skips: Vec<String>,
}

impl Suite {
    fn new(name: String) -> Self {
        Suite { name, passed: 0, failed: 0, ignored: 0, finished: false, rc: None, skips: vec![] }
    }
    pub fn ok(&self) -> bool {
        self.finished && self.failed == 0 && self.rc.unwrap_or(0) == 0
    }
    /// Failures counted for the closing line: a crashed suite counts as one.
    pub fn failures(&self) -> u64 {
        if self.ok() {
            0
        } else {
            self.failed.max(1)
        }
    }
}

/// Collects suites from lines as they arrive.
#[derive(Debug, Default)]
pub struct Collector {
    pub suites: Vec<Suite>,
}

impl Collector {
    pub fn line(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("Running ") {
            self.suites.push(Suite::new(suite_name(rest)));
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            self.suites.push(Suite::new(format!("{} (doc-tests)", krate.trim())));
        } else if let Some(rest) = t.strip_prefix("test result: ") {
            if let Some(s) = self.suites.last_mut().filter(|s| !s.finished) {
                s.finished = true;
                s.passed = count(rest, "passed");
                s.failed = count(rest, "failed");
                s.ignored = count(rest, "ignored");
            }
        } else if let Some(skip) = t.strip_prefix("SKIP ") {
            if let Some(s) = self.suites.last_mut() {
                s.skips.push(skip.to_string());
            }
        } else if let Some(rc) = t.strip_prefix(RC_MARK) {
            if let (Some(s), Ok(rc)) = (self.suites.last_mut(), rc.trim().parse::<i32>()) {
                s.rc = Some(rc);
            }
        }
    }

    pub fn feed(&mut self, text: &str) {
        text.lines().for_each(|l| self.line(l));
    }
}

/// `unittests src/lib.rs (target/debug/deps/gdr_trace-0123abcd)` → `gdr_trace unittests src/lib.rs`;
/// `tests/host.rs (target/debug/deps/host-0123abcd)` → `host tests/host.rs`.
fn suite_name(rest: &str) -> String {
    let (what, exe) = match rest.rsplit_once(" (") {
        Some((what, exe)) => (what.trim(), exe.trim_end_matches(')')),
        None => (rest.trim(), ""),
    };
    let file = exe.rsplit('/').next().unwrap_or("");
    let stem = match file.rsplit_once('-') {
        Some((stem, hash)) if hash.len() >= 8 && hash.chars().all(|c| c.is_ascii_hexdigit()) => stem,
        _ => file,
    };
    if stem.is_empty() {
        what.to_string()
    } else {
        format!("{stem} {what}")
    }
}

/// The number before `word` in `ok. 7 passed; 0 failed; 2 ignored; ...`.
fn count(result: &str, word: &str) -> u64 {
    result
        .split(';')
        .filter_map(|part| {
            let mut it = part.split_whitespace().rev();
            let w = it.next()?;
            let n = it.next()?;
            (w == word).then(|| n.parse().ok()).flatten()
        })
        .next()
        .unwrap_or(0)
}

/// One group of suites (a cargo run, or one VM boot) with its wall time and, if the run
/// itself broke (cargo could not build, the VM did not boot), why.
#[derive(Debug)]
pub struct Group {
    pub name: String,
    pub suites: Vec<Suite>,
    pub took: Duration,
    /// The run's own exit code was non-zero, or it could not run at all.
    pub broken: Option<String>,
}

impl Group {
    pub fn ok(&self) -> bool {
        self.broken.is_none() && self.suites.iter().all(Suite::ok)
    }
    pub fn passed(&self) -> u64 {
        self.suites.iter().map(|s| s.passed).sum()
    }
    /// Failed tests, a crashed suite as one, a broken run with no failing suite as one.
    pub fn failures(&self) -> u64 {
        let f: u64 = self.suites.iter().map(Suite::failures).sum();
        if f == 0 && self.broken.is_some() {
            1
        } else {
            f
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARGO: &str = "\
   Compiling gdr-trace v0.1.0
     Running unittests src/lib.rs (target/debug/deps/gdr_trace-0a1b2c3d4e5f6789)
running 2 tests
test a ... ok
test b ... ok
test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
     Running tests/host.rs (target/debug/deps/host-0a1b2c3d4e5f6789)
running 3 tests
test result: FAILED. 1 passed; 2 failed; 4 ignored; 0 measured; 0 filtered out; finished in 1.00s
error: test failed, to rerun pass `-p gdr-trace-tests --test host`
     Running tests/storage.rs (target/debug/deps/storage-0a1b2c3d4e5f6789)
running 10 tests
error: test failed, to rerun pass `-p gdr-trace-tests --test storage`
   Doc-tests gdr_trace
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

    #[test]
    fn one_result_per_suite_and_a_crash_is_a_failure() {
        let mut c = Collector::default();
        c.feed(CARGO);
        let names: Vec<_> = c.suites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gdr_trace unittests src/lib.rs",
                "host tests/host.rs",
                "storage tests/storage.rs",
                "gdr_trace (doc-tests)"
            ]
        );
        let ok: Vec<_> = c.suites.iter().map(Suite::ok).collect();
        assert_eq!(ok, [true, false, false, true]);
        assert_eq!((c.suites[1].passed, c.suites[1].failed, c.suites[1].ignored), (1, 2, 4));
        assert!(!c.suites[2].finished, "no result line: crashed");
        assert_eq!(c.suites.iter().map(Suite::failures).sum::<u64>(), 3);
    }

    #[test]
    fn vm_exit_code_marks_a_suite_failed() {
        let mut c = Collector::default();
        c.feed(
            "     Running vm_gpu (/t/deps/vm_gpu-0a1b2c3d4e5f6789)\r\n\
             test result: ok. 11 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\r\n\
             GDR-SUITE-RC 101\r\n\
             \x20    Running vm (/t/deps/vm-0a1b2c3d4e5f6789)\n\
             test result: ok. 5 passed; 0 failed; 0 ignored\n\
             GDR-SUITE-RC 0\n",
        );
        assert_eq!(c.suites.len(), 2);
        assert_eq!(c.suites[0].name, "vm_gpu vm_gpu");
        assert!(!c.suites[0].ok(), "exit code 101 after an ok result line");
        assert!(c.suites[1].ok());
        assert_eq!(c.suites[1].passed, 5);
    }

    #[test]
    fn skips_are_kept_with_their_suite_and_reason() {
        let mut c = Collector::default();
        c.feed(
            "     Running tests/serve_storage.rs (target/debug/deps/serve_storage-0a1b2c3d4e5f6789)\n\
             running 2 tests\n\
             SKIP serve_storage: cold-file misses: 4096 bytes of the cold file were cached\r\n\
             test result: ok. 2 passed; 0 failed; 0 ignored\n\
             \x20    Running tests/host.rs (target/debug/deps/host-0a1b2c3d4e5f6789)\n\
             test result: ok. 1 passed; 0 failed; 0 ignored\n",
        );
        assert_eq!(
            c.suites[0].skips,
            ["serve_storage: cold-file misses: 4096 bytes of the cold file were cached"]
        );
        assert!(c.suites[0].ok(), "a skip is no failure");
        assert!(c.suites[1].skips.is_empty());
    }

    #[test]
    fn a_broken_run_without_suites_counts_as_one_failure() {
        let g = Group { name: "x".into(), suites: vec![], took: Duration::ZERO, broken: Some("boot".into()) };
        assert!(!g.ok());
        assert_eq!(g.failures(), 1);
    }
}
