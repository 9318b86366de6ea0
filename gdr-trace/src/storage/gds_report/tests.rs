//! Through the real state and report: records, a snapshot carrying the process's facts, then
//! `aggregate::report`.

use gdr_trace_common::storage::{GdsOp, GdsTally};

use std::path::Path;

use crate::events::storage::StorageEvent;
use crate::storage::{
    aggregate::{report, ProcReport},
    classify::StorageVerdict,
    gds_facts::{parse_mountinfo, ProcConfig, ProcGdsFacts},
    gds_mode::EffectiveConfig,
    gds_mode::GdsMode,
    state::{
        tests::{gds, opened, snap_file, stats},
        GdsIo, Snapshot, StorageState,
    },
};

const O_DIRECT: u32 = libc::O_DIRECT as u32;

fn facts(fstype: &str, nvidia_fs: Option<bool>, effective: EffectiveConfig) -> ProcGdsFacts {
    let line = format!("22 1 8:1 / /data rw - {fstype} src rw\n");
    ProcGdsFacts {
        config: ProcConfig { effective, ..Default::default() },
        mounts: parse_mountinfo(&line),
        nvidia_fs,
        kernel_p2pdma: None,
    }
}

/// The facts of a process on a kernel that cannot do PCI P2PDMA (Debian 6.1's own evidence).
fn no_p2pdma(mut f: ProcGdsFacts) -> ProcGdsFacts {
    f.kernel_p2pdma = Some((false, DEBIAN_61.to_string()));
    f
}

const DEBIAN_61: &str =
    "kernel 6.1.0-57-amd64 built without CONFIG_PCI_P2PDMA (/proc/kallsyms lacks p2pdma_pgmap_ops)";

/// A process that opens /data/x with `f_flags` and reads 8 KiB through cuFile: nvidia-fs
/// ioctls if `nvfs`, else POSIX reads on the descriptor.
fn run(f_flags: u32, nvfs: bool, facts: Option<ProcGdsFacts>) -> ProcReport {
    let mut s = StorageState::new();
    s.record(opened(5, 9, "/data/x", 42, f_flags));
    s.record(gds(5, GdsOp::HandleRegister, Some(9), 0xabc, 0, GdsTally::default()));
    let t = if nvfs {
        GdsTally { nvfs_calls: 2, nvfs_bytes: 8192, io_fd: -1, ..GdsTally::default() }
    } else {
        GdsTally { posix_calls: 2, posix_bytes: 8192, io_fd: 9, ..GdsTally::default() }
    };
    s.record(gds(5, GdsOp::Read, Some(9), 0xabc, 8192, t));
    let io = if nvfs { stats(0, 0) } else { stats(2, 8192) };
    let snap = Snapshot {
        files: vec![snap_file(5, 9, 42, f_flags, io)],
        gds_facts: facts.into_iter().map(|f| (5, f)).collect(),
        ..Snapshot::default()
    };
    s.snapshot(snap);
    report(&s).procs.remove(0)
}

#[test]
fn compat_on_tmpfs_with_every_reason_in_json_and_hints() {
    let env = vec![("CUFILE_FORCE_COMPAT_MODE".to_string(), "true".to_string())];
    let cfg =
        crate::preflight::proc_gds::read_config(Path::new("/nonexistent"), Path::new("/"), &env).effective;
    let p = run(0, false, Some(facts("tmpfs", Some(false), cfg)));
    let f = &p.files[0];
    assert_eq!(f.gds_mode, Some(GdsMode::GdsCompat));
    let want = ["filesystem:tmpfs", "force-compat-mode", "nvidia-fs-absent", "not-o-direct"];
    assert_eq!(f.compat_reason, want);
    assert_eq!(p.compat_reason, want);
    assert_eq!(p.gds_mode, Some(GdsMode::GdsCompat));
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["gds_mode"], "gds-compat");
    assert_eq!(json["files"][0]["compat_reason"][0], "filesystem:tmpfs");
    let why = p
        .hints
        .iter()
        .find(|h| h.starts_with("why cuFile falls back to compatibility mode here"))
        .expect("a reasons hint");
    assert!(why.contains("on tmpfs") && why.contains("CUFILE_FORCE_COMPAT_MODE=true"), "{why}");
}

