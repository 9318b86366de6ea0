//! Broken sysfs/procfs trees: files missing, garbage where numbers and config space should be,
//! symlink loops, a directory where a file should be. `check` must never panic or hang on
//! them: a finding, or exit 2 with an error that says what it could not read.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Damage {
    Remove,
    Garbage(Vec<u8>),
    /// A symlink to itself: reading it fails with ELOOP.
    SelfLoop,
    /// A symlink to the directory holding it: walking down never ends unless loops are caught.
    ParentLoop,
    /// A directory in place of a file.
    Dir,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::Remove),
        proptest::collection::vec(any::<u8>(), 0..96).prop_map(Damage::Garbage),
        Just(Damage::SelfLoop),
        Just(Damage::ParentLoop),
        Just(Damage::Dir),
    ]
}

/// Every regular file and symlink of a tree, sorted (the damage picks by index).
fn entries(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn apply(path: &Path, d: &Damage) {
    // The same path can be hit twice, and an earlier hit may have left a directory there.
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
    match d {
        Damage::Remove => {}
        Damage::Garbage(b) => std::fs::write(path, b).unwrap(),
        Damage::SelfLoop => std::os::unix::fs::symlink(path.file_name().unwrap(), path).unwrap(),
        Damage::ParentLoop => std::os::unix::fs::symlink(".", path).unwrap(),
        Damage::Dir => std::fs::create_dir(path).unwrap(),
    }
}

/// Names of files preflight reads.
const PARSED: [&str; 12] = [
    "vendor",
    "device",
    "class",
    "config",
    "resource",
    "numa_node",
    "current_link_speed",
    "current_link_width",
    "type",
    "version",
    "cmdline",
    "cufile.json",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn check_survives_damaged_trees(
        base in 0usize..2,
        hits in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>(), damage()), 1..6),
    ) {
        let spec = if base == 0 { machines::rail_pix() } else { machines::cross_socket() };
        let tmp = tempfile::tempdir().unwrap();
        machines::build(&spec, tmp.path()).unwrap();
        let all = entries(tmp.path());
        // Half the hits land on the files preflight parses (a random file is mostly one it
        // never opens).
        let parsed: Vec<&PathBuf> = all.iter().filter(|p| PARSED.iter().any(|n| p.ends_with(n))).collect();
        for (pick_parsed, i, d) in &hits {
            let path = if *pick_parsed { parsed[i.index(parsed.len())] } else { &all[i.index(all.len())] };
            apply(path, d);
        }
        let (out, json) = check_json(tmp.path(), &[]);
        match out.code {
            0 | 1 => prop_assert!(json["findings"].as_array().is_some_and(|f| !f.is_empty()), "{}", out.stdout),
            2 => prop_assert!(!out.error.is_empty(), "exit 2 must say why"),
            c => prop_assert!(false, "exit code {c}"),
        }
    }
}

/// CI once drew two hits on one file, a directory first: the second hit must replace it.
#[test]
fn a_second_hit_replaces_a_directory_left_by_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("vendor");
    std::fs::write(&f, "0x10de\n").unwrap();
    apply(&f, &Damage::Dir);
    apply(&f, &Damage::Garbage(b"x".to_vec()));
    assert_eq!(std::fs::read(&f).unwrap(), b"x");
    apply(&f, &Damage::SelfLoop);
    apply(&f, &Damage::Dir);
    assert!(f.is_dir());
}
