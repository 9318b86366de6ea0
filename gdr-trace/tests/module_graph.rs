//! The crate's top-level modules import one another one way only: this reads every
//! `crate::` path in `src/` (use lines and inline paths; test modules and comments left out)
//! and fails on a cycle, naming the modules and the files that close it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without line comments and without a trailing `#[cfg(test)] mod ...`.
fn code(src: &str) -> String {
    let src = src.find("#[cfg(test)]\nmod ").map_or(src, |i| &src[..i]);
    src.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// The first path segment of each item of the use tree at `s` (what follows `crate::`).
fn heads(s: &str) -> Vec<String> {
    let ident =
        |t: &str| t.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    if !s.starts_with('{') {
        return vec![ident(s)];
    }
    let (mut depth, mut item, mut out) = (0, String::new(), Vec::new());
    for c in s.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    out.push(ident(&item));
                    break;
                }
            }
            ',' if depth == 1 => {
                out.push(ident(&std::mem::take(&mut item)));
                continue;
            }
            _ => {}
        }
        if depth >= 1 {
            item.push(c);
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top = |p: &Path| {
        let rel = p.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| top(f)).collect();
    let mut g = Graph::new();
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "main.rs" || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let from = top(f);
        let text = code(&fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display())));
        for (i, _) in text.match_indices("crate::") {
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `gdr_trace_common::` is another crate
            }
            for to in heads(&text[i + "crate::".len()..]) {
                if to != from && modules.contains(&to) {
                    let rel = f.strip_prefix(src).expect("under src").display().to_string();
                    g.entry(from.clone()).or_default().entry(to).or_default().insert(rel);
                }
            }
        }
    }
    g
}

/// A cycle, as the list of modules on it (first repeated at the end), if there is one.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &Graph,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for next in g.get(n).into_iter().flat_map(|m| m.keys()) {
            if let Some(c) = visit(next, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

#[test]
fn top_level_modules_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    assert!(g.get("loader").is_some_and(|m| m.contains_key("hooks")), "the reader saw no imports: {g:?}");
    let leaves = ["drivers", "units", "exit"];
    for leaf in leaves {
        assert!(!g.contains_key(leaf), "{leaf} is a leaf but imports {:?}", g[leaf]);
    }
    // The hook table and the kernel's facts (the driver branch among them) sit on leaves only.
    for near_leaf in ["hooks", "facts"] {
        let imports: Vec<&String> = g.get(near_leaf).map(|m| m.keys().collect()).unwrap_or_default();
        assert!(imports.iter().all(|m| leaves.contains(&m.as_str())), "{near_leaf} imports {imports:?}");
    }
    // The evidence families side by side: storage and p2p import no other family; mr takes
    // p2p's host-memory evidence (staging buffers, staged copies) for its verdicts, no more.
    // queues takes mr's joined pins and memory verdicts: one join for every pin the kernel makes.
    let families = ["mr", "storage", "p2p", "queues"];
    for (family, may) in
        [("storage", &[][..]), ("p2p", &[][..]), ("mr", &["p2p"][..]), ("queues", &["mr"][..])]
    {
        let others: Vec<&String> = g
            .get(family)
            .map(|m| {
                m.keys().filter(|k| families.contains(&k.as_str()) && !may.contains(&k.as_str())).collect()
            })
            .unwrap_or_default();
        assert!(others.is_empty(), "{family} imports the families {others:?}");
    }
    if let Some(cycle) = find_cycle(&g) {
        let edges: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                format!(
                    "{} -> {} ({})",
                    w[0],
                    w[1],
                    g[&w[0]][&w[1]].iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        panic!("import cycle between top-level modules:\n  {}", edges.join("\n  "));
    }
}

#[test]
fn the_reader_finds_a_cycle_and_nested_use_trees() {
    assert_eq!(heads("{a::{b, c}, d::e, f}; x"), ["a", "d", "f"]);
    assert_eq!(heads("sink::Sink;"), ["sink"]);
    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().entry(b.into()).or_default().insert("f.rs".into());
    }
    assert_eq!(find_cycle(&g), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    g.get_mut("c").expect("c").remove("a");
    assert_eq!(find_cycle(&g), None);
}

#[test]
fn only_the_loader_and_the_live_loop_touch_bpf() {
    // Analysis is pure (events in, reports out): aya, and with it the BPF maps, is the
    // loader's and `trace/`'s alone.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut outside = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let home =
            ["loader", "trace"].iter().any(|d| rel.starts_with(&format!("{d}/")) || rel == format!("{d}.rs"))
                || rel.ends_with("tests.rs");
        if !home && code(&fs::read_to_string(f).unwrap()).contains("aya::") {
            outside.push(rel);
        }
    }
    assert!(files.len() > 100, "the reader saw {} files", files.len());
    assert!(outside.is_empty(), "aya used outside loader/ and trace/: {outside:?}");
}

#[test]
fn the_evidence_families_are_pure_analysis() {
    // mr/, storage/ and p2p/: typed events in, reports out. What /proc, /sys or a process's
    // root say is read by the live layer (`trace/`) or `preflight/` and handed in.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let family = |rel: &str| {
        ["mr", "storage", "p2p", "queues"]
            .iter()
            .any(|f| rel.starts_with(&format!("{f}/")) || rel == format!("{f}.rs"))
    };
    let mut checked = 0;
    let mut reads = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if !family(&rel) || rel.ends_with("tests.rs") {
            continue;
        }
        checked += 1;
        let text = code(&fs::read_to_string(f).unwrap());
        for what in [
            "std::fs",
            "fs::read",
            "File::open",
            "read_dir",
            "read_link",
            "Command::new",
            "aya::",
            "procfs::read",
            "procfs::comm",
        ] {
            if text.contains(what) {
                reads.push(format!("{rel}: {what}"));
            }
        }
    }
    assert!(checked > 30, "the families' files: {checked}");
    assert!(reads.is_empty(), "I/O inside an evidence family: {reads:?}");
}

/// Each Rust file under `src/<dir>`: its path there and its code (comments and test module out).
fn sources(dir: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let rel = |f: &Path| f.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
    files.iter().map(|f| (rel(f), code(&fs::read_to_string(f).unwrap()))).collect()
}

#[test]
fn no_command_imports_another() {
    // A command wires a source to sinks; what two commands share is `crate::options` (or
    // another module outside `cmd/`), so a command can change without touching another.
    let files = sources("cmd");
    let crossing: Vec<String> = files
        .iter()
        .flat_map(|(rel, text)| {
            ["crate::cmd::", "super::"]
                .into_iter()
                .filter(|w| text.contains(w))
                .map(move |w| format!("{rel}: {w}"))
        })
        .collect();
    assert!(files.len() >= 9, "the reader saw {} command files", files.len());
    assert!(crossing.is_empty(), "commands importing another: {crossing:?}");
}