#[test]
fn o_direct_posix_without_nvidia_fs_is_unknown_never_compat() {
    let p2p =
        EffectiveConfig { use_pci_p2pdma: Some((true, "/etc/cufile.json".into())), ..Default::default() };
    let p = run(O_DIRECT, false, Some(facts("ext4", Some(false), p2p)));
    let f = &p.files[0];
    assert_eq!(f.gds_mode, Some(GdsMode::Unknown));
    assert!(f.compat_reason.is_empty(), "{:?}", f.compat_reason);
    assert!(p.hints.iter().any(|h| h.contains("may be PCI P2PDMA")), "{:?}", p.hints);
    assert_ne!(p.gds_mode, Some(GdsMode::GdsCompat));
}

#[test]
fn nvfs_file_has_no_reason_and_no_facts_still_gives_o_direct_reason() {
    let p = run(O_DIRECT, true, Some(facts("ext4", Some(true), EffectiveConfig::default())));
    assert_eq!(p.files[0].gds_mode, Some(GdsMode::GdsNvfs));
    assert_eq!(p.gds_mode, Some(GdsMode::GdsNvfs));
    assert!(p.compat_reason.is_empty());
    assert!(!serde_json::to_string(&p).unwrap().contains("compat_reason"));
    // No facts read (a recording made before them): the state's own evidence still gives one.
    let p = run(0, false, None);
    assert_eq!(p.files[0].compat_reason, ["not-o-direct"]);
}

/// One cuFile call on /data/x (device 8:1), after the process's facts arrived.
fn call(op: GdsOp, f_flags: u32, t: GdsTally, length: u64, offset: i64, facts: ProcGdsFacts) -> GdsIo {
    let mut s = StorageState::new();
    s.record(opened(5, 9, "/data/x", 42, f_flags));
    s.snapshot(Snapshot { gds_facts: vec![(5, facts)], ..Snapshot::default() });
    s.record(gds(5, GdsOp::HandleRegister, Some(9), 0xabc, 0, GdsTally::default()));
    let StorageEvent::Gds(mut c) = gds(5, op, Some(9), 0xabc, length as i64, t) else { unreachable!() };
    (c.length, c.file_offset) = (length, offset);
    s.record(StorageEvent::Gds(c)).pop().unwrap()
}

fn posix(n: u32) -> GdsTally {
    GdsTally { posix_calls: n, posix_bytes: 4096, io_fd: 9, ..GdsTally::default() }
}

#[test]
fn each_call_has_its_mode_and_reasons_with_size_and_offset() {
    let none = EffectiveConfig::default();
    let io = call(GdsOp::Read, 0, posix(1), 4096, 0, facts("overlay", Some(true), none.clone()));
    assert_eq!(io.mode.mode, Some(GdsMode::GdsCompat));
    assert_eq!(io.mode.compat_reason, ["filesystem:overlay", "not-o-direct"]);
    let v = crate::sink::storage_json::gds_io(&io);
    assert_eq!(
        (v["gds_mode"].as_str(), v["compat_reason"][0].as_str()),
        (Some("gds-compat"), Some("filesystem:overlay"))
    );

    // O_DIRECT POSIX I/O with no nvidia-fs ioctl: unknown (may be P2PDMA), never compat.
    let io = call(GdsOp::Read, O_DIRECT, posix(1), 4096, 0, facts("ext4", Some(false), none.clone()));
    assert_eq!(io.mode.mode, Some(GdsMode::Unknown));
    let nvfs = GdsTally { nvfs_calls: 1, nvfs_bytes: 4096, io_fd: -1, ..GdsTally::default() };
    let io = call(GdsOp::Read, O_DIRECT, nvfs, 4096, 0, facts("ext4", Some(true), none.clone()));
    assert_eq!((io.mode.mode, io.mode.compat_reason.len()), (Some(GdsMode::GdsNvfs), 0));

    let unaligned =
        EffectiveConfig { posix_unaligned_writes: Some((true, "/etc/cufile.json".into())), ..none.clone() };
    let io = call(GdsOp::Write, O_DIRECT, posix(1), 1000, 512, facts("ext4", Some(true), unaligned.clone()));
    assert_eq!(io.mode.compat_reason, ["unaligned-write"]);
    let io = call(GdsOp::Write, O_DIRECT, posix(1), 8192, 4096, facts("ext4", Some(true), unaligned));
    assert!(io.mode.compat_reason.is_empty(), "aligned: {:?}", io.mode.compat_reason);

    let lustre = EffectiveConfig { lustre_posix_gds_min_kb: Some((64, "/etc/cufile.json".into())), ..none };
    let io = call(GdsOp::Read, O_DIRECT, posix(1), 16 << 10, 0, facts("lustre", Some(true), lustre.clone()));
    assert_eq!(io.mode.compat_reason, ["below-posix-gds-min-kb:64"]);
    let io = call(GdsOp::Read, O_DIRECT, posix(1), 1 << 20, 0, facts("lustre", Some(true), lustre));
    assert!(io.mode.compat_reason.is_empty());
}

