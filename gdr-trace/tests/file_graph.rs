//! Every source file of every crate (gdr-trace, gdr-trace-common, gdr-trace-ebpf, xtask and
//! the tests package) imports one way: this walks each crate's module tree from its roots
//! (following `mod x;` and `#[path]`), resolves every `crate::`, `super::`, `self::` and
//! child-module path to the file that defines that module, and fails on a cycle between files,
//! naming the files and the paths that close it. It also fails on a file over 400 lines.
//! Code after `#[cfg(test)]` and line comments are left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

const MAX_LINES: usize = 400;

#[path = "file_graph/known.rs"]
mod known;
use known::KNOWN_CYCLES;

/// One module: its path inside its crate and the file that holds it.
#[derive(Debug, Clone)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
}

/// file -> file -> the paths (as written) that make the edge.
type Graph = BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The source without line comments, and without everything from the first test-only item.
fn code(src: &str) -> String {
    let cut = ["#[cfg(test)]", "#[cfg(all(test"].iter().filter_map(|m| src.find(m)).min();
    let src = cut.map_or(src, |i| &src[..i]);
    src.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The `mod name;` declarations of a file, with their `#[path = "..."]` when there is one.
fn mod_decls(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut path_attr = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[path = \"") {
            path_attr = rest.split('"').next().map(str::to_string);
            continue;
        }
        let decl = line.strip_prefix("pub ").unwrap_or(line);
        let decl = decl.strip_prefix("pub(crate) ").unwrap_or(decl);
        if let Some(rest) = decl.strip_prefix("mod ") {
            let name = ident_at(rest);
            if rest[name.len()..].trim_start().starts_with(';') {
                out.push((name.to_string(), path_attr.take()));
            }
        }
        if !line.starts_with("#[") {
            path_attr = None;
        }
    }
    out
}

/// The crate's modules, from one root file.
fn walk(root: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut todo = vec![Module { path: vec![], file: root.to_path_buf() }];
    while let Some(m) = todo.pop() {
        let text = read(&m.file);
        let dir = m.file.parent().expect("a directory").to_path_buf();
        let stem = m.file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let owns_dir = m.path.is_empty() || stem == "mod";
        let child_dir = if owns_dir { dir.clone() } else { dir.join(stem) };
        for (name, attr) in mod_decls(&code(&text)) {
            let file = match attr {
                Some(p) => dir.join(p),
                None if child_dir.join(format!("{name}.rs")).exists() => child_dir.join(format!("{name}.rs")),
                None => child_dir.join(&name).join("mod.rs"),
            };
            if file.exists() {
                let mut path = m.path.clone();
                path.push(name);
                todo.push(Module { path, file });
            }
        }
        out.push(m);
    }
    out
}

/// Expands a use tree (what follows a prefix) into whole paths: `{a::{b, c}, d}` -> a::b, a::c, d.
fn expand(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(body) = s.strip_prefix('{') {
        let (mut depth, mut item, mut out) = (1, String::new(), Vec::new());
        for c in body.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 || (c == ',' && depth == 1) {
                if !item.trim().is_empty() {
                    out.extend(expand(&item));
                }
                item.clear();
                if depth == 0 {
                    break;
                }
                continue;
            }
            item.push(c);
        }
        return out;
    }
    let head = ident_at(s);
    if head.is_empty() {
        return vec![vec![]];
    }
    let rest = &s[head.len()..];
    match rest.strip_prefix("::") {
        Some(tail) => expand(tail)
            .into_iter()
            .map(|mut p| {
                p.insert(0, head.to_string());
                p
            })
            .collect(),
        None => vec![vec![head.to_string()]],
    }
}

