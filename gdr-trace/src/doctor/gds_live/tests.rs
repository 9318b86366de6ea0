use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};

use super::*;

/// A /proc/PID tree for a container-style process: its maps (libcufile), environ, own root
/// with etc/cufile.json, an open descriptor on a real file whose device mountinfo names as tmpfs.
fn tree(name: &str, maps_cufile: bool, environ: &[u8]) -> std::path::PathBuf {
    let t = std::env::temp_dir().join(format!("gdr-doctor-gds-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&t);
    let pd = t.join("proc/9");
    fs::create_dir_all(pd.join("fd")).unwrap();
    fs::create_dir_all(pd.join("root/etc")).unwrap();
    fs::create_dir_all(t.join("sys/module")).unwrap();
    fs::create_dir_all(t.join("data")).unwrap();
    let lib = if maps_cufile { "/usr/local/cuda/lib64/libcufile.so.0" } else { "/usr/lib/libc.so.6" };
    fs::write(
        pd.join("maps"),
        format!("7f00-7f10 r-xp 00000000 08:01 5 {lib}\n7f20-7f30 rw-p 00000000 00:00 0\n"),
    )
    .unwrap();
    fs::write(pd.join("environ"), environ).unwrap();
    fs::write(
        pd.join("root/etc/cufile.json"),
        "{ // container's\n \"properties\": { \"allow_compat_mode\": true } }",
    )
    .unwrap();
    let data = t.join("data/shard-0");
    fs::write(&data, b"x").unwrap();
    symlink(&data, pd.join("fd/3")).unwrap();
    let (ma, mi) = split_dev(fs::metadata(&data).unwrap().dev());
    fs::write(pd.join("mountinfo"), format!("30 1 {ma}:{mi} / /data rw - tmpfs tmpfs rw\n")).unwrap();
    t
}

#[test]
fn a_cufile_process_in_compat_mode_is_explained() {
    let t = tree("compat", true, b"CUFILE_FORCE_COMPAT_MODE=true\0");
    let c = read(&t.join("proc"), &t.join("sys"), 9).expect("maps libcufile");
    assert_eq!(c.library, "/usr/local/cuda/lib64/libcufile.so.0");
    assert_eq!(c.config_file.as_deref(), Some("/etc/cufile.json"));
    assert_eq!(c.compat_reason, ["force-compat-mode", "nvidia-fs-absent"]);
    assert_eq!(c.compat_only_files, [format!("{} (tmpfs)", t.join("data/shard-0").display())]);

    let live = LiveEvidence { pid: 9, cufile: Some(c), ..LiveEvidence::default() };
    let mut b = Builder::default();
    b.live_gds(&live);
    let high = b.problems.iter().find(|p| p.severity == Severity::High).expect("a high problem");
    assert!(
        high.title.contains("every cuFile call of PID 9 goes through compatibility mode"),
        "{}",
        high.title
    );
    assert!(high.title.contains("CUFILE_FORCE_COMPAT_MODE=true"), "{}", high.title);
    assert!(b.problems.iter().any(|p| p.title.contains("no GPUDirect path")), "{:?}", b.problems);

    // On Debian 6.1 (its kallsyms without p2pdma_pgmap_ops): P2PDMA is no way out either.
    fs::create_dir_all(t.join("sys/devices")).unwrap();
    fs::create_dir_all(t.join("proc/sys/kernel")).unwrap();
    fs::write(t.join("proc/sys/kernel/osrelease"), "6.1.0-57-amd64\n").unwrap();
    fs::write(t.join("proc/kallsyms"), "0000000000000000 T vfs_read\n").unwrap();
    let c = read(&t.join("proc"), &t.join("sys"), 9).expect("maps libcufile");
    assert_eq!(c.compat_reason, ["force-compat-mode", "nvidia-fs-absent", "kernel-no-p2pdma"]);
    let live = LiveEvidence { pid: 9, cufile: Some(c), ..LiveEvidence::default() };
    let mut b = Builder::default();
    b.live_gds(&live);
    let all: Vec<&str> = b.problems.iter().map(|p| p.title.as_str()).collect();
    assert!(
        all.iter().any(|t| t.contains("p2pdma not possible: kernel 6.1.0-57-amd64 built without CONFIG_PCI_P2PDMA")),
        "{all:?}"
    );
    let _ = fs::remove_dir_all(&t);
}

#[test]
fn nvidia_fs_in_the_root_and_no_force_leaves_no_process_wide_reason() {
    let t = tree("ok", true, b"A=b\0");
    fs::create_dir_all(t.join("sys/module/nvidia_fs")).unwrap();
    fs::create_dir_all(t.join("proc/9/root/dev")).unwrap();
    fs::write(t.join("proc/9/root/dev/nvidia-fs0"), "").unwrap();
    let c = read(&t.join("proc"), &t.join("sys"), 9).unwrap();
    assert!(c.compat_reason.is_empty(), "{:?}", c.compat_reason);
    let live = LiveEvidence { pid: 9, cufile: Some(c), ..LiveEvidence::default() };
    let mut b = Builder::default();
    b.live_gds(&live);
    assert!(b.problems.iter().all(|p| p.severity != Severity::High), "{:?}", b.problems);
    let _ = fs::remove_dir_all(&t);

    let t = tree("nocufile", false, b"CUFILE_FORCE_COMPAT_MODE=true\0");
    assert_eq!(read(&t.join("proc"), &t.join("sys"), 9), None, "no libcufile mapped: not a cuFile process");
    let _ = fs::remove_dir_all(&t);
}