#[test]
fn the_verdict_is_the_mode_for_every_call() {
    let none = EffectiveConfig::default();
    let nvfs = GdsTally { nvfs_calls: 1, nvfs_bytes: 4096, io_fd: -1, ..GdsTally::default() };
    let cases = [
        (GdsOp::Read, O_DIRECT, nvfs, facts("ext4", Some(true), none.clone()), "gds-nvfs"),
        (GdsOp::Read, 0, posix(1), facts("tmpfs", Some(true), none.clone()), "gds-compat"),
        (GdsOp::Read, O_DIRECT, posix(1), facts("ext4", Some(false), none.clone()), "unknown"),
        (GdsOp::Read, O_DIRECT, posix(1), no_p2pdma(facts("ext4", Some(false), none.clone())), "gds-compat"),
        (GdsOp::BufRegister, 0, GdsTally::default(), facts("ext4", Some(false), none.clone()), "unknown"),
        (
            GdsOp::BufRegister,
            0,
            GdsTally::default(),
            no_p2pdma(facts("ext4", Some(false), none)),
            "gds-compat",
        ),
    ];
    for (op, fl, t, f, want) in cases {
        // A buffer registration succeeds with 0; it moves no bytes.
        let io = call(op, fl, t, if op == GdsOp::BufRegister { 0 } else { 4096 }, 0, f);
        let v = crate::sink::storage_json::gds_io(&io);
        assert_eq!(v["gds_mode"], want, "{op:?} {fl:o}: {v}");
        // The old field says the same: its name for the mode (gds-unknown for unknown).
        let verdict = if want == "unknown" { "gds-unknown" } else { want };
        assert_eq!(v["verdict"], verdict, "{op:?} {fl:o}: {v}");
        assert_ne!((v["verdict"].as_str(), v["gds_mode"].as_str()), (Some("gds-compat"), Some("unknown")));
    }
}

#[test]
fn direct_io_on_a_kernel_without_p2pdma_is_compat_with_that_reason() {
    let none = EffectiveConfig::default();
    let io =
        call(GdsOp::Read, O_DIRECT, posix(1), 4096, 0, no_p2pdma(facts("ext4", Some(false), none.clone())));
    assert_eq!(io.mode.mode, Some(GdsMode::GdsCompat));
    assert_eq!(io.mode.compat_reason, ["nvidia-fs-absent", "kernel-no-p2pdma"]);
    // With nvidia-fs there, the kernel's P2PDMA is no reason.
    let io = call(GdsOp::Read, 0, posix(1), 4096, 0, no_p2pdma(facts("ext4", Some(true), none.clone())));
    assert_eq!(io.mode.compat_reason, ["not-o-direct"]);
    // The file and the process: facts read after the call still decide it; the hint says why.
    let p = run(O_DIRECT, false, Some(no_p2pdma(facts("ext4", Some(false), none))));
    assert_eq!((p.files[0].gds_mode, p.gds_mode), (Some(GdsMode::GdsCompat), Some(GdsMode::GdsCompat)));
    assert_eq!(p.files[0].compat_reason, ["nvidia-fs-absent", "kernel-no-p2pdma"]);
    let why = p.hints.iter().find(|h| h.starts_with("why cuFile falls back")).expect("a reasons hint");
    assert!(why.contains(&format!("p2pdma not possible: {DEBIAN_61}")), "{why}");
    assert!(!p.hints.iter().any(|h| h.contains("may be PCI P2PDMA")), "{:?}", p.hints);
}

