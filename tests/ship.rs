//! What ships besides the binary. Shell completions and man pages made by `gdr-trace generate`
//! from the same clap definitions the parser uses: every public subcommand and each of its
//! options offered by every shell and documented by a man page, the hidden packaging subcommand
//! not. The deploy files: the DaemonSet's image variable, the PodMonitor matching its pods, and
//! the Grafana dashboard querying only metrics `serve` exports (tests/vm_ship.rs checks them
//! against a scrape with registrations).

use std::{path::Path, process::Command, sync::Arc};

use clap::CommandFactory;
use gdr_trace::cli::Cli;
use gdr_trace::{
    audit::{identity::Resolver, Posture},
    events::Context,
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::Registration,
    sink::{
        metrics::{Format, MetricsSink, Shared},
        Lost, Output, Sink,
    },
};
use gdr_trace_tests::{
    gdr_trace,
    prom::{dashboard_metrics, free_port, http_get, openmetrics_check, promtool_check, sample_names},
    Tracer,
};
use serde_json::Value;

/// (name, its long options) for every subcommand users see.
fn public_subcommands() -> Vec<(String, Vec<String>)> {
    let cli = Cli::command();
    let subs: Vec<(String, Vec<String>)> = cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| {
            let longs = s.get_arguments().filter(|a| !a.is_hide_set()).filter_map(|a| a.get_long());
            (s.get_name().to_string(), longs.map(String::from).collect())
        })
        .collect();
    assert!(subs.len() >= 9, "watch, attach, probes, check, doctor, audit, record, report, serve: {subs:?}");
    subs
}

fn generate(dir: &Path) {
    let out = Command::new(gdr_trace()).arg("generate").arg("--out").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// What bash's completion function offers for `gdr-trace <words...> <cur>`.
fn bash_complete(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cur = words.last().unwrap();
    let prev = words[words.len() - 2];
    let sh = format!(
        "source '{}' && COMP_WORDS=({}) && COMP_CWORD={} && _gdr__trace gdr-trace '{cur}' '{prev}' && \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words.len() - 1
    );
    let out = Command::new("bash").arg("-c").arg(&sh).output().unwrap();
    assert!(out.status.success(), "{sh}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

#[test]
fn every_subcommand_has_completions_in_bash_zsh_and_fish_and_a_man_page() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path());
    let subs = public_subcommands();
    let read =
        |rel: &str| std::fs::read_to_string(dir.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));

    // bash: run the completion function the way bash does.
    let bash = dir.path().join("completions/gdr-trace.bash");
    let offered = bash_complete(&bash, &["gdr-trace", ""]);
    for (name, longs) in &subs {
        assert!(offered.contains(name), "bash offers {name}: {offered:?}");
        let opts = bash_complete(&bash, &["gdr-trace", name, "--"]);
        for long in longs {
            assert!(opts.contains(&format!("--{long}")), "bash: {name} --{long} in {opts:?}");
        }
    }
    assert!(!offered.contains(&"generate".to_string()), "the hidden subcommand is not offered");

    let zsh = read("completions/_gdr-trace");
    assert!(zsh.starts_with("#compdef gdr-trace"), "{zsh}");
    let fish = read("completions/gdr-trace.fish");
    for (name, longs) in &subs {
        assert!(zsh.contains(&format!("\n'{name}:")), "zsh lists {name}");
        assert!(zsh.contains(&format!("({name})\n")), "zsh completes {name}'s options");
        assert!(
            fish.contains(&format!("__fish_gdr_trace_needs_command\" -f -a \"{name}\"")),
            "fish lists {name}"
        );
        for long in longs {
            // `'(--json)--wide[...]'`: zsh's form of an option that excludes another.
            // `'(--no-bytes)--expect=[...]'`: one that takes a value.
            let listed = zsh.contains(&format!("'--{long}"))
                || zsh.contains(&format!(")--{long}["))
                || zsh.contains(&format!(")--{long}=["));
            assert!(listed, "zsh: {name} --{long}");
            let (when, flag) = (format!("__fish_gdr_trace_using_subcommand {name}\""), format!(" -l {long}"));
            let offered =
                |l: &str| l.contains(&when) && (l.contains(&format!("{flag} ")) || l.ends_with(&flag));
            assert!(fish.lines().any(offered), "fish: {name} --{long}");
        }
    }
    for script in [&zsh, &fish] {
        assert!(!script.contains("generate"), "the hidden subcommand is not offered:\n{script}");
    }

    // man: one page per subcommand naming all its options, and the main page listing them.
    let main = read("man/man1/gdr-trace.1");
    assert!(main.starts_with(".ie") && main.contains(".TH gdr-trace 1"), "{main}");
    for (name, longs) in &subs {
        let page = read(&format!("man/man1/gdr-trace-{name}.1"));
        assert!(page.contains(&format!(".TH gdr-trace-{name} 1")), "{page}");
        // Its examples, one a line (no-fill), as `--help` ends.
        assert!(page.contains(".SH EXAMPLES\n.nf\n") && !page.contains(".SH EXTRA"), "{page}");
        assert!(
            page.contains(&format!("gdr\\-trace {name}")),
            "gdr-trace-{name}(1)'s examples run it: {page}"
        );
        assert!(main.contains(&format!("gdr\\-trace\\-{name}(1)")), "gdr-trace(1) points to {name}: {main}");
        for long in longs {
            let l = format!("\\fB\\-\\-{}\\fR", long.replace('-', "\\-"));
            assert!(page.contains(&l), "gdr-trace-{name}(1) documents --{long}: {page}");
        }
    }
    let pages = std::fs::read_dir(dir.path().join("man/man1")).unwrap().count();
    assert_eq!(pages, subs.len() + 1, "one page per public subcommand and gdr-trace(1)");
}

