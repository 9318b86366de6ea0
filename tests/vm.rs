//! Tests that need a real RDMA stack and kernel hooks: they run inside the qemu VM (Debian
//! kernel, soft-RoCE rxe0, real libibverbs), where `cargo xtask test` runs them with
//! `--ignored --test-threads=1`. Outside the VM they are ignored, never passed.

use gdr_trace_tests::{events, gdr_trace, Lines, Tracer, Workload};
use serde_json::Value;

/// A's registrations: sizes and access flags (hex), plus one the kernel refuses.
const A_SPECS: &[&str] = &["4096:1", "65536:7", "1048576:f", "bad:8192"];
const B_SPECS: &[&str] = &["8192:1", "12288:3"];

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

struct Expect {
    /// "fexit"/"kprobe": the prefix the kernel hooks' sources must carry.
    reg_source: &'static str,
    rel_source: &'static str,
}

fn expect_for(mode: &str) -> Expect {
    match mode {
        "kprobe" => Expect { reg_source: "kprobe:ib_umem_get", rel_source: "kprobe:ib_umem_release" },
        _ => Expect { reg_source: "fexit:ib_umem_get", rel_source: "fentry:ib_umem_release" },
    }
}

/// Two processes register; `attach A` must report exactly A's registrations and releases.
fn attach_case(mode: &str, iova2: bool) {
    let mut a_args: Vec<&str> = A_SPECS.to_vec();
    if iova2 {
        a_args.insert(0, "--iova2");
    }
    let mut a = Workload::spawn(&a_args);
    let mut b = Workload::spawn(B_SPECS);
    let mut tracer = Tracer::spawn(&[
        "attach".into(),
        a.pid().to_string(),
        "--json".into(),
        "--attach-mode".into(),
        mode.into(),
        "--duration".into(),
        "120".into(),
    ]);
    let exp = expect_for(mode);
    let want_kernel = if mode == "kprobe" { "kprobe+kretprobe" } else { "fexit" };
    assert_eq!(tracer.attached("ib_umem_get").as_deref(), Some(want_kernel), "hooks: {}", tracer.hooks);
    let want_rel = if mode == "kprobe" { "kprobe" } else { "fentry" };
    assert_eq!(tracer.attached("ib_umem_release").as_deref(), Some(want_rel), "hooks: {}", tracer.hooks);
    assert_eq!(tracer.attached("ibv_reg_mr").as_deref(), Some("uprobe+uretprobe"));

    b.go();
    a.go();
    let a_pid = a.pid();
    let b_pid = b.pid();
    let a_out = a.finish();
    let b_out = b.finish();
    let recs = tracer.finish();

    let user_fn = if iova2 { "uprobe:ibv_reg_mr_iova2" } else { "uprobe:ibv_reg_mr" };
    let regs = events(&recs, "mr_register");
    let truth: Vec<&Value> =
        a_out.iter().filter(|r| r["event"] == "registered" || r["event"] == "failed").collect();
    assert_eq!(truth.len(), A_SPECS.len());
    assert_eq!(regs.len(), truth.len(), "exactly A's registrations, once each: {regs:#?}");
    for t in &truth {
        let r = regs
            .iter()
            .find(|r| r["addr"] == t["addr"] && r["length"] == t["length"])
            .unwrap_or_else(|| panic!("no record for {t}: {regs:#?}"));
        assert_eq!(u(&r["pid"]), a_pid as u64);
        assert_eq!(r["tid"], t["tid"]);
        assert_eq!(r["comm"], "gdr-workload");
        assert_eq!(r["access"], t["access"]);
        assert_eq!(r["device"], "rxe0");
        let sources: Vec<&str> =
            r["sources"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        assert!(sources.contains(&exp.reg_source), "{sources:?}");
        assert!(sources.contains(&user_fn), "{sources:?}");
        if t["event"] == "registered" {
            assert_eq!(r["verdict"], "host", "{r}");
        } else {
            assert_eq!(r["verdict"], "failed", "{r}");
            assert_eq!(r["errno"], t["errno"], "kernel errno = what libibverbs saw: {r}");
            assert_ne!(t["errno"], 0);
        }
    }
    let flags: Vec<Vec<String>> = regs
        .iter()
        .filter(|r| r["length"] == 1048576)
        .map(|r| {
            r["access_flags"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
        })
        .collect();
    assert_eq!(flags, [["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC"]]);

    let rels = events(&recs, "mr_release");
    let deregs: Vec<&Value> = a_out.iter().filter(|r| r["event"] == "deregistered").collect();
    assert_eq!(rels.len(), deregs.len(), "one release per deregistration: {rels:#?}");
    for d in &deregs {
        let r = rels
            .iter()
            .find(|r| r["addr"] == d["addr"])
            .unwrap_or_else(|| panic!("no release for {d}: {rels:#?}"));
        assert_eq!(r["length"], d["length"]);
        assert_eq!(u(&r["pid"]), a_pid as u64);
        assert_eq!(r["verdict"], "host");
        let sources = r["sources"].to_string();
        assert!(sources.contains(exp.rel_source) && sources.contains("uprobe:ibv_dereg_mr"), "{sources}");
    }

    // Nothing of B's, by pid or by address.
    let b_addrs: Vec<&Value> = b_out.iter().map(|r| &r["addr"]).collect();
    for r in recs.iter().filter(|r| r["event"] == "mr_register" || r["event"] == "mr_release") {
        assert_ne!(u(&r["pid"]), b_pid as u64, "B leaked into A's trace: {r}");
        assert!(!b_addrs.contains(&&r["addr"]), "B's address in A's trace: {r}");
    }

    let sums = events(&recs, "summary");
    assert_eq!(sums.len(), 1, "{sums:?}");
    let s = sums[0];
    assert_eq!(u(&s["pid"]), a_pid as u64);
    assert_eq!(s["registrations"], 4);
    assert_eq!(s["failed"], 1);
    assert_eq!(s["releases"], 3);
    assert_eq!(s["bytes_registered"], 4096 + 65536 + 1048576);
    assert_eq!(s["live_bytes"], 0, "everything deregistered");
    assert_eq!(s["by_verdict"]["host"]["count"], 3);
    assert_eq!(events(&recs, "lost")[0]["total"], 0);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn attach_auto_mode_uses_fentry_and_reports_only_the_target() {
    attach_case("auto", false);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn attach_fentry_mode_iova2() {
    attach_case("fentry", true);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn attach_kprobe_mode() {
    attach_case("kprobe", false);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn live_pinned_bytes_while_held() {
    // --keep: A exits without deregistering; the kernel releases the umems when the process's
    // verbs file closes, from the exiting task: still attributed to A through the umem.
    let mut a = Workload::spawn(&["--keep", "--hold-ms", "300", "4096:1", "8192:1"]);
    let mut tracer = Tracer::spawn(&[
        "attach".into(),
        a.pid().to_string(),
        "--json".into(),
        "--duration".into(),
        "120".into(),
    ]);
    a.go();
    let _ = a.finish();
    let recs = tracer.finish();
    assert_eq!(events(&recs, "mr_register").len(), 2);
    let rels = events(&recs, "mr_release");
    assert_eq!(rels.len(), 2, "exit releases both umems: {rels:#?}");
    assert!(rels.iter().all(|r| r["sources"].to_string().contains("ib_umem_release")));
    assert_eq!(events(&recs, "summary")[0]["live_bytes"], 0);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn doctor_flags_nccls_gdr_claim_against_host_registrations() {
    let dir = std::env::temp_dir().join(format!("gdr-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("nccl.log");
    std::fs::write(&log, "node:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'rxe0'\n")
        .unwrap();
    let mut a = Workload::spawn(&["--hold-ms", "500", "1048576:7", "2097152:7"]);
    let mut doctor = std::process::Command::new(gdr_trace())
        .args(["doctor", "--json", "-p", &a.pid().to_string(), "--duration", "30", "--nccl-log"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = Lines::new_stderr(doctor.stderr.take().unwrap());
    let first = err.next(std::time::Duration::from_secs(60), "doctor to start tracing").unwrap_or_default();
    assert!(first.contains("tracing PID"), "{first}");
    a.go();
    let _ = a.finish();
    let out = doctor.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let text = j.to_string();
    assert!(
        text.contains("NCCL says GDR enabled for rxe0") && text.contains("was host memory (rxe0: 3.0 MiB)"),
        "doctor must flag the contradiction: {j:#}"
    );
    assert_eq!(j["live"]["registrations"][0]["bytes"], 3 << 20, "{j:#}");
}

/// 5,000 threads of one process sit inside `ibv_reg_mr` for good (a bogus
/// pd faults, the handler parks the thread, as a siglongjmp would leave the call); another
/// process's registrations are then all seen from the user side, not only by the kernel hooks.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn a_stash_flood_hides_no_registration_of_another_process() {
    use gdr_trace_tests::stash_flood::StashFlood;
    let mut tracer = Tracer::spawn(&["watch", "--json", "--no-storage", "--interval", "0"].map(String::from));
    assert_eq!(tracer.attached("ibv_reg_mr").as_deref(), Some("uprobe+uretprobe"), "{}", tracer.hooks);
    let mut flood = StashFlood::spawn(5000, "park");
    flood.flood();
    let specs = ["4096:1", "8192:1", "12288:3", "16384:7", "65536:1"];
    let mut victim = Workload::spawn(&specs);
    victim.go();
    let pid = victim.pid() as u64;
    let truth = victim.finish();
    flood.end();
    let recs = tracer.terminate();
    let regs: Vec<&Value> =
        events(&recs, "mr_register").into_iter().filter(|r| u(&r["pid"]) == pid).collect();
    let seen = truth
        .iter()
        .filter(|t| t["event"] == "registered")
        .filter(|t| {
            regs.iter().any(|r| {
                r["addr"] == t["addr"]
                    && r["length"] == t["length"]
                    && r["sources"].to_string().contains("uprobe:ibv_reg_mr")
            })
        })
        .count();
    assert_eq!(seen, specs.len(), "the victim's registrations seen from libibverbs: {regs:#?}");
    let lost = &recs.iter().rev().find(|r| r["event"] == "lost").expect("a lost record")["by_reason"];
    assert_eq!(lost["stash_full"], 0, "{lost}");
}
