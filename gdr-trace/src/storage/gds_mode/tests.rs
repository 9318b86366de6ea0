use super::*;

fn ev(nvfs: u64, posix: u64, o_direct: Option<bool>, dest_gpu: Option<bool>) -> IoEvidence {
    IoEvidence {
        nvfs_calls: nvfs,
        posix_calls: posix,
        o_direct,
        dest_gpu,
        p2pdma_possible: None,
        failed: false,
    }
}

#[test]
fn every_mode_from_its_evidence() {
    assert_eq!(decide_mode(&ev(3, 0, Some(true), None)), GdsMode::GdsNvfs);
    // nvidia-fs ioctls win even if POSIX I/O was seen too (the library's own small reads).
    assert_eq!(decide_mode(&ev(1, 5, Some(false), Some(false))), GdsMode::GdsNvfs);
    assert_eq!(decide_mode(&ev(0, 2, Some(true), Some(true))), GdsMode::GdsP2pdma);
    assert_eq!(decide_mode(&ev(0, 2, Some(true), Some(false))), GdsMode::GdsCompat);
    assert_eq!(decide_mode(&ev(0, 2, Some(false), None)), GdsMode::GdsCompat);
    assert_eq!(decide_mode(&ev(0, 2, None, Some(false))), GdsMode::GdsCompat);
    assert_eq!(decide_mode(&ev(0, 0, Some(true), Some(true))), GdsMode::Unknown, "no I/O seen");
}

#[test]
fn a_direct_read_without_evidence_is_never_compat() {
    // O_DIRECT, no nvidia-fs, destination not known: could be P2PDMA, so unknown.
    assert_eq!(decide_mode(&ev(0, 4, Some(true), None)), GdsMode::Unknown);
    assert_eq!(decide_mode(&ev(0, 4, None, None)), GdsMode::Unknown);
    for o in [None, Some(true)] {
        assert_ne!(decide_mode(&ev(0, 1, o, Some(true))), GdsMode::GdsCompat, "{o:?}");
    }
}

#[test]
fn modes_serialize_as_kebab_names() {
    let all = [GdsMode::GdsNvfs, GdsMode::GdsP2pdma, GdsMode::GdsCompat, GdsMode::Unknown];
    let names: Vec<_> = all.iter().map(|m| m.as_str()).collect();
    assert_eq!(names, ["gds-nvfs", "gds-p2pdma", "gds-compat", "unknown"]);
    for m in all {
        assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{}\"", m.as_str()));
    }
}

#[test]
fn filesystems_by_support_and_magic() {
    for fs in ["tmpfs", "ramfs", "overlay", "squashfs", "btrfs", "zfs", "fuse.sshfs"] {
        assert_eq!(fs_support(fs), FsSupport::CompatOnly, "{fs}");
    }
    assert_eq!(fs_support("ext4"), FsSupport::LocalNvme);
    assert_eq!(fs_support("xfs"), FsSupport::LocalNvme);
    assert_eq!(fs_support("nfs4"), FsSupport::KernelRdma);
    assert_eq!(fs_support("lustre"), FsSupport::KernelRdma);
    assert_eq!(fs_support("wekafs"), FsSupport::PeermemOrDmabuf);
    assert_eq!(fs_from_magic(0x0102_1994), Some("tmpfs"));
    assert_eq!(fs_from_magic(0x794c_7630), Some("overlay"));
    assert_eq!(fs_from_magic(0x7371_7368), Some("squashfs"));
    assert_eq!(fs_from_magic(0xEF53), Some("ext4"));
    assert_eq!(fs_from_magic(0x1234), None);
}

fn src(s: &str) -> String {
    s.to_string()
}

#[test]
fn each_reason_alone() {
    let base = FallbackFacts {
        fs_type: Some("ext4"),
        o_direct: Some(true),
        nvidia_fs: Some(true),
        ..Default::default()
    };
    assert!(compat_reasons(&base).is_empty(), "ext4, O_DIRECT, nvidia-fs: no reason");

    for fs in ["tmpfs", "overlay", "squashfs", "ramfs"] {
        let f = FallbackFacts { fs_type: Some(fs), ..base.clone() };
        assert_eq!(reason_ids(&compat_reasons(&f)), [format!("filesystem:{fs}")]);
    }

    let cfg = EffectiveConfig {
        force_compat_mode: Some((true, src("CUFILE_FORCE_COMPAT_MODE"))),
        ..Default::default()
    };
    let r = compat_reasons(&FallbackFacts { config: Some(&cfg), ..base.clone() });
    assert_eq!(r, [CompatReason::ForceCompatMode(src("CUFILE_FORCE_COMPAT_MODE"))]);
    assert!(r[0].explain().contains("CUFILE_FORCE_COMPAT_MODE"));

    let off =
        EffectiveConfig { force_compat_mode: Some((false, src("/etc/cufile.json"))), ..Default::default() };
    assert!(compat_reasons(&FallbackFacts { config: Some(&off), ..base.clone() }).is_empty());

    let r = compat_reasons(&FallbackFacts { nvidia_fs: Some(false), ..base.clone() });
    assert_eq!(reason_ids(&r), ["nvidia-fs-absent"]);
    // P2PDMA configured: no nvidia-fs is not by itself a reason.
    let p2p = EffectiveConfig { use_pci_p2pdma: Some((true, src("/etc/cufile.json"))), ..Default::default() };
    assert!(compat_reasons(&FallbackFacts { nvidia_fs: Some(false), config: Some(&p2p), ..base.clone() })
        .is_empty());
    // Unknown nvidia-fs state is no reason either.
    assert!(compat_reasons(&FallbackFacts { nvidia_fs: None, ..base.clone() }).is_empty());

    let r = compat_reasons(&FallbackFacts { o_direct: Some(false), ..base.clone() });
    assert_eq!(reason_ids(&r), ["not-o-direct"]);
}

