//! The committed fixture trees are exactly what the generator writes.

use super::*;

#[derive(Debug, PartialEq)]
enum Entry {
    File(Vec<u8>),
    Link(String),
    Dir,
}

fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(rel, Entry::Link(std::fs::read_link(&p).unwrap().display().to_string()));
            } else if meta.is_dir() {
                out.insert(rel, Entry::Dir);
                stack.push(p);
            } else {
                out.insert(rel, Entry::File(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

#[test]
fn committed_fixtures_are_what_the_generator_writes() {
    for spec in machines::all() {
        let committed = machine(spec.name);
        let tmp = tempfile::tempdir().unwrap();
        machines::build(&spec, tmp.path()).unwrap();
        let (want, have) = (snapshot(tmp.path()), snapshot(&committed));
        let diff: Vec<&String> =
            want.keys().chain(have.keys()).filter(|k| want.get(*k) != have.get(*k)).take(5).collect();
        assert!(
            diff.is_empty(),
            "tests/fixtures/preflight/{} differs from the generator at {diff:?}; \
             run `cargo xtask fixtures` to rewrite them from the generator",
            spec.name
        );
    }
}
