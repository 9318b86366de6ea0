//! Helpers shared by gdr-trace's integration tests: find the binaries, run the tracer next to
//! workloads, read NDJSON.

use std::{
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{Child, ChildStdout, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use serde_json::Value;

pub mod kmods;
pub mod prom;
pub mod stash_flood;
pub mod terminal;
pub mod wait;

pub use wait::wait_bounded;

/// Parts of tests skipped in this test process (see [`skip`]).
pub static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Skips what `test` cannot check here, said and counted, never a silent pass: prints
/// `SKIP <test>: <reason>` on stderr past the test harness's capture (shown even when the test
/// passes), counts it in [`SKIPS`]; `cargo xtask test` lists and totals these lines per suite.
/// Only for what the environment may lack; where it must have it, assert instead.
pub fn skip(test: &str, reason: &str) {
    let line = format!("SKIP {test}: {reason}\n");
    SKIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// target/<profile>/ of the running test executable (it lives in target/<profile>/deps/).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

fn binary(env: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return p.into();
    }
    let p = target_dir().join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo xtask test` (it builds the binaries first) or set {env}",
        p.display()
    );
    p
}

/// The `gdr-trace` binary (`cargo build` puts it next to the test executables' deps/ dir).
/// Whether the running kernel makes uprobe_multi links (Linux 6.6+ with uprobes): its symbol
/// table has the link's attach function. What tests expect copies to be hooked through.
pub fn kernel_has_uprobe_multi() -> bool {
    std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|k| k.lines().any(|l| l.split_whitespace().nth(2) == Some("bpf_uprobe_multi_link_attach")))
}

pub fn gdr_trace() -> PathBuf {
    binary("GDR_TRACE_BIN", "gdr-trace")
}

/// The `gdr-trace` binary at a path any user can reach, for tests that run it as another user
/// (nobody): a checkout inside a 0700 directory (a home) would give them "Permission denied".
/// A hard link (else a copy) in a fresh 0755 directory of the temp dir, made once per test
/// process; `create` (not `create_all`) fails on a directory someone made there before us.
pub fn gdr_trace_for_anyone() -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let src = gdr_trace();
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("gdr-trace-tests-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o755).create(&dir).expect("a directory for the shared binary");
        let dst = dir.join("gdr-trace");
        if std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).expect("copy gdr-trace where any user can reach it");
        }
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).expect("chmod 755");
        dst
    })
    .clone()
}

/// The MR workload (tests/workload).
pub fn workload() -> PathBuf {
    binary("GDR_WORKLOAD_BIN", "gdr-workload")
}

/// Parses NDJSON, failing the test on a bad line (the tracer must only print JSON).
pub fn ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

pub fn events<'a>(records: &'a [Value], event: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["event"] == event).collect()
}

/// Lines from a child's stdout, read on a thread so the test can wait with a deadline.
pub struct Lines {
    rx: mpsc::Receiver<String>,
}

impl Lines {
    pub fn new(out: ChildStdout) -> Self {
        Self::from_reader(out)
    }

    pub fn new_stderr(err: std::process::ChildStderr) -> Self {
        Self::from_reader(err)
    }

    fn from_reader<R: std::io::Read + Send + 'static>(out: R) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { rx }
    }

    /// Next line, or None at EOF; panics after `timeout`.
    pub fn next(&self, timeout: Duration, what: &str) -> Option<String> {
        match self.poll(timeout) {
            Polled::Line(l) => Some(l),
            Polled::End => None,
            Polled::Nothing => panic!("timed out after {timeout:?} waiting for {what}"),
        }
    }

    /// The stream's opening: the header record (checked), then the hooks record (returned);
    /// None at EOF. Panics after `timeout` for either.
    pub fn hooks_record(&self, timeout: Duration) -> Option<String> {
        let header = self.next(timeout, "the header record")?;
        assert!(header.contains("\"event\":\"header\""), "the first record is not the header: {header}");
        self.next(timeout, "the hooks record")
    }

    /// The next line within `timeout`, the end, or nothing yet (never a panic).
    pub fn poll(&self, timeout: Duration) -> Polled {
        match self.rx.recv_timeout(timeout) {
            Ok(l) => Polled::Line(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => Polled::End,
            Err(mpsc::RecvTimeoutError::Timeout) => Polled::Nothing,
        }
    }

    /// Everything until EOF (the deadline guards against a hang, it measures nothing).
    pub fn rest(&self, timeout: Duration, what: &str) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut out = vec![];
        while let Some(l) = self.next(end.saturating_duration_since(Instant::now()), what) {
            out.push(l);
        }
        out
    }
}

/// What [`Lines::poll`] found.
pub enum Polled {
    Line(String),
    End,
    Nothing,
}

/// A workload process waiting on stdin for "go".
pub struct Workload {
    pub child: Child,
    pub out: Lines,
}

impl Workload {
    pub fn spawn(args: &[&str]) -> Self {
        let mut cmd = Command::new(workload());
        cmd.arg("--wait-stdin").args(args);
        Self::start(cmd)
    }

    /// Any program, started only after "go": a shell that waits on stdin, then execs it, so
    /// the PID a tracer attaches to is the program's own.
    pub fn spawn_exec(program: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "read _; exec \"$0\" \"$@\"", program]).args(args);
        cmd.envs(env.iter().copied());
        Self::start(cmd)
    }

    /// A program that reads "go" from stdin itself.
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn the workload");
        let out = Lines::new(child.stdout.take().expect("stdout"));
        Self { child, out }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn go(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("write go");
        stdin.flush().expect("flush");
    }

    /// Reads the workload's records until it holds (gdrsim-workload's `{"action":"hold"}` after
    /// `--hold-stdin`, the storage workload's `{"step":"hold"}`), that record included; lines
    /// that are not JSON (a library's own complaints on stdout) are skipped. The flag is false
    /// when the workload ended without holding (it failed first).
    pub fn until_hold(&mut self) -> (Vec<Value>, bool) {
        let mut truth = Vec::new();
        while let Some(l) = self.out.next(Duration::from_secs(60), "the workload's records") {
            let Ok(v) = serde_json::from_str::<Value>(&l) else { continue };
            let holding = v["action"] == "hold" || v["step"] == "hold";
            truth.push(v);
            if holding {
                return (truth, true);
            }
        }
        (truth, false)
    }

    /// For a workload told to go that holds (see [`Workload::until_hold`]): reads its records
    /// until it holds, waits for `t` to print a record that `seen` accepts (e.g. the tracer
    /// reads /proc/PID at a process's first registration, so the process must still be there;
    /// a library copy must be hooked before its first call), then lets it go on. A handshake,
    /// not a sleep. Returns the workload's records read so far and the tracer's; a workload
    /// that ends without holding (it failed first) returns at its end.
    pub fn hold_until_traced(
        &mut self,
        t: &mut Tracer,
        seen: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, Vec<Value>) {
        let (truth, held) = self.until_hold();
        if !held {
            return (truth, Vec::new());
        }
        let recs = t.until("the tracer's record of the workload", &seen);
        self.go();
        (truth, recs)
    }

    /// Waits for exit; returns the workload's own JSON records.
    pub fn finish(&mut self) -> Vec<Value> {
        let lines = self.out.rest(Duration::from_secs(120), "workload output");
        let status = wait_bounded(&mut self.child, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("workload: {e}"));
        assert!(status.success(), "workload failed: {status}");
        ndjson(&lines.join("\n"))
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        wait::reap(&mut self.child);
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        wait::reap(&mut self.child);
    }
}

/// A running `gdr-trace ... --json`, ready once its `hooks` record is out.
pub struct Tracer {
    pub child: Child,
    pub out: Lines,
    pub hooks: Value,
}

impl Tracer {
    pub fn spawn(args: &[String]) -> Self {
        let mut cmd = Command::new(gdr_trace());
        cmd.args(args);
        Self::spawn_cmd(cmd)
    }

    /// A tracer started some other way (in a chroot, with fewer capabilities, ...).
    pub fn spawn_cmd(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn gdr-trace");
        let out = Lines::new(child.stdout.take().expect("stdout"));
        let mut next = |what: &str| {
            // A start is 8-11 s in the emulated VM; minutes where the kernel is slow to attach.
            let limit = Duration::from_secs(240);
            let line = match out.poll(limit) {
                Polled::Line(l) => l,
                Polled::End => panic!("gdr-trace exited before attaching: {:?}", child.wait()),
                // Where its start is stuck, from the kernel's side.
                Polled::Nothing => panic!("no {what}: {}", wait::stuck(child.id(), limit)),
            };
            let v: Value = serde_json::from_str(&line).expect("records are JSON");
            v
        };
        // The stream's header (schema, version, host, clock), then how the hooks attached.
        let header = next("gdr-trace's header record");
        assert_eq!(header["event"], "header", "first record: {header}");
        let hooks = next("gdr-trace's hooks record");
        assert_eq!(hooks["event"], "hooks", "second record: {hooks}");
        Self { child, out, hooks }
    }

    /// How a hook attached ("fexit", "kprobe+kretprobe", ...), or None.
    pub fn attached(&self, hook: &str) -> Option<String> {
        self.hooks["hooks"]
            .as_array()
            .expect("hooks array")
            .iter()
            .find(|h| h["hook"] == hook)
            .and_then(|h| h["attached"].as_str().map(str::to_string))
    }

    /// Reads records until one satisfies `seen` (a handshake on the tracer's own output);
    /// returns every record read, that one included. Panics after a minute without it.
    pub fn until(&mut self, what: &str, seen: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut recs = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let l = match self.out.poll(left) {
                Polled::Line(l) => l,
                Polled::Nothing => {
                    panic!("gdr-trace printed no {what} within a minute; it printed {recs:#?}")
                }
                Polled::End => panic!("gdr-trace ended before printing {what}; it printed {recs:#?}"),
            };
            let r: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            let done = seen(&r);
            recs.push(r);
            if done {
                return recs;
            }
        }
    }

    /// SIGTERM (a clean stop: the tracer drains its ring and closes every correlation), then
    /// every record until it exits, as [`Tracer::finish`]. No test waits for a duration to end.
    pub fn terminate(&mut self) -> Vec<Value> {
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
        self.finish()
    }

    /// Waits for the tracer to end by itself; returns every record after `hooks`.
    pub fn finish(&mut self) -> Vec<Value> {
        let lines = self.out.rest(Duration::from_secs(120), "gdr-trace to finish");
        let status = wait_bounded(&mut self.child, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("gdr-trace: {e}"));
        assert!(status.success(), "gdr-trace failed: {status}");
        ndjson(&lines.join("\n"))
    }
}

/// `gdr-trace probes --json` with `extra` arguments.
pub fn probes_json(extra: &[&str]) -> Value {
    let out = Command::new(gdr_trace()).arg("probes").arg("--json").args(extra).output().expect("run probes");
    assert!(out.status.success(), "probes failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("probes --json is JSON")
}

/// The row of `name` in a `hooks` record (probes --json, or a trace's first line).
pub fn hook<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["hooks"]
        .as_array()
        .expect("hooks array")
        .iter()
        .find(|h| h["hook"] == name)
        .unwrap_or_else(|| panic!("no hook {name}: {v}"))
}

/// Sets `kernel.perf_event_paranoid` and puts the old value back when dropped.
pub struct Paranoid(String);

pub const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

impl Paranoid {
    pub fn set(level: &str) -> Self {
        let old = std::fs::read_to_string(PARANOID).unwrap().trim().to_string();
        std::fs::write(PARANOID, level).unwrap();
        Self(old)
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = std::fs::write(PARANOID, &self.0);
    }
}