/// Every module path a file names, made absolute within its crate.
fn references(m: &Module, text: &str, children: &BTreeSet<String>) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        let head = if boundary { ident_at(&text[i..]) } else { "" };
        if head.is_empty() || !text[i + head.len()..].starts_with("::") {
            let step = text[i..].chars().next().map_or(1, char::len_utf8);
            i += head.len().max(step);
            continue;
        }
        let tail = &text[i + head.len() + 2..];
        let base: Option<Vec<String>> = match head {
            "crate" => Some(vec![]),
            "self" => Some(m.path.clone()),
            "super" => {
                let mut base = m.path.clone();
                let mut t = tail;
                base.pop();
                while let Some(more) = t.strip_prefix("super::") {
                    base.pop();
                    t = more;
                }
                Some(base)
            }
            h if children.contains(h) => Some(m.path.clone()),
            _ => None,
        };
        if let Some(base) = base {
            let tail = if head == "super" { tail.trim_start_matches("super::") } else { tail };
            let tail = if children.contains(head) { &text[i..] } else { tail };
            for p in expand(tail) {
                let mut abs = base.clone();
                abs.extend(p);
                let written = format!("crate::{}", abs.join("::"));
                out.push((abs, written));
            }
        }
        i += head.len() + 2;
    }
    out
}

fn graph(root: &Path, g: &mut Graph, files: &mut BTreeSet<PathBuf>) {
    let modules = walk(root);
    let by_path: BTreeMap<Vec<String>, PathBuf> =
        modules.iter().map(|m| (m.path.clone(), m.file.clone())).collect();
    for m in &modules {
        files.insert(m.file.clone());
        let text = code(&read(&m.file));
        let children: BTreeSet<String> = mod_decls(&text).into_iter().map(|(n, _)| n).collect();
        for (abs, written) in references(m, &text, &children) {
            let target = (0..=abs.len()).rev().find_map(|n| by_path.get(&abs[..n]));
            if let Some(t) = target.filter(|t| **t != m.file) {
                g.entry(m.file.clone()).or_default().entry(t.clone()).or_default().insert(written);
            }
        }
    }
}

/// The crate roots of the workspace: libraries, binaries, integration tests.
fn roots() -> Vec<PathBuf> {
    let r = repo();
    let mut out: Vec<PathBuf> = [
        "gdr-trace/src/lib.rs",
        "gdr-trace/src/main.rs",
        "gdr-trace/build.rs",
        "gdr-trace-common/src/lib.rs",
        "gdr-trace-ebpf/src/lib.rs",
        "gdr-trace-ebpf/src/main.rs",
        "xtask/src/main.rs",
        "tests/build.rs",
    ]
    .iter()
    .map(|p| r.join(p))
    .collect();
    for line in read(&r.join("tests/Cargo.toml")).lines() {
        if let Some(p) = line.trim().strip_prefix("path = \"") {
            out.push(r.join("tests").join(p.trim_end_matches('"')));
        }
    }
    for e in fs::read_dir(r.join("gdr-trace/tests")).expect("gdr-trace/tests") {
        out.push(e.expect("entry").path());
    }
    out.retain(|p| p.extension().is_some_and(|e| e == "rs") && p.exists());
    out
}

