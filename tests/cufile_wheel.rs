//! NVIDIA's own libcufile.so.0, from the pinned `nvidia-cufile-cu12` wheel that `cargo xtask
//! setup` unpacks under target/ (tests never download it): every hooked cuFile symbol is in it
//! and every export that moves data is hooked; the `CUfileOpError` names gdr-trace prints are
//! the wheel's cufile.h; and a process that loads it from a wheel-like directory and calls
//! `cuFileDriverOpen` (which fails: no libcuda here) shows that call with its error, under
//! `attach PID` and with `--libcufile`. Host tests (uprobes); run as root, one at a time.

mod storage_util;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use gdr_trace::{
    events::cufile_errors::CUFILE_ERRORS,
    hooks::{Library, Programs, CUFILE_NOT_HOOKED, HOOKS},
};
use gdr_trace_tests::{gdr_trace, Tracer, Workload};
use object::{Object, ObjectSymbol};
use serde_json::Value;
use storage_util::*;

/// The pin `cargo xtask setup` installs: the one requirement line of xtask/cufile-wheel.txt,
/// (name, version).
fn pin() -> (String, String) {
    let text =
        std::fs::read_to_string(workspace().join("xtask/cufile-wheel.txt")).expect("xtask/cufile-wheel.txt");
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).expect("a pin");
    let (name, version) = line.split_once("==").unwrap_or_else(|| panic!("not name==version: {line}"));
    (name.to_string(), version.to_string())
}

/// Where setup unpacks it (xtask's `cufile_wheel_dir`): site-packages of a directory named for it.
fn wheel_dir() -> PathBuf {
    let (name, version) = pin();
    workspace().join(format!("target/wheels/{name}-{version}/site-packages"))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

/// The wheel's `site-packages/nvidia/cufile`; a clear failure when setup has not run.
fn wheel() -> PathBuf {
    let dir = wheel_dir().join("nvidia/cufile");
    assert!(
        dir.join("lib/libcufile.so.0").is_file(),
        "NVIDIA's cuFile wheel ({:?}) is not installed at {}: run `cargo xtask setup`",
        pin(),
        dir.display()
    );
    dir
}

fn nvidia_lib() -> String {
    wheel().join("lib/libcufile.so.0").display().to_string()
}

/// SHA-256 of `path` as a wheel's RECORD writes it (URL-safe base64, no padding).
fn record_hash(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().expect("run sha256sum");
    let hex = String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("a digest").to_string();
    let bytes: Vec<u8> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut b64 = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            b64.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    b64
}

/// The wheel under target/wheels is the pinned one, and the libcufile.so.0 this suite loads is
/// the file that wheel installed (its RECORD's hash), not another copy left there.
#[test]
fn the_installed_wheel_is_the_pinned_one() {
    let (name, version) = pin();
    let lib = PathBuf::from(nvidia_lib());
    let info = wheel_dir().join(format!("{}-{version}.dist-info", name.replace('-', "_")));
    let meta =
        std::fs::read_to_string(info.join("METADATA")).unwrap_or_else(|e| panic!("{}: {e}", info.display()));
    assert!(meta.lines().any(|l| l == format!("Name: {name}")), "{meta:.300}");
    assert!(meta.lines().any(|l| l == format!("Version: {version}")), "pinned {version}: {meta:.300}");
    let record = std::fs::read_to_string(info.join("RECORD")).unwrap();
    let row = record
        .lines()
        .find(|l| l.starts_with("nvidia/cufile/lib/libcufile.so.0,"))
        .expect("libcufile in RECORD");
    let size = std::fs::metadata(&lib).unwrap().len();
    assert_eq!(
        row,
        format!("nvidia/cufile/lib/libcufile.so.0,sha256={},{size}", record_hash(&lib)),
        "{}",
        lib.display()
    );
}

/// The `cuFile*` functions the library defines and exports.
fn exports(lib: &str) -> BTreeSet<String> {
    let data = std::fs::read(lib).expect("read libcufile.so.0");
    let file = object::File::parse(&*data).expect("libcufile.so.0 is ELF");
    file.dynamic_symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| n.starts_with("cuFile"))
        .collect()
}

