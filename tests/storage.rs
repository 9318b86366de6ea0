//! Storage path on this machine's kernel (host tests: syscall tracepoints, the page-cache
//! tracepoint and uprobes work here; fentry and kprobes may not). Real files on a filesystem
//! with a page cache and O_DIRECT, the test libcufile (no nvidia-fs here: compatibility mode).
//! Run as root, one at a time (`cargo xtask test`).

#[path = "storage/budget.rs"]
mod budget;
#[path = "storage/cufile_compat.rs"]
mod cufile_compat;
mod storage_util;

use std::{path::Path, process::Command};

use gdr_trace_tests::{gdr_trace, hook};
use serde_json::Value;
use storage_util::*;

fn probes() -> Value {
    gdr_trace_tests::probes_json(&["--libcufile", LIBCUFILE])
}

#[test]
fn probes_lists_the_storage_hooks_and_how_each_attached() {
    let v = probes();
    let cufile: Vec<&str> = gdr_trace::hooks::HOOKS
        .iter()
        .filter(|h| {
            matches!(
                h.programs,
                gdr_trace::hooks::Programs::UserReturn { lib: gdr_trace::hooks::Library::Cufile, .. }
            )
        })
        .map(|h| h.function)
        .collect();
    assert_eq!(cufile.len(), 18, "{cufile:?}");
    for name in cufile {
        let h = hook(&v, name);
        assert_eq!(h["attached"], "uprobe+uretprobe", "{h}");
        assert_eq!(h["location"], LIBCUFILE, "{h}");
    }
    // Every offset the storage programs need resolves from this kernel's BTF and formats.
    assert_eq!(v["kernel"]["storage_offsets_unknown"], serde_json::json!([]), "{}", v["kernel"]);
    let fentry_refused = v["kernel"]["fentry_unavailable"].as_str();
    for name in [
        "openat, openat2",
        "close",
        "read, pread64, readv, preadv, preadv2",
        "write, pwrite64, writev, pwritev, pwritev2",
    ] {
        let h = hook(&v, name);
        let how = h["attached"].as_str().unwrap_or_else(|| panic!("{name} must attach here: {h}"));
        let reasons = h["reasons"].to_string();
        if let Some(why) = fentry_refused {
            assert_eq!(how, "tracepoint", "{h}");
            assert!(reasons.contains(why), "why fexit was not used must be said: {reasons}");
            assert!(reasons.contains("slow path"), "the cost of syscall tracepoints is stated: {reasons}");
        } else {
            assert_eq!(how, "fexit", "fexit on the syscall where the kernel allows it: {h}");
        }
    }
    assert_eq!(hook(&v, "mm_filemap_add_to_page_cache")["attached"], "tracepoint");
    for name in ["io_uring_submit_req", "io_uring_file_get", "io_uring_complete"] {
        assert_eq!(hook(&v, name)["attached"], "tracepoint", "{}", hook(&v, name));
    }
    // nvidia-fs's functions, where loaded (module in kallsyms): BTF programs where its module has
    // BTF and fentry is allowed, else kprobes; where not loaded, each says so.
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let module_of = |f: &str| -> Option<String> {
        kallsyms.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            let (_, _, name, module) = (it.next()?, it.next()?, it.next()?, it.next()?);
            (name == f).then(|| module.trim_matches(|c| c == '[' || c == ']').to_string())
        })
    };
    let btf_programs =
        |m: &str| fentry_refused.is_none() && Path::new(&format!("/sys/kernel/btf/{m}")).exists();
    let ioctl = hook(&v, "ioctl");
    for (f, with_btf, without) in
        [("nvfs_ioctl", "fexit", "kprobe+kretprobe"), ("nvfs_io_complete", "fentry", "kprobe")]
    {
        let h = hook(&v, f);
        match module_of(f) {
            Some(m) => {
                let want = if btf_programs(&m) { with_btf } else { without };
                assert_eq!(h["attached"], want, "{f} in module {m}: {h}");
            }
            None => {
                assert!(h["attached"].is_null(), "{h}");
                assert!(h["reasons"].to_string().contains("not in /proc/kallsyms"), "{f}: {h}");
            }
        }
    }
    if module_of("nvfs_ioctl").is_some() {
        assert!(ioctl["attached"].is_null(), "{ioctl}");
        assert!(ioctl["reasons"].to_string().contains("not needed"), "the driver's own hook serves: {ioctl}");
    } else if Path::new("/dev/nvidia-fs0").exists() {
        let want = if fentry_refused.is_some() { "tracepoint" } else { "fexit" };
        assert_eq!(ioctl["attached"], want, "nvidia-fs without its symbols: the ioctl syscall: {ioctl}");
    } else {
        assert!(ioctl["attached"].is_null(), "{ioctl}");
        assert!(ioctl["reasons"].to_string().contains("no nvidia-fs here"), "{ioctl}");
    }
}