#[test]
fn size_alignment_and_write_reasons() {
    let lustre = EffectiveConfig {
        lustre_posix_gds_min_kb: Some((64, src("/etc/cufile.json"))),
        ..Default::default()
    };
    let f = FallbackFacts {
        fs_type: Some("lustre"),
        o_direct: Some(true),
        config: Some(&lustre),
        ..Default::default()
    };
    let small = FallbackFacts { size: Some(64 * 1024), ..f.clone() };
    assert_eq!(reason_ids(&compat_reasons(&small)), ["below-posix-gds-min-kb:64"]);
    assert!(compat_reasons(&FallbackFacts { size: Some(64 * 1024 + 4096), ..f.clone() }).is_empty());
    // The threshold is Lustre's: the same size on ext4 is no reason.
    assert!(
        compat_reasons(&FallbackFacts { fs_type: Some("ext4"), size: Some(4096), ..f.clone() }).is_empty()
    );

    let unaligned =
        EffectiveConfig { posix_unaligned_writes: Some((true, src("cufile.json"))), ..Default::default() };
    let w = FallbackFacts {
        fs_type: Some("ext4"),
        o_direct: Some(true),
        config: Some(&unaligned),
        is_write: true,
        size: Some(1000),
        offset: Some(0),
        ..Default::default()
    };
    assert_eq!(reason_ids(&compat_reasons(&w)), ["unaligned-write"]);
    assert!(compat_reasons(&FallbackFacts { size: Some(8192), ..w.clone() }).is_empty());
    assert!(
        compat_reasons(&FallbackFacts { is_write: false, ..w.clone() }).is_empty(),
        "reads are not affected"
    );

    let weka =
        FallbackFacts { fs_type: Some("wekafs"), o_direct: Some(true), is_write: true, ..Default::default() };
    assert_eq!(reason_ids(&compat_reasons(&weka)), ["rdma-writes-off"]);
    let on =
        EffectiveConfig { weka_rdma_write_support: Some((true, src("cufile.json"))), ..Default::default() };
    assert!(compat_reasons(&FallbackFacts { config: Some(&on), ..weka.clone() }).is_empty());
    let gds_off = EffectiveConfig { gds_rdma_write_support: Some((false, src("x.json"))), ..on.clone() };
    let r = compat_reasons(&FallbackFacts { config: Some(&gds_off), ..weka });
    assert_eq!(r, [CompatReason::RdmaWritesOff(src("gds_rdma_write_support false in x.json"))]);
}

#[test]
fn several_reasons_at_once() {
    let cfg =
        EffectiveConfig { force_compat_mode: Some((true, src("/etc/cufile.json"))), ..Default::default() };
    let f = FallbackFacts {
        fs_type: Some("tmpfs"),
        config: Some(&cfg),
        nvidia_fs: Some(false),
        o_direct: Some(false),
        ..Default::default()
    };
    assert_eq!(
        reason_ids(&compat_reasons(&f)),
        ["filesystem:tmpfs", "force-compat-mode", "nvidia-fs-absent", "not-o-direct"]
    );
}

#[test]
fn a_kernel_without_p2pdma_makes_undecided_direct_io_compat_and_says_so() {
    let no = IoEvidence { p2pdma_possible: Some(false), ..ev(0, 3, Some(true), None) };
    assert_eq!(decide_mode(&no), GdsMode::GdsCompat);
    let yes = IoEvidence { p2pdma_possible: Some(true), ..no };
    assert_eq!(decide_mode(&yes), GdsMode::Unknown, "P2PDMA possible, destination not seen");
    let landed = IoEvidence { dest_gpu: Some(true), ..yes };
    assert_eq!(decide_mode(&landed), GdsMode::GdsP2pdma);
    let nvfs = IoEvidence { nvfs_calls: 1, ..no };
    assert_eq!(decide_mode(&nvfs), GdsMode::GdsNvfs);

    let why = "kernel 6.12.118+deb12-amd64 built without CONFIG_PCI_P2PDMA (/boot/config-6.12.118+deb12-amd64: CONFIG_PCI_P2PDMA not set)";
    let f = FallbackFacts {
        fs_type: Some("ext4"),
        o_direct: Some(true),
        nvidia_fs: Some(false),
        kernel_p2pdma: Some((false, why)),
        ..Default::default()
    };
    let r = compat_reasons(&f);
    assert_eq!(reason_ids(&r), ["nvidia-fs-absent", "kernel-no-p2pdma"]);
    assert_eq!(r[1].explain(), format!("p2pdma not possible: {why}"));
    let with_nvfs = FallbackFacts { nvidia_fs: Some(true), ..f.clone() };
    assert!(compat_reasons(&with_nvfs).is_empty());
    let can = FallbackFacts { kernel_p2pdma: Some((true, "kernel 6.8 with CONFIG_PCI_P2PDMA=y")), ..f };
    assert_eq!(reason_ids(&compat_reasons(&can)), ["nvidia-fs-absent"]);
}