#[test]
fn every_hooked_cufile_function_is_in_nvidias_library_and_every_export_is_classified() {
    let exported = exports(&nvidia_lib());
    assert!(exported.len() >= 30, "too few cuFile exports: {exported:?}");
    let hooked: BTreeSet<String> = HOOKS
        .iter()
        .filter(|h| matches!(h.programs, Programs::UserReturn { lib: Library::Cufile, .. }))
        .map(|h| h.function.to_string())
        .collect();
    let missing: Vec<&String> = hooked.iter().filter(|f| !exported.contains(*f)).collect();
    assert!(missing.is_empty(), "hooked but not in NVIDIA's libcufile.so.0: {missing:?}");
    let left_out: BTreeSet<String> = CUFILE_NOT_HOOKED.iter().map(|(f, _)| f.to_string()).collect();
    assert!(hooked.is_disjoint(&left_out), "both hooked and left out: {:?}", hooked.intersection(&left_out));
    let unclassified: Vec<&String> =
        exported.iter().filter(|f| !hooked.contains(*f) && !left_out.contains(*f)).collect();
    assert!(
        unclassified.is_empty(),
        "exports of NVIDIA's libcufile.so.0 neither hooked nor listed as left out (hooks/cufile.rs): {unclassified:?}"
    );
    let stale: Vec<&String> = left_out.iter().filter(|f| !exported.contains(*f)).collect();
    assert!(stale.is_empty(), "listed as left out but not exported: {stale:?}");
    // The I/O surface of the issue: every entry point that moves data or changes what can.
    for f in [
        "cuFileRead",
        "cuFileWrite",
        "cuFileReadAsync",
        "cuFileWriteAsync",
        "cuFileBatchIOSetUp",
        "cuFileBatchIOSubmit",
        "cuFileBatchIOGetStatus",
        "cuFileBatchIOCancel",
        "cuFileBatchIODestroy",
        "cuFileStreamRegister",
        "cuFileStreamDeregister",
        "cuFileHandleRegister",
        "cuFileHandleDeregister",
        "cuFileBufRegister",
        "cuFileBufDeregister",
        "cuFileDriverOpen",
        "cuFileDriverClose",
        "cuFileDriverClose_v2",
    ] {
        assert!(hooked.contains(f), "{f} is not hooked");
    }
}

/// `CUFILE_OP(CUFILEOP_BASE_ERR + n, NAME, description)` rows of cufile.h.
fn header_errors(h: &str) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    for row in h.split("CUFILE_OP(").skip(1) {
        let Some(body) = row.split(')').next() else { continue };
        let parts: Vec<&str> = body.splitn(3, ',').map(str::trim).collect();
        if parts.len() != 3 || parts[1] == "name" {
            continue; // the macro's own definition
        }
        let code = match parts[0].split_once('+') {
            Some((_, n)) => 5000 + n.trim().parse::<i64>().expect("error number"),
            None => parts[0].parse().expect("error number"),
        };
        out.push((code, parts[1].to_string(), parts[2].to_string()));
    }
    out
}

#[test]
fn cufile_error_names_are_the_wheels_cufile_h() {
    let h = std::fs::read_to_string(wheel().join("include/cufile.h")).expect("the wheel ships cufile.h");
    let theirs = header_errors(&h);
    assert!(theirs.len() > 30, "parsed only {} errors from cufile.h", theirs.len());
    let ours: Vec<(i64, String, String)> =
        CUFILE_ERRORS.iter().map(|(c, n, d)| (*c, n.to_string(), d.to_string())).collect();
    assert_eq!(ours, theirs, "events/cufile_errors.rs and the wheel's cufile.h disagree");
}

/// The storage workload on NVIDIA's library: `cufile-open` (cuFileDriverOpen) after "go",
/// run in a scratch directory (the library writes cufile.log there). The steps end with a
/// hold, released once the tracer has printed the call: the library is named from the live
/// process's mappings (a process gone before its record is read has none to name).
fn nvidia_workload(cwd: &Path, steps: &[&str]) -> Workload {
    nvidia_workload_env(cwd, steps, &[])
}

