//! Host tests of the storage path in `serve`'s metrics. Where the kernel refuses fentry the
//! storage hooks wait for `--storage` (their system call tracepoints cost every system call),
//! and say why; where it allows it they attach by default, with fexit. Either way, with
//! `--storage`, the storage workload's bytes by verdict, its cuFile calls in compatibility mode and
//! its page-cache reads are in `/metrics`, exactly, and the storage series stay under `--top`.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use gdr_trace_tests::{
    prom::{free_port, http_get, openmetrics_check, promtool_check, samples},
    Tracer,
};

mod storage_util;
use storage_util::{s, scratch, truth, u, LIBCUFILE};

/// The storage workload's comm here: run through a link of this name (with this test's pid),
/// so that another storage workload on the machine is never summed with it.
fn comm() -> String {
    format!("gdr-ss-{}", std::process::id())
}

/// The storage workload, as `comm()`.
fn workload(dir: &std::path::Path, setup: &[String], steps: &[String]) -> gdr_trace_tests::Workload {
    let link = dir.join(comm());
    if !link.exists() {
        std::os::unix::fs::symlink(storage_util::workload_bin(), &link).unwrap();
    }
    storage_util::storage_workload_as(&link, setup, steps, &[])
}

/// The sum of `name`'s samples for the workload's comm (and `verdict`, when given).
fn of_workload(text: &str, name: &str, verdict: Option<&str>) -> f64 {
    samples(text, name)
        .iter()
        .filter(|(l, _)| {
            l["comm"] == comm() && verdict.is_none_or(|v| l.get("verdict").map(String::as_str) == Some(v))
        })
        .map(|(_, v)| v)
        .sum()
}