/// An O_DIRECT read whose POSIX I/O's buffer was seen (`dest_gpu`), after the facts arrived.
fn call_dest(t: GdsTally, dest: Option<bool>, facts: ProcGdsFacts) -> GdsIo {
    let mut s = StorageState::new();
    s.record(opened(5, 9, "/data/x", 42, O_DIRECT));
    s.snapshot(Snapshot { gds_facts: vec![(5, facts)], ..Snapshot::default() });
    s.record(gds(5, GdsOp::HandleRegister, Some(9), 0xabc, 0, GdsTally::default()));
    let StorageEvent::Gds(mut c) = gds(5, GdsOp::Read, Some(9), 0xabc, 4096, t) else { unreachable!() };
    c.detail.dest_gpu = dest;
    s.record(StorageEvent::Gds(c)).pop().unwrap()
}

#[test]
fn the_destination_tells_p2pdma_from_compat_and_a_failed_p2pdma_says_why() {
    let p2p =
        EffectiveConfig { use_pci_p2pdma: Some((true, "/etc/cufile.json".into())), ..Default::default() };
    let can = |mut f: ProcGdsFacts| {
        f.kernel_p2pdma = Some((true, "kernel 6.8.0-1-generic with CONFIG_PCI_P2PDMA=y".into()));
        f
    };
    let io = call_dest(posix(1), Some(true), can(facts("ext4", Some(false), p2p.clone())));
    assert_eq!((io.mode.mode, io.verdict), (Some(GdsMode::GdsP2pdma), Some(StorageVerdict::GdsP2pdma)));
    assert!(io.mode.compat_reason.is_empty(), "a direct path has no fallback reason");
    // Into host memory: a bounce buffer, even where P2PDMA is possible.
    let io = call_dest(posix(1), Some(false), can(facts("ext4", Some(false), p2p.clone())));
    assert_eq!((io.mode.mode, io.verdict), (Some(GdsMode::GdsCompat), Some(StorageVerdict::GdsCompat)));
    // Destination not seen where P2PDMA is possible: unknown.
    let io = call_dest(posix(1), None, can(facts("ext4", Some(false), p2p.clone())));
    assert_eq!(io.mode.mode, Some(GdsMode::Unknown));
    // O_DIRECT into GPU memory refused (EFAULT: no P2PDMA pages to pin): nothing landed.
    let failed = GdsTally { posix_calls: 1, io_err: -14, io_fd: 9, ..GdsTally::default() };
    let io = call_dest(failed, Some(true), no_p2pdma(facts("ext4", Some(true), p2p.clone())));
    assert_eq!((io.mode.mode, io.verdict), (Some(GdsMode::Unknown), Some(StorageVerdict::GdsUnknown)));
    assert_eq!(io.mode.compat_reason, ["p2pdma-failed:EFAULT"]);
    let why = crate::storage::gds_mode::CompatReason::P2pdmaFailed(
        "EFAULT".into(),
        format!("p2pdma not possible: {DEBIAN_61}"),
    );
    assert!(why.explain().ends_with("failed with EFAULT: p2pdma not possible: kernel 6.1.0-57-amd64 built without CONFIG_PCI_P2PDMA (/proc/kallsyms lacks p2pdma_pgmap_ops)"));
    // A failed bounce-buffer read is still compat, and no P2PDMA failure.
    let io = call_dest(failed, Some(false), no_p2pdma(facts("ext4", Some(true), p2p)));
    assert_eq!(io.mode.mode, Some(GdsMode::GdsCompat));
    assert!(
        !io.mode.compat_reason.iter().any(|r| r.starts_with("p2pdma-failed")),
        "{:?}",
        io.mode.compat_reason
    );
}