/// Cold reads fill the cache, warm reads hit it, O_DIRECT fills nothing: exact counts.
#[test]
fn page_cache_cold_warm_and_direct_reads_exact() {
    page_cache_scenario(&[]);
}

/// Reads submitted through io_uring are not system calls: the io_uring tracepoints count them.
#[test]
fn io_uring_reads_are_counted_per_file_and_registered_files_per_process() {
    uring_scenario(&[]);
}

#[test]
fn writes_and_random_reads_are_counted_per_file() {
    let dir = scratch();
    let f = dir.path().join("w.bin").display().to_string();
    let g = dir.path().join("o2.bin").display().to_string();
    let steps = [
        s(&["write", &f, "64K", "16"]),
        s(&["read", &f, "4K", "100", "random"]),
        s(&["read", &g, "4K", "4", "direct,openat2"]),
    ];
    // o2.bin is made before the trace starts: only the openat2 hook can name it.
    let r = traced(&[s(&["create", &g, "16K"])], &steps, &[]);
    let x = file(&r.recs, &f);
    assert_eq!((u(&x["writes"]), u(&x["bytes_written"])), (16, 1 << 20), "{x}");
    assert_eq!((u(&x["reads"]), u(&x["bytes_read"])), (100, 409600), "{x}");
    assert!(u(&x["seq_reads"]) < 50, "random preads are mostly not sequential: {x}");
    // Buffered writes of new pages fill the cache; the later reads find it there.
    assert!(u(&x["pages_filled"]) >= 256, "{x}");
    assert_eq!(u(&x["read_pages_filled"]), 0, "{x}");
    assert_eq!(x["cache_hit_ratio"], 1.0, "{x}");
    let sum = by(&r.recs, "storage_summary");
    let hints = sum.iter().find(|s| s["final"] == true).expect("final storage_summary")["hints"].to_string();
    assert!(
        hints.contains("4KiB random reads with 100% cache hits: GDS would bypass a cache that is working"),
        "{hints}"
    );
    // Opened through openat2 and closed between snapshots: its name comes from that hook.
    let y = file(&r.recs, &g);
    assert_eq!((u(&y["reads"]), u(&y["direct_bytes"])), (4, 16384), "{y}");
}

/// Another process's I/O never appears under the attached PID.
#[test]
fn attach_reports_only_the_target_process() {
    let dir = scratch();
    let (a, b) =
        (dir.path().join("a.bin").display().to_string(), dir.path().join("b.bin").display().to_string());
    let mut other = storage_workload(
        &[s(&["create", &b, "256K"])],
        &[s(&["read", &b, "4K", "64"]), s(&["cufile-read", &b, "64K", "0"])],
        &[],
    );
    let mut target = storage_workload(
        &[s(&["create", &a, "256K"])],
        &[s(&["read", &a, "4K", "64"]), s(&["cufile-read", &a, "64K", "0"])],
        &[],
    );
    let args: Vec<String> =
        ["attach", &target.pid().to_string(), "--json", "--files", "--duration", "120", "--interval", "0"]
            .map(String::from)
            .to_vec();
    let mut tracer = gdr_trace_tests::Tracer::spawn(&args);
    other.go();
    target.go();
    let _ = other.finish();
    let _ = target.finish();
    let recs = tracer.finish();
    for r in &recs {
        if let Some(pid) = r["pid"].as_u64() {
            assert_eq!(pid, target.pid() as u64, "another process in the trace: {r}");
        }
        assert_ne!(r["path"], Value::from(b.clone()), "the other process's file in the trace: {r}");
    }
    assert_eq!(u(&file(&recs, &a)["bytes_read"]), (256 + 64) << 10);
    assert_eq!(by(&recs, "gds_io").iter().filter(|g| g["op"] == "cuFileRead").count(), 1);
}