#[test]
fn generate_into_an_unwritable_place_is_a_clear_error() {
    let out = Command::new(gdr_trace()).args(["generate", "--out", "/proc/version/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot create /proc/version/x/completions"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

fn repo(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml_docs(rel: &str) -> Vec<Value> {
    let text = repo(rel);
    text.split("\n---\n").map(|d| serde_yaml_ng::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"))).collect()
}

#[test]
fn the_daemonset_names_its_image_by_a_variable_and_the_podmonitor_scrapes_its_pods() {
    let docs = yaml_docs("deploy/kubernetes/gdr-trace.yaml");
    let ds = docs.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "${GDR_TRACE_IMAGE}", "envsubst fills it in");
    let readme = repo("README.md");
    let install =
        readme.split("\n## ").find(|s| s.starts_with("Install")).expect("README has an Install section");
    for what in ["GDR_TRACE_IMAGE", "envsubst", "sha256sum -c", "cargo xtask dist", "cargo xtask image"] {
        assert!(install.contains(what), "README Install explains {what}");
    }

    let pm = &yaml_docs("deploy/kubernetes/podmonitor.yaml")[0];
    assert_eq!((&pm["apiVersion"], &pm["kind"]), (&"monitoring.coreos.com/v1".into(), &"PodMonitor".into()));
    assert_eq!(pm["metadata"]["namespace"], ds["metadata"]["namespace"]);
    assert_eq!(pm["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"]);
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["port"], c["ports"][0]["name"], "the container's named port");
    assert_eq!(ep["path"], "/metrics");
    assert_eq!(ep["relabelings"][0]["targetLabel"], "node", "the dashboard selects on node");
}

/// What `serve` renders after one GPU and one host registration, in both formats (the VM test
/// scrapes a real one: tests/vm_ship.rs).
fn rendered() -> (String, String) {
    let shared = Arc::new(Shared::default());
    let mut m = MetricsSink::new(
        shared.clone(),
        5,
        Posture::default(),
        vec![],
        Resolver::new("/nonexistent".as_ref()),
    );
    let mut agg = Aggregator::new();
    for (id, pid, len, v) in [(1, 10, 2 << 20, Verdict::GpuPeermem), (2, 20, 4096, Verdict::Host)] {
        let ctx = Context { pid, tid: pid, comm: format!("w{pid}"), ..Default::default() };
        let reg = Registration {
            id,
            ctx,
            length: len,
            access: 7,
            device: Some("mlx5_0".into()),
            // Seen by a kernel hook: a registration, not only a claim (metrics' `unverified`).
            sources: vec![gdr_trace::events::Source::parse("fexit:ib_umem_get")],
            ..Default::default()
        };
        agg.registered(&reg, v);
        m.emit(&Output::Registered { reg: &reg, verdict: v });
    }
    m.emit(&Output::Summary { agg: &agg, lost: &Lost::default(), last: false });
    let om = shared.body.lock().unwrap().clone();
    (Format::Text.body(&om), om)
}

#[test]
fn the_dashboard_queries_only_metrics_serve_exports_and_both_formats_pass_their_checkers() {
    let metrics = dashboard_metrics();
    for want in [
        "gdr_trace_registered_bytes_total",
        "gdr_trace_processes",
        "gdr_trace_lost_events_total",
        "gdr_trace_storage_bytes_total",
        "gdr_trace_storage_calls_total",
        "gdr_trace_page_cache_read_bytes_total",
    ] {
        assert!(metrics.contains(want), "the dashboard shows {want}: {metrics:?}");
    }
    let (text, om) = rendered();
    promtool_check(&text).unwrap();
    openmetrics_check(&om).unwrap();
    assert_eq!(sample_names(&om), sample_names(&text));
    // And a real scrape of this host (hooks, build; no RDMA device here for registrations).
    let addr = format!("127.0.0.1:{}", free_port());
    let mut t = Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from));
    let (status, head, scraped) = http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200, "{head}");
    promtool_check(&scraped).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGTERM) }, 0);
    t.finish();
    let mut have = sample_names(&text);
    have.extend(sample_names(&scraped));
    let missing: Vec<&String> = metrics.iter().filter(|m| !have.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which serve does not export:\n{text}{scraped}"
    );
}