fn nvidia_workload_env(cwd: &Path, steps: &[&str], env: &[(&str, &str)]) -> Workload {
    let mut cmd = Command::new(workload_bin());
    cmd.arg("go").args(steps).env("GDR_LIBCUFILE", nvidia_lib()).envs(env.iter().copied()).current_dir(cwd);
    let w = Workload::start(cmd);
    let l = w.out.next(Duration::from_secs(60), "the workload's ready line").expect("workload exited");
    assert!(l.contains("\"ready\""), "{l}");
    w
}

/// What the workload printed: its JSON lines (NVIDIA's library prints its own complaints to
/// stdout too: "dlopen error libcuda.so.1 ...").
fn finish(w: &mut Workload) -> Vec<Value> {
    let lines = w.out.rest(Duration::from_secs(120), "workload output");
    assert!(w.child.wait().expect("wait workload").success(), "workload failed: {lines:?}");
    lines.iter().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON")).collect()
}

/// A `gds_io` record of `op` (cuFileDriverClose also matches its `_v2`).
fn call_is(r: &Value, op: &str) -> bool {
    r["event"] == "gds_io" && r["op"].as_str().is_some_and(|o| o.starts_with(op))
}

fn check_driver_open(recs: &[Value], truth: &[Value], pid: u32) {
    let t = truth.iter().find(|t| t["step"] == "cufile_driver_open").expect("the workload opened cuFile");
    let err = t["err"].as_i64().unwrap();
    assert_ne!(err, 0, "cuFileDriverOpen succeeded without libcuda: {t}");
    let opens: Vec<&Value> =
        by(recs, "gds_io").into_iter().filter(|g| g["op"] == "cuFileDriverOpen").collect();
    assert_eq!(opens.len(), 1, "{opens:#?}");
    let g = opens[0];
    let (_, name, text) = CUFILE_ERRORS.iter().find(|(c, ..)| *c == err).expect("a cufile.h error");
    assert_eq!((u(&g["pid"]), g["ret"].as_i64()), (pid as u64, Some(err)), "{g}");
    assert_eq!((&g["error"], &g["error_text"]), (&Value::from(*name), &Value::from(*text)), "{g}");
    for k in ["fd", "path", "handle", "length", "file_offset", "buf"] {
        assert!(g.get(k).is_none(), "cuFileDriverOpen has no {k}: {g}");
    }
    assert!(g["verdict"].is_null(), "{g}");
    let lib = g["library"].as_str().unwrap_or_default();
    assert!(lib.ends_with("site-packages/nvidia/cufile/lib/libcufile.so.0"), "library {lib:?}: {g}");
}

#[test]
fn nvidias_library_driver_open_error_is_shown_under_attach() {
    let dir = scratch();
    for extra in [vec![], vec!["--libcufile".to_string(), nvidia_lib()]] {
        let mut w = nvidia_workload(dir.path(), &["cufile-open", "cufile-close", "hold"]);
        let pid = w.pid();
        let mut args: Vec<String> =
            ["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"]
                .map(String::from)
                .to_vec();
        args.extend(extra.iter().cloned());
        let mut tracer = Tracer::spawn(&args);
        assert_eq!(
            tracer.attached("cuFileDriverOpen").as_deref(),
            Some("uprobe+uretprobe"),
            "{}",
            tracer.hooks
        );
        w.go();
        let (mut truth, mut recs) = w.hold_until_traced(&mut tracer, |r| call_is(r, "cuFileDriverClose"));
        truth.extend(finish(&mut w));
        recs.extend(tracer.finish());
        check_driver_open(&recs, &truth, pid);
        // The old name jumps to cuFileDriverClose_v2 inside the library: one call, as made.
        let closes: Vec<&Value> = by(&recs, "gds_io")
            .into_iter()
            .filter(|g| g["op"].as_str().unwrap().starts_with("cuFileDriverClose"))
            .collect();
        let t = truth.iter().find(|t| t["step"] == "cufile_driver_close").expect("closed");
        assert_eq!(closes.len(), 1, "{closes:#?}");
        assert_eq!((&closes[0]["op"], &closes[0]["ret"]), (&Value::from("cuFileDriverClose"), &t["err"]));
    }
}