#[test]
fn text_output_has_the_storage_section_and_periodic_json_summaries() {
    let dir = scratch();
    let f = dir.path().join("t.bin").display().to_string();
    let mut w = storage_workload(
        &[s(&["create", &f, "1M"])],
        &[s(&["read", &f, "4K", "256"]), s(&["cufile-read", &f, "64K", "0"])],
        &[],
    );
    let mut child = std::process::Command::new(gdr_trace())
        .args(["attach", &w.pid().to_string(), "--duration", "60", "--interval", "0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gdr-trace");
    let lines = gdr_trace_tests::Lines::new(child.stdout.take().unwrap());
    // The banner says what attached: the hooks are in place (what this host cannot tell, if
    // anything, comes before it).
    let mut first = String::new();
    while !first.starts_with("gdr-trace: kernel") {
        first =
            lines.next(std::time::Duration::from_secs(60), "gdr-trace's banner").expect("gdr-trace exited");
        assert!(
            first.starts_with("gdr-trace: kernel") || first.starts_with("! ") || first.starts_with("    "),
            "{first}"
        );
    }
    w.go();
    let _ = w.finish();
    let text = lines.rest(std::time::Duration::from_secs(120), "gdr-trace to finish").join("\n");
    assert!(child.wait().unwrap().success(), "{text}");
    for want in [
        "GDS pid",
        "cuFileRead",
        "=> gds-compat",
        "-- storage summary --",
        &f,
        "page-cache",
        "read sizes: 4KiB: 256",
        "hint: cuFile is in compatibility mode",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }

    // --interval 1 with a workload that takes longer: summaries before the final one.
    // The workload holds between its two halves until a periodic summary of the first is out.
    let steps = [s(&["read", &f, "4K", "16"]), s(&["hold"]), s(&["read", &f, "4K", "16"])];
    let mut w = storage_workload(&[], &steps, &[]);
    let args: Vec<String> =
        ["attach", &w.pid().to_string(), "--json", "--files", "--duration", "120", "--interval", "1"]
            .map(String::from)
            .to_vec();
    let mut t = gdr_trace_tests::Tracer::spawn(&args);
    w.go();
    let early = |r: &Value| r["event"] == "file_io_summary" && r["path"] == f.as_str() && r["final"] == false;
    let (_, mut recs) = w.hold_until_traced(&mut t, early);
    let _ = w.finish();
    recs.extend(t.finish());
    let sums: Vec<&Value> =
        by(&recs, "file_io_summary").into_iter().filter(|r| r["path"] == f.as_str()).collect();
    let early = sums.iter().filter(|r| r["final"] == false).count();
    assert!(early >= 1, "periodic summaries while it runs: {sums:#?}");
    assert_eq!(u(&sums.last().unwrap()["reads"]), 32);
    assert_eq!(sums.last().unwrap()["final"], true);
}

/// `record` keeps the storage report; `report` shows it again, no BPF needed.
#[test]
fn record_and_report_keep_the_storage_summary() {
    let dir = scratch();
    let f = dir.path().join("r.bin").display().to_string();
    let rec = dir.path().join("trace.ndjson").display().to_string();
    let mut w = storage_workload(&[s(&["create", &f, "256K"])], &[s(&["read", &f, "4K", "64"])], &[]);
    let pid = w.pid().to_string();
    let args: Vec<String> =
        ["record", "-o", &rec, "--pid", &pid, "--json", "--files", "--duration", "120", "--interval", "0"]
            .map(String::from)
            .to_vec();
    let mut t = gdr_trace_tests::Tracer::spawn(&args);
    w.go();
    let _ = w.finish();
    let live = t.finish();
    // Its end came from the kernel (sched_process_exit) and is kept for replay.
    let items = gdr_trace_tests::ndjson(&std::fs::read_to_string(&rec).unwrap());
    let exits: Vec<&Value> = by(&items, "exit");
    assert!(exits.iter().any(|e| e["ctx"]["pid"].as_u64() == pid.parse().ok()), "{exits:?}");
    let out = Command::new(gdr_trace()).args(["report", &rec, "--json", "--files"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let replayed = gdr_trace_tests::ndjson(&String::from_utf8_lossy(&out.stdout));
    let (l, r) = (file(&live, &f), file(&replayed, &f));
    assert_eq!((u(&r["reads"]), u(&r["bytes_read"])), (64, 256 << 10), "{r}");
    // The same but for when it was written (a live stream stamps its records).
    let unstamped = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("unix_ms");
        v
    };
    assert_eq!(unstamped(l), unstamped(r), "the replayed file summary is the live one");
    let sum = |recs: &[Value]| by(recs, "storage_summary").into_iter().filter(|s| s["final"] == true).count();
    assert_eq!((sum(&live), sum(&replayed)), (1, 1));
}

/// `watch` sees every process's file I/O but its own (reading /proc, writing its output).
#[test]
fn watch_counts_other_processes_but_not_itself() {
    let dir = scratch();
    let f = dir.path().join("wa.bin").display().to_string();
    let mut w = storage_workload(&[s(&["create", &f, "64K"])], &[s(&["read", &f, "4K", "16"])], &[]);
    let args: Vec<String> =
        ["watch", "--json", "--files", "--duration", "600", "--interval", "1"].map(String::from).to_vec();
    let mut t = gdr_trace_tests::Tracer::spawn(&args);
    let me = t.child.id() as u64;
    w.go();
    // This test process reads /proc while traced: not storage.
    (0..20).for_each(|_| drop(std::fs::read("/proc/self/stat")));
    let _ = w.finish();
    // A clean stop once the workload is gone: the final summary has all it did.
    let recs = t.terminate();
    assert_eq!(u(&file(&recs, &f)["reads"]), 16);
    assert_eq!(t.hooks["families"]["storage"], true, "{}", t.hooks["families"]);
    // Its library follower (a process of its own, same name) is gdr-trace too.
    let mine: Vec<&Value> =
        recs.iter().filter(|r| r["pid"].as_u64() == Some(me) || r["comm"] == "gdr-trace").collect();
    assert!(mine.is_empty(), "gdr-trace traced itself: {mine:#?}");
    // Nothing of /proc is storage I/O (the kernel tells its files by filesystem).
    let proc_files = |r: &&Value| r["path"].as_str().is_some_and(|p| p.starts_with("/proc/"));
    let synthetic: Vec<&Value> = by(&recs, "file_io_summary").into_iter().filter(proc_files).collect();
    assert!(synthetic.is_empty(), "synthetic files counted as storage: {synthetic:#?}");
}

#[test]
fn no_storage_leaves_the_storage_hooks_out() {
    // A process that ends when its stdin closes, once the tracer has attached (no sleep).
    let mut target = Command::new("cat").stdin(std::process::Stdio::piped()).spawn().unwrap();
    let args: Vec<String> =
        ["attach", &target.id().to_string(), "--json", "--files", "--duration", "120", "--no-storage"]
            .map(String::from)
            .to_vec();
    let mut t = gdr_trace_tests::Tracer::spawn(&args);
    drop(target.stdin.take());
    target.wait().unwrap();
    let recs = t.finish();
    for name in [
        "openat, openat2",
        "read, pread64, readv, preadv, preadv2",
        "cuFileRead",
        "mm_filemap_add_to_page_cache",
    ] {
        let h = hook(&t.hooks, name);
        assert!(h["attached"].is_null(), "{h}");
        assert!(h["reasons"].to_string().contains("--no-storage"), "{h}");
    }
    assert!(by(&recs, "file_io_summary").is_empty());
    // JSON says storage was not traced (not "none seen").
    assert_eq!(t.hooks["families"]["storage"], false, "{}", t.hooks["families"]);
}