/// Every file of the repository (target/ and .git left out).
fn repo_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        if p.is_dir() {
            repo_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// There is no public repository: no made-up address stands for one (Cargo.toml, the image's
/// labels, the docs), and the README's install section gives the two true ways: the tarball
/// `cargo xtask dist` writes, and a build from source.
#[test]
fn no_made_up_release_address_and_the_readme_installs_what_dist_builds() {
    let fake = ["example", "invalid"].join(".");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    repo_files(&root, &mut files);
    assert!(files.len() > 100, "{}", files.len());
    let with_fake: Vec<String> = files
        .iter()
        .filter(|p| std::fs::read(p).is_ok_and(|b| String::from_utf8_lossy(&b).contains(&fake)))
        .map(|p| p.display().to_string())
        .collect();
    assert!(with_fake.is_empty(), "{fake} in {with_fake:?}");
    let readme = repo("README.md");
    let install = &readme[readme.find("## Install").expect("an install section")..];
    let install = &install[..install.find("\n## ").unwrap()];
    let dist = repo("xtask/src/dist.rs");
    assert!(dist.contains("format!(\"gdr-trace-{VERSION}-x86_64-linux\")"), "dist's tarball name changed");
    let tarball = format!("gdr-trace-{}-x86_64-linux.tar.gz", env!("CARGO_PKG_VERSION"));
    for want in [
        "cargo xtask dist",
        "target/dist/gdr-trace-<version>-x86_64-linux.tar.gz",
        &tarball,
        "**From source**",
        "cargo build --release -p gdr-trace",
    ] {
        assert!(install.contains(want), "README's install lacks {want:?}:\n{install}");
    }
    assert!(!install.contains("release page"), "there is no release page:\n{install}");
}
