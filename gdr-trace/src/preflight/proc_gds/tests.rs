use std::fs;

use super::*;
use crate::storage::gds_facts::*;

fn tree(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gdr-gds-facts-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn environ_blocks_parse() {
    let e = parse_environ(b"PATH=/bin\0CUFILE_ENV_PATH_JSON=/opt/c.json\0EMPTY=\0junk\0");
    assert_eq!(e, env(&[("PATH", "/bin"), ("CUFILE_ENV_PATH_JSON", "/opt/c.json"), ("EMPTY", "")]));
}

#[test]
fn container_private_root_config_and_environ() {
    // A container-style private root: its own etc/cufile.json (with comments), and a process
    // directory with environ and root, as /proc/PID shows them. The host's file is elsewhere.
    let t = tree("container");
    let root = t.join("proc/42/root");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::create_dir_all(root.join("work")).unwrap();
    fs::write(
        root.join("etc/cufile.json"),
        "{ // the container's own\n \"properties\": { \"force_compat_mode\": true, /* c */ \"allow_compat_mode\": true, },\n \"fs\": { \"lustre\": { \"posix_gds_min_kb\": 64 } } }",
    )
    .unwrap();
    fs::write(t.join("proc/42/environ"), b"HOME=/root\0").unwrap();
    let c = read_process_config(&t.join("proc"), 42);
    assert_eq!(c.error, None);
    assert_eq!(c.file.as_deref(), Some("/etc/cufile.json"));
    assert_eq!(c.effective.force_compat_mode, Some((true, "/etc/cufile.json".into())));
    assert_eq!(c.effective.allow_compat_mode, Some((true, "/etc/cufile.json".into())));
    assert_eq!(c.effective.lustre_posix_gds_min_kb, Some((64, "/etc/cufile.json".into())));
    assert_eq!(c.effective.use_pci_p2pdma, None);

    // CUFILE_ENV_PATH_JSON names a file inside the same root; the environment overrides it.
    fs::write(
        root.join("work/app.json"),
        "{\"properties\": {\"use_pci_p2pdma\": true, \"force_compat_mode\": true}}",
    )
    .unwrap();
    fs::write(
        t.join("proc/42/environ"),
        b"CUFILE_ENV_PATH_JSON=/work/app.json\0CUFILE_FORCE_COMPAT_MODE=false\0",
    )
    .unwrap();
    let c = read_process_config(&t.join("proc"), 42);
    assert_eq!(c.file.as_deref(), Some("/work/app.json"));
    assert_eq!(c.effective.use_pci_p2pdma, Some((true, "/work/app.json".into())));
    assert_eq!(c.effective.force_compat_mode, Some((false, "CUFILE_FORCE_COMPAT_MODE=false".into())));
    assert_eq!(c.effective.lustre_posix_gds_min_kb, None, "the /etc file is not read when another is named");
    let _ = fs::remove_dir_all(&t);
}

#[test]
fn missing_named_file_and_bad_json_are_errors_missing_default_is_not() {
    let t = tree("errors");
    let c = read_config(&t, &t, &env(&[]));
    assert_eq!(c, ProcConfig::default(), "no /etc/cufile.json: cuFile defaults, no error");
    let c = read_config(&t, &t, &env(&[("CUFILE_ENV_PATH_JSON", "/nope.json")]));
    assert!(c.error.as_deref().is_some_and(|e| e.starts_with("CUFILE_ENV_PATH_JSON=/nope.json")), "{c:?}");
    fs::create_dir_all(t.join("etc")).unwrap();
    fs::write(t.join("etc/cufile.json"), "{ \"properties\": ").unwrap();
    let c = read_config(&t, &t, &env(&[]));
    assert!(c.error.as_deref().is_some_and(|e| e.contains("not JSON")), "{c:?}");
    // A relative CUFILE_ENV_PATH_JSON is relative to the process's working directory.
    fs::write(t.join("rel.json"), "{\"properties\": {\"allow_compat_mode\": false}}").unwrap();
    let c = read_config(&t.join("etc"), &t, &env(&[("CUFILE_ENV_PATH_JSON", "rel.json")]));
    assert_eq!(c.effective.allow_compat_mode, Some((false, "rel.json".into())));
    // Only the environment: still an effective value.
    let c = read_config(&t.join("none"), &t, &env(&[("CUFILE_ALLOW_COMPAT_MODE", "0")]));
    assert_eq!(c.effective.allow_compat_mode, Some((false, "CUFILE_ALLOW_COMPAT_MODE=0".into())));
    let _ = fs::remove_dir_all(&t);
}

const MOUNTINFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
30 22 0:25 / /dev/shm rw,nosuid shared:4 - tmpfs tmpfs rw
41 22 0:50 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw,lowerdir=/a
42 22 7:0 / /snap/core/1 ro - squashfs /dev/loop0 ro
43 22 0:60 / /mnt/my\\040data rw - nfs4 srv:/x rw
garbage line
";

#[test]
fn mountinfo_and_device_types() {
    let m = parse_mountinfo(MOUNTINFO);
    assert_eq!(m.len(), 5);
    assert_eq!(
        m[0],
        Mount {
            major: 259,
            minor: 2,
            mount_point: "/".into(),
            fstype: "ext4".into(),
            source: "/dev/nvme0n1p2".into()
        }
    );
    assert_eq!(m[4].mount_point, "/mnt/my data");
    assert_eq!(fstype_of_dev(&m, 0, 25), Some("tmpfs"));
    assert_eq!(fstype_of_dev(&m, 0, 50), Some("overlay"));
    assert_eq!(fstype_of_dev(&m, 7, 0), Some("squashfs"));
    assert_eq!(fstype_of_dev(&m, 9, 9), None);
}

#[test]
fn destinations_in_gpu_mappings() {
    let maps = "\
7f0000000000-7f0000200000 rw-s 00000000 00:05 123 /dev/nvidia0
7f0000200000-7f0000400000 rw-s 00000000 00:05 124 /dev/nvidia-uvm
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
7f0000600000-7f0000700000 rw-s 00000000 00:05 125 /dev/nvidiactl
7f0000700000-7f0000800000 r--p 00000000 103:02 99 /usr/lib/libcufile.so.0
";
    assert_eq!(dest_is_gpu(maps, 0x7f00_0000_1000), Some(true), "device memory mapping");
    assert_eq!(dest_is_gpu(maps, 0x7f00_0040_0000), Some(false), "anonymous host memory");
    assert_eq!(dest_is_gpu(maps, 0x7f00_0070_0000), Some(false), "a file mapping is host memory");
    assert_eq!(dest_is_gpu(maps, 0x7f00_0020_0000), None, "uvm: no evidence");
    assert_eq!(dest_is_gpu(maps, 0x7f00_0060_0000), None, "nvidiactl: no evidence");
    assert_eq!(dest_is_gpu(maps, 0x1000), None, "in no mapping");
}

#[test]
fn facts_read_from_a_proc_and_sys_tree() {
    let t = std::env::temp_dir().join(format!("gdr-gds-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    let pd = t.join("proc/7");
    std::fs::create_dir_all(pd.join("root/dev")).unwrap();
    std::fs::create_dir_all(pd.join("root/etc")).unwrap();
    std::fs::create_dir_all(t.join("sys/module")).unwrap();
    std::fs::create_dir_all(t.join("sys/devices")).unwrap();
    std::fs::write(pd.join("mountinfo"), "22 1 0:40 / / rw - overlay overlay rw\n").unwrap();
    std::fs::write(pd.join("environ"), b"A=b\0").unwrap();
    std::fs::write(pd.join("root/etc/cufile.json"), "{\"properties\":{\"allow_compat_mode\":false}}")
        .unwrap();
    let f = read_proc_facts(&t.join("proc"), &t.join("sys"), 7);
    assert_eq!(f.nvidia_fs, Some(false), "module not loaded");
    assert_eq!(f.mounts[0].fstype, "overlay");
    assert_eq!(f.config.effective.allow_compat_mode, Some((false, "/etc/cufile.json".into())));
    std::fs::create_dir_all(t.join("sys/module/nvidia_fs")).unwrap();
    assert_eq!(read_proc_facts(&t.join("proc"), &t.join("sys"), 7).nvidia_fs, Some(false), "no device node");
    std::fs::write(pd.join("root/dev/nvidia-fs0"), "").unwrap();
    assert_eq!(read_proc_facts(&t.join("proc"), &t.join("sys"), 7).nvidia_fs, Some(true));
    // nvidia-fs built into another module: its /proc/driver/nvidia-fs says it is there.
    std::fs::remove_dir(t.join("sys/module/nvidia_fs")).unwrap();
    assert_eq!(read_proc_facts(&t.join("proc"), &t.join("sys"), 7).nvidia_fs, Some(false));
    std::fs::create_dir_all(t.join("proc/driver/nvidia-fs")).unwrap();
    assert_eq!(read_proc_facts(&t.join("proc"), &t.join("sys"), 7).nvidia_fs, Some(true));
    // The kernel's P2PDMA, from the tree's own evidence: unknown, then Debian 6.1's symbols.
    assert_eq!(f.kernel_p2pdma, None, "no release, config or symbols");
    std::fs::create_dir_all(t.join("proc/sys/kernel")).unwrap();
    std::fs::write(t.join("proc/sys/kernel/osrelease"), "6.1.0-57-amd64\n").unwrap();
    std::fs::write(t.join("proc/kallsyms"), "0000000000000000 T vfs_read\n").unwrap();
    let k = read_proc_facts(&t.join("proc"), &t.join("sys"), 7).kernel_p2pdma.expect("known");
    assert!(!k.0 && k.1.contains("6.1.0-57-amd64 built without CONFIG_PCI_P2PDMA"), "{k:?}");
    std::fs::write(t.join("proc/sys/kernel/osrelease"), "6.8.0-1-generic\n").unwrap();
    std::fs::write(t.join("proc/kallsyms"), "0000000000000000 d p2pdma_pgmap_ops\n").unwrap();
    assert_eq!(read_proc_facts(&t.join("proc"), &t.join("sys"), 7).p2pdma().map(|k| k.0), Some(true));
    let _ = std::fs::remove_dir_all(&t);
}

/// On this machine's real kernel: for every mount point whose superblock magic the table knows,
/// the type mountinfo gives the file's device is the one the magic names (the two ways the
/// reasons learn a filesystem agree, up to the names that share a magic).
#[test]
fn superblock_magic_and_mountinfo_agree_on_this_kernel() {
    use std::os::unix::fs::MetadataExt;
    let mounts = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
    assert!(!mounts.is_empty(), "this process has mounts");
    let mut checked = Vec::new();
    for m in &mounts {
        let Ok(md) = fs::metadata(&m.mount_point) else { continue };
        let c = std::ffi::CString::new(m.mount_point.as_str()).unwrap();
        // SAFETY: a valid C string and a zeroed statfs for the kernel to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
            continue;
        }
        let Some(by_magic) = crate::storage::gds_mode::fs_from_magic(st.f_type as u64) else { continue };
        let dev = md.dev();
        let (ma, mi) = (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff));
        let by_mount = fstype_of_dev(&mounts, ma as u32, mi as u32).unwrap();
        // One magic, several names: devtmpfs is shmem (TMPFS_MAGIC), ext2/3 share EXT4's.
        let alias = matches!((by_magic, by_mount), ("tmpfs", "devtmpfs") | ("ext4", "ext2" | "ext3"));
        assert!(
            by_magic == by_mount || alias,
            "{}: magic says {by_magic}, mountinfo {by_mount}",
            m.mount_point
        );
        checked.push(by_magic);
    }
    assert!(!checked.is_empty(), "no mount with a known magic: {mounts:?}");
}

/// A live process's own configuration: its environment names the file, read through its root.
#[test]
fn a_live_process_configuration_through_its_proc_entry() {
    let dir = std::env::temp_dir().join(format!("gdr-gds-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("cufile.json");
    std::fs::write(&json, "{ // c\n \"properties\": { \"force_compat_mode\": true } }\n").unwrap();
    let mut child =
        std::process::Command::new("sleep").arg("30").env("CUFILE_ENV_PATH_JSON", &json).spawn().unwrap();
    // Until it has exec'd: before, its environment is still this process's.
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..10_000 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
            break;
        }
        std::thread::yield_now();
    }
    let f = read_proc_facts(Path::new("/proc"), Path::new("/sys"), child.id());
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(f.config.file.as_deref(), Some(json.to_str().unwrap()), "{:?}", f.config);
    assert_eq!(f.config.effective.force_compat_mode, Some((true, json.display().to_string())));
}