/// The library dlopened from the wheel directory only after tracing started: `--libcufile`
/// hooks the file itself, so the process's later mapping of it is traced; without it, the
/// loader's library follower finds the copy when it is mapped (the workload holds its first
/// call until the tracer says the copy is hooked) and says so in a `library_copy` record.
#[test]
fn nvidias_library_dlopened_after_tracing_started_is_traced() {
    let dir = scratch();
    let lib = nvidia_lib();
    for with_override in [true, false] {
        let (env, steps): (&[(&str, &str)], &[&str]) = if with_override {
            (&[("GDR_CUFILE_DLOPEN_LATE", "1")], &["cufile-open", "hold"])
        } else {
            (&[("GDR_CUFILE_LATE", "1")], &["dlopen", "hold", "cufile-open", "hold"])
        };
        let mut w = nvidia_workload_env(dir.path(), steps, env);
        let pid = w.pid();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(!maps.contains("libcufile"), "the workload mapped libcufile before tracing started");
        let mut args: Vec<String> =
            ["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"]
                .map(String::from)
                .to_vec();
        if with_override {
            args.extend(["--libcufile".to_string(), lib.clone()]);
        }
        let mut tracer = Tracer::spawn(&args);
        w.go();
        let (mut truth, mut recs) = (Vec::new(), Vec::new());
        if !with_override {
            let hooked = |r: &Value| {
                r["event"] == "library_copy"
                    && r["state"] == "attached"
                    && r["path"].as_str().is_some_and(|p| p.ends_with("nvidia/cufile/lib/libcufile.so.0"))
            };
            let (t, r) = w.hold_until_traced(&mut tracer, hooked);
            truth.extend(t);
            recs.extend(r);
        }
        let (t, r) = w.hold_until_traced(&mut tracer, |r| call_is(r, "cuFileDriverOpen"));
        truth.extend(t);
        recs.extend(r);
        truth.extend(finish(&mut w));
        recs.extend(tracer.finish());
        check_driver_open(&recs, &truth, pid);
        if !with_override {
            let copies = by(&recs, "library_copy");
            assert!(
                copies.iter().any(|c| c["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("nvidia/cufile/lib/libcufile.so.0"))),
                "no library_copy for the wheel's library: {copies:#?}"
            );
        }
    }
}

#[test]
fn nvidias_library_driver_open_error_reads_as_words_in_text() {
    let dir = scratch();
    let mut w = nvidia_workload(dir.path(), &["cufile-open", "hold"]);
    let pid = w.pid();
    let mut tracer = Command::new(gdr_trace())
        .args(["attach", &pid.to_string(), "--duration", "120", "--interval", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn gdr-trace");
    let out = gdr_trace_tests::Lines::new(tracer.stdout.take().unwrap());
    out.next(Duration::from_secs(60), "gdr-trace's first line").expect("gdr-trace printed nothing");
    w.go();
    let (mut truth, held) = w.until_hold();
    assert!(held, "the workload ended before it held: {truth:?}");
    // Its call in words, while the process (whose mappings name the library) is still there.
    let mut text = Vec::new();
    while !text.last().is_some_and(|l: &String| l.contains("cuFileDriverOpen")) {
        text.push(out.next(Duration::from_secs(60), "the cuFileDriverOpen line").expect("gdr-trace ended"));
    }
    w.go();
    truth.extend(finish(&mut w));
    text.extend(out.rest(Duration::from_secs(120), "gdr-trace to finish"));
    let text = text.join("\n");
    assert!(tracer.wait().unwrap().success());
    let err = truth.iter().find(|t| t["step"] == "cufile_driver_open").unwrap()["err"].as_i64().unwrap();
    let (_, name, words) = CUFILE_ERRORS.iter().find(|(c, ..)| *c == err).unwrap();
    let line = text.lines().find(|l| l.contains("cuFileDriverOpen")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&format!("ret {err} {name} ({words})")), "{line}");
    assert!(
        !line.contains(" fd ") && !line.contains(" len "),
        "a driver open has no descriptor or size: {line}"
    );
    assert!(line.contains("site-packages/nvidia/cufile/lib/libcufile.so.0"), "{line}");
}
