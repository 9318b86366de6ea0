//! A real RDMA program that loads its own copy of libibverbs (a wheel's, a container's): the
//! library follower hooks that copy after start, through uprobe_multi links where the kernel
//! makes them (6.12) and perf-event uprobes elsewhere (6.1), and every registration the kernel
//! lists for the program is seen through the copy's `ibv_reg_mr` as well as the kernel hook.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::{check, try_pair_with, Ready};

/// A copy of the system's libibverbs.so.1 in a folder of its own.
fn ibverbs_copy(dir: &Path) -> PathBuf {
    let lib = ["/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/lib/x86_64-linux-gnu/libibverbs.so.1"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("the system's libibverbs.so.1");
    let copy = dir.join("libibverbs.so.1");
    std::fs::copy(&lib, &copy).unwrap_or_else(|e| panic!("copying {lib:?}: {e}"));
    copy
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn perftest_with_its_own_libibverbs_is_seen_through_that_copy() {
    let dir = std::env::temp_dir().join(format!("gdr-ibverbs-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = ibverbs_copy(&dir);
    // The dynamic loader takes the copy, not the system's library.
    let ldd = Command::new("ldd").arg("/usr/bin/ib_write_bw").env("LD_LIBRARY_PATH", &dir).output().unwrap();
    let resolved = String::from_utf8_lossy(&ldd.stdout).into_owned();
    let want = format!("libibverbs.so.1 => {}", copy.display());
    assert!(resolved.contains(&want), "{want} in:\n{resolved}");
    // `-F`: a report even when the clock calibration is noisy (an emulated CPU; bytes.rs).
    let args = ["ib_write_bw", "-d", "rxe0", "-s", "65536", "-n", "200", "-F"];
    let client = [&args[..], &["127.0.0.1"]].concat();
    // perftest's own rare exit 1 on rxe: again.
    let run = (0..3)
        .find_map(|_| try_pair_with(&[], Some(&copy), None, &args, &client, Ready::Tcp(18515)).ok())
        .expect("a traced run of ib_write_bw on its own libibverbs");
    // Every registration seen by the kernel hook and by libibverbs' ibv_reg_mr: the copy's.
    check(&run, "ib_write_bw", "rxe0");
    let _ = std::fs::remove_dir_all(&dir);
}
