use std::fs;
use std::path::PathBuf;

use super::*;

const MOUNTINFO: &str = "\
22 1 259:2 / / rw - ext4 /dev/nvme0n1p2 rw
23 22 0:21 / /proc rw - proc proc rw
24 22 0:22 / /sys rw - sysfs sysfs rw
30 22 0:25 / /dev/shm rw - tmpfs tmpfs rw
41 22 0:50 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw
42 22 7:0 / /snap/core/1 ro - squashfs /dev/loop0 ro
43 22 0:60 / /mnt/nfs rw - nfs4 srv:/x rw
44 22 254:1 / /scratch rw - xfs /dev/vda1 rw
";

/// A captured tree: TREE/{sys,proc,boot}.
fn tree(name: &str, release: &str, boot_config: Option<&str>, mountinfo: Option<&str>) -> (PathBuf, Fs) {
    let t = std::env::temp_dir().join(format!("gdr-gds-mounts-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&t);
    fs::create_dir_all(t.join("sys/devices")).unwrap();
    fs::create_dir_all(t.join("proc/sys/kernel")).unwrap();
    fs::create_dir_all(t.join("proc/self")).unwrap();
    fs::create_dir_all(t.join("boot")).unwrap();
    fs::write(t.join("proc/sys/kernel/osrelease"), format!("{release}\n")).unwrap();
    if let Some(c) = boot_config {
        fs::write(t.join(format!("boot/config-{release}")), c).unwrap();
    }
    if let Some(m) = mountinfo {
        fs::write(t.join("proc/self/mountinfo"), m).unwrap();
    }
    let f = Fs::new(&t.join("sys"), &t.join("proc")).unwrap();
    (t, f)
}

fn modules(nvfs: bool) -> Modules {
    Modules { nvidia_fs_loaded: nvfs, ..Modules::default() }
}

#[test]
fn releases_and_configs() {
    assert_eq!(release_at_least("6.1.0-27-amd64", 6, 2), Some(false));
    assert_eq!(release_at_least("6.12.118+deb12-amd64", 6, 2), Some(true));
    assert_eq!(release_at_least("5.15.0", 6, 2), Some(false));
    assert_eq!(release_at_least("garbage", 6, 2), None);
    assert!(config_p2pdma("CONFIG_PCI=y\nCONFIG_PCI_P2PDMA=y\n"));
    assert!(!config_p2pdma("# CONFIG_PCI_P2PDMA is not set\n"));
    assert!(!config_p2pdma("CONFIG_PCI=y\n"));
}

#[test]
fn debian_kernels_lack_p2pdma_and_a_new_one_has_it() {
    let (t, f) = tree("deb612", "6.12.118+deb12-amd64", Some("# CONFIG_PCI_P2PDMA is not set\n"), None);
    let k = kernel_p2pdma(&f);
    assert_eq!((k.config, k.usable()), (Some(false), Some(false)));
    assert!(k.why().contains("built without CONFIG_PCI_P2PDMA"), "{}", k.why());
    let _ = fs::remove_dir_all(&t);

    let (t, f) = tree("old", "6.1.0-27-amd64", Some("CONFIG_PCI_P2PDMA=y\n"), None);
    assert_eq!(kernel_p2pdma(&f).usable(), Some(false), "6.1 is older than 6.2 even with the option");
    let _ = fs::remove_dir_all(&t);

    let (t, f) = tree("new", "6.8.0-45-generic", Some("CONFIG_PCI_P2PDMA=y\n"), None);
    assert_eq!(kernel_p2pdma(&f).usable(), Some(true));
    let _ = fs::remove_dir_all(&t);

    let (t, f) = tree("noconfig", "6.8.0", None, None);
    let k = kernel_p2pdma(&f);
    assert_eq!((k.config, k.usable()), (None, None), "{k:?}");
    fs::write(t.join("proc/kallsyms"), "0000000000000000 d p2pdma_pgmap_ops\n").unwrap();
    assert_eq!(kernel_p2pdma(&f).usable(), Some(true), "the troubleshooting guide's kallsyms check");
    let _ = fs::remove_dir_all(&t);
}

#[test]
fn each_mount_with_its_modes() {
    let (t, f) = tree("mounts", "6.8.0", Some("CONFIG_PCI_P2PDMA=y\n"), Some(MOUNTINFO));
    let x = finding(&f, &modules(true), true);
    assert_eq!(x.status, Status::Pass, "{x:?}");
    assert!(
        x.summary.starts_with("6 mounted filesystem(s) (2 pseudo left out): 2 with a direct path, 4"),
        "{}",
        x.summary
    );
    let row = |mp: &str| {
        x.evidence.iter().find(|e| e.path.ends_with(&format!(" {mp}"))).map(|e| e.value.clone()).unwrap()
    };
    assert!(row("/").starts_with("ext4 on /dev/nvme0n1p2: nvfs, p2pdma, compat ("), "{}", row("/"));
    assert!(row("/dev/shm").starts_with("tmpfs on tmpfs: compat-only (tmpfs: memory-backed, no O_DIRECT"));
    assert!(row("/var/lib/docker/overlay2/x/merged").contains("compat-only (overlay"));
    assert!(row("/snap/core/1").contains("compat-only (squashfs"));
    assert!(row("/mnt/nfs").starts_with("nfs4 on srv:/x: nvfs, compat"));
    assert!(row("/scratch").contains("compat-only (/dev/vda1 is not an NVMe device"));
    assert!(!x.evidence.iter().any(|e| e.path.ends_with(" /proc")), "pseudo filesystems are left out");
    let _ = fs::remove_dir_all(&t);
}

#[test]
fn without_nvidia_fs_or_p2pdma_everything_is_compat_only() {
    let (t, f) =
        tree("compat", "6.12.118+deb12-amd64", Some("# CONFIG_PCI_P2PDMA is not set\n"), Some(MOUNTINFO));
    let x = finding(&f, &modules(false), true);
    assert_eq!(x.status, Status::Warn, "{x:?}");
    let root = x.evidence.iter().find(|e| e.path.ends_with(" /")).unwrap();
    assert!(root.value.contains("compat-only"), "{}", root.value);
    assert!(root.value.contains("nvfs: nvidia-fs not loaded"), "{}", root.value);
    assert!(
        root.value.contains("p2pdma: kernel 6.12.118+deb12-amd64 built without CONFIG_PCI_P2PDMA"),
        "{}",
        root.value
    );
    // No GPU: not applicable, the list still there.
    let n = finding(&f, &modules(false), false);
    assert_eq!(n.status, Status::NotApplicable);
    assert_eq!(n.evidence.len(), x.evidence.len());
    let _ = fs::remove_dir_all(&t);
    // No mountinfo in the tree: unknown, said so.
    let (t, f) = tree("nomounts", "6.1.0", None, None);
    let u = finding(&f, &modules(true), true);
    assert_eq!(u.status, Status::Unknown);
    assert!(u.summary.contains("mountinfo"));
    let _ = fs::remove_dir_all(&t);
}