fn serve(extra: &[&str]) -> (Tracer, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args: Vec<String> =
        ["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from).to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    (Tracer::spawn(&args), addr)
}

fn scrape(addr: &str) -> String {
    let (status, head, text) = http_get(addr, "/metrics").unwrap();
    assert_eq!(status, 200, "{head}");
    text
}

/// Scrapes until `done` holds (the storage report comes at each one-second tick); the deadline
/// guards against a hang, it measures nothing. `done` is the exact value asserted: a count that
/// overshoots never matches, and the tracer's final summary (after its ring is drained) is
/// checked against the same values, so a late extra count fails too.
fn scraped(addr: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let text = scrape(addr);
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < until, "{what} never in the scrape:\n{text}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// (calls, bytes) by verdict in the final `storage_summary` of the processes `mine` accepts, summed.
fn final_by_verdict(
    recs: &[serde_json::Value],
    mine: impl Fn(&serde_json::Value) -> bool,
) -> Vec<(String, f64, f64)> {
    let mut out: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    let fin = recs.iter().filter(|r| r["event"] == "storage_summary" && r["final"] == true && mine(r));
    for r in fin {
        for (v, b) in r["bytes_by_verdict"].as_object().into_iter().flatten() {
            let e = out.entry(v.clone()).or_default();
            e.0 += b["calls"].as_f64().unwrap_or(0.0);
            e.1 += b["bytes"].as_f64().unwrap_or(0.0);
        }
    }
    out.into_iter().filter(|(_, (c, b))| *c > 0.0 || *b > 0.0).map(|(v, (c, b))| (v, c, b)).collect()
}

/// The same (calls, bytes) by verdict from a scrape, for the workload's comm.
fn scraped_by_verdict(text: &str) -> Vec<(String, f64, f64)> {
    ["direct", "gds-compat", "gds-nvfs", "gds-p2pdma", "gds-unknown", "page-cache"]
        .into_iter()
        .map(|v| {
            let c = of_workload(text, "gdr_trace_storage_calls_total", Some(v));
            (v.to_string(), c, of_workload(text, "gdr_trace_storage_bytes_total", Some(v)))
        })
        .filter(|(_, c, b)| *c > 0.0 || *b > 0.0)
        .collect()
}

#[test]
fn serve_leaves_storage_out_without_fentry_and_exports_it_exactly_with_the_flag() {
    // What this kernel does with fentry decides what serve does by default (probes says).
    let refused =
        gdr_trace_tests::probes_json(&[])["kernel"]["fentry_unavailable"].as_str().map(String::from);
    let (mut plain, _) = serve(&[]);
    let h = gdr_trace_tests::hook(&plain.hooks, "read, pread64, readv, preadv, preadv2");
    match &refused {
        Some(why) => {
            assert!(h["attached"].is_null(), "fentry refused ({why}): left out: {h}");
            assert!(h["reasons"].to_string().contains("serve --storage"), "{h}");
        }
        None => assert_eq!(h["attached"], "fexit", "fentry allowed: attached by default: {h}"),
    }
    plain.terminate();

    let dir = scratch();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let (cold, direct, written, cuf) = (p("cold.bin"), p("direct.bin"), p("w.bin"), p("cufile.bin"));
    let setup = [s(&["create", &cold, "1M"]), s(&["create", &direct, "1M"])];
    let steps = [
        s(&["read", &cold, "4K", "256"]),
        s(&["read", &direct, "4K", "256", "direct"]),
        s(&["write", &written, "64K", "16"]),
    ];
    // Started (its libraries loaded, its files made) before the trace: only the steps count.
    let mut w = workload(dir.path(), &setup, &steps);
    let (mut t, addr) = serve(&["--storage", "--top", "200", "--libcufile", LIBCUFILE]);
    assert_eq!(
        t.attached("read, pread64, readv, preadv, preadv2").as_deref(),
        Some(if refused.is_some() { "tracepoint" } else { "fexit" }),
        "{}",
        t.hooks
    );
    let first_pid = w.pid();
    w.go();
    let facts = w.finish();
    let page_cache = |t: &str| of_workload(t, "gdr_trace_storage_bytes_total", Some("page-cache"));
    let first = [
        ("direct".to_string(), 256.0, (1 << 20) as f64),
        ("page-cache".to_string(), 272.0, (2 << 20) as f64),
    ];
    let text = scraped(&addr, "the workload's exact page-cache and direct I/O", |t| {
        scraped_by_verdict(t) == first
            && of_workload(t, "gdr_trace_page_cache_read_bytes_total", None) == (1 << 20) as f64
    });
    // 1 MiB read and 1 MiB written through the page cache, 1 MiB read O_DIRECT: exactly.
    assert_eq!(page_cache(&text), (2 << 20) as f64, "{text}");
    assert_eq!(of_workload(&text, "gdr_trace_storage_calls_total", Some("page-cache")), 272.0, "{text}");
    assert_eq!(of_workload(&text, "gdr_trace_storage_bytes_total", Some("direct")), (1 << 20) as f64);
    assert_eq!(of_workload(&text, "gdr_trace_storage_calls_total", Some("direct")), 256.0);
    for v in ["gds-nvfs", "gds-compat"] {
        assert_eq!(of_workload(&text, "gdr_trace_storage_bytes_total", Some(v)), 0.0, "{v}: {text}");
    }
    assert_eq!(of_workload(&text, "gdr_trace_page_cache_read_bytes_total", None), (1 << 20) as f64);
    let filled = of_workload(&text, "gdr_trace_page_cache_filled_bytes_total", None);
    let ratio = of_workload(&text, "gdr_trace_page_cache_hit_ratio", None);
    // A cold file (the workload's own mincore says whether it stayed cold) misses every page.
    match u(&truth(&facts, "read", &cold)["cached_before"]) {
        0 => assert_eq!((filled, ratio), ((1 << 20) as f64, 0.0), "{text}"),
        n => gdr_trace_tests::skip(
            "serve_storage: cold-file misses",
            &format!("{n} bytes of the cold file were cached before its reads (mincore)"),
        ),
    }
    assert!(filled <= (1 << 20) as f64 && (0.0..=1.0).contains(&ratio), "{text}");

    // cuFile without nvidia-fs: compatibility mode, its calls and bytes under gds-compat.
    let mut w = workload(
        dir.path(),
        &[s(&["create", &cuf, "1M"])],
        &[s(&["cufile-read", &cuf, "256K", "64K"]), s(&["cufile-write", &cuf, "64K", "0"])],
    );
    w.go();
    w.finish();
    let compat = |t: &str| of_workload(t, "gdr_trace_storage_calls_total", Some("gds-compat"));
    let text = scraped(&addr, "the cuFile calls and bytes", |t| {
        compat(t) == 2.0
            && of_workload(t, "gdr_trace_storage_bytes_total", Some("gds-compat")) == (320 << 10) as f64
    });
    assert_eq!(compat(&text), 2.0, "{text}");
    assert_eq!(of_workload(&text, "gdr_trace_storage_bytes_total", Some("gds-compat")), (320 << 10) as f64);
    assert_eq!(of_workload(&text, "gdr_trace_storage_bytes_total", Some("gds-nvfs")), 0.0);
    promtool_check(&text).unwrap();
    let (_, _, om) =
        gdr_trace_tests::prom::http_get_accept(&addr, "/metrics", Some("application/openmetrics-text"))
            .unwrap();
    openmetrics_check(&om).unwrap();
    let recs = t.terminate();
    // Nothing came after what was asserted: the final reports hold the same values.
    assert_eq!(
        final_by_verdict(&recs, |r| r["pid"] == first_pid),
        first,
        "the first workload's final summary"
    );
    assert_eq!(final_by_verdict(&recs, |r| r["comm"] == comm()), scraped_by_verdict(&text), "both workloads");
}

#[test]
fn storage_series_stay_under_the_top_n_bound() {
    let dir = scratch();
    let f = dir.path().join("many.bin").display().to_string();
    std::fs::write(&f, vec![7u8; 256 << 10]).unwrap();
    let (mut t, addr) = serve(&["--storage", "--top", "2"]);
    // Five more processes with names of their own read the file (this node's others may too).
    for prog in ["cat", "md5sum", "sha1sum", "wc", "cksum"] {
        let st = Command::new(prog).arg(&f).stdout(std::process::Stdio::null()).status().unwrap();
        assert!(st.success(), "{prog}");
    }
    let idents = |text: &str| -> Vec<String> {
        let mut v: Vec<String> = samples(text, "gdr_trace_storage_bytes_total")
            .into_iter()
            .map(|(l, _)| format!("{}/{}/{}", l["comm"], l["container"], l["pod"]))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let other_bytes = |text: &str| -> f64 {
        samples(text, "gdr_trace_storage_bytes_total")
            .iter()
            .filter(|(l, _)| l["comm"] == "other")
            .map(|(_, v)| v)
            .sum()
    };
    // Series only grow: once the readers are in, more than three identities would stay visible.
    let text = scraped(&addr, "five readers", |t| {
        let read: f64 = samples(t, "gdr_trace_storage_bytes_total").iter().map(|(_, v)| v).sum();
        read >= (5 * (256 << 10)) as f64 && other_bytes(t) >= (3 * (256 << 10)) as f64
    });
    let who = idents(&text);
    assert!(who.len() <= 3, "two processes' own series and other, no more: {who:?}\n{text}");
    assert!(who.iter().any(|k| k.starts_with("other/")), "{who:?}");
    assert!(
        other_bytes(&text) >= (3 * (256 << 10)) as f64,
        "at least three readers summed under other:\n{text}"
    );
    promtool_check(&text).unwrap();
    t.terminate();
}