/// The strongly connected groups of more than one file (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<PathBuf>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a PathBuf) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flat_map(|m| m.keys()) {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                t.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                t.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_file_imports_back_and_no_file_is_too_long() {
    let (mut g, mut files) = (Graph::new(), BTreeSet::new());
    for root in roots() {
        graph(&root, &mut g, &mut files);
    }
    let r = repo();
    let rel = |p: &Path| p.strip_prefix(&r).unwrap_or(p).display().to_string();
    assert!(files.len() > 200, "the walk found only {} files", files.len());
    assert!(g.values().map(|m| m.len()).sum::<usize>() > 200, "the reader saw few imports");
    let mut problems = Vec::new();
    let mut matched = vec![false; KNOWN_CYCLES.len()];
    for group in cycles(&g) {
        let names: Vec<String> = group.iter().map(|p| rel(p)).collect();
        let known = KNOWN_CYCLES.iter().position(|k| names.iter().all(|n| k.contains(&n.as_str())));
        if let Some(k) = known {
            matched[k] = true;
            continue;
        }
        let set: BTreeSet<&PathBuf> = group.iter().collect();
        let edges: Vec<String> = group
            .iter()
            .flat_map(|a| {
                g[a].iter().filter(|(b, _)| set.contains(b)).map(move |(b, how)| {
                    format!(
                        "{} -> {} ({})",
                        rel(a),
                        rel(b),
                        how.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect();
        problems.push(format!("import cycle:\n    {}", edges.join("\n    ")));
    }
    for (k, m) in KNOWN_CYCLES.iter().zip(&matched) {
        if !m {
            problems.push(format!("no longer a cycle, remove it from KNOWN_CYCLES: {k:?}"));
        }
    }
    for f in &files {
        let n = read(f).lines().count();
        if n > MAX_LINES {
            problems.push(format!("{} has {n} lines (at most {MAX_LINES})", rel(f)));
        }
        // One module layout: `name.rs` beside `name/`, never `name/mod.rs`.
        if f.file_name().is_some_and(|n| n == "mod.rs") {
            problems.push(format!("{}: a module is `name.rs` beside its folder, not `mod.rs`", rel(f)));
        }
        // One test placement: inline `mod tests { ... }`, or the module's folder (`name/tests.rs`,
        // `name/<topic>_tests.rs`); never a file placed elsewhere by `#[path]`.
        if rel(f).contains("/src/") && read(f).lines().any(|l| l.trim_start().starts_with("#[path")) {
            problems.push(format!("{}: a module placed by #[path]; tests go in `name/tests.rs`", rel(f)));
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n  {}", problems.len(), problems.join("\n  "));
}

#[test]
fn the_reader_resolves_use_trees_and_finds_cycles() {
    assert_eq!(expand("{a::{b, c}, d::e, f}; x").len(), 4);
    assert_eq!(expand("a::b::C;")[0], ["a", "b", "C"]);
    let m = Module { path: vec!["loader".into(), "attach".into()], file: "x.rs".into() };
    let refs = references(&m, "use super::{LoadOptions, ahead::go};", &BTreeSet::new());
    assert_eq!(refs[0].0, ["loader", "LoadOptions"]);
    assert_eq!(refs[1].0, ["loader", "ahead", "go"]);
    assert_eq!(
        mod_decls("#[path = \"x/y.rs\"]\nmod y;\npub mod z;\nmod w {"),
        [("y".to_string(), Some("x/y.rs".to_string())), ("z".to_string(), None)]
    );
    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().entry(b.into()).or_default().insert("p".into());
    }
    assert_eq!(cycles(&g).len(), 1);
    g.get_mut(Path::new("c")).expect("c").remove(Path::new("a"));
    assert!(cycles(&g).is_empty());
}

/// The evidence families are folders of the same names on both sides (`gdr-trace/src/{mr,
/// storage,p2p}/`, `gdr-trace-ebpf/src/{mr,storage,p2p}/`), and an eBPF family imports only the
/// shared pieces at the top of its crate and itself, never another family.
#[test]
fn each_ebpf_family_is_a_folder_beside_userspace_and_imports_no_other() {
    const FAMILIES: [&str; 3] = ["mr", "storage", "p2p"];
    let r = repo();
    for f in FAMILIES {
        for side in ["gdr-trace/src", "gdr-trace-ebpf/src"] {
            let dir = r.join(side).join(f);
            assert!(dir.is_dir() && r.join(side).join(format!("{f}.rs")).is_file(), "{side}/{f}/ and {f}.rs");
        }
    }
    let (mut g, mut files) = (Graph::new(), BTreeSet::new());
    graph(&r.join("gdr-trace-ebpf/src/main.rs"), &mut g, &mut files);
    let family = |p: &Path| {
        let rel = p.strip_prefix(r.join("gdr-trace-ebpf/src")).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
        FAMILIES.contains(&first.as_str()).then_some(first)
    };
    let mut problems = Vec::new();
    for (from, to) in &g {
        let Some(ff) = family(from) else { continue };
        for (t, how) in to {
            if let Some(tf) = family(t).filter(|tf| *tf != ff) {
                problems.push(format!("{} imports family {tf}: {how:?}", from.display()));
            }
        }
    }
    assert!(files.len() > 30, "the walk found only {} eBPF files", files.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
