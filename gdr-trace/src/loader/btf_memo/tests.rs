use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::loader::btf::KernelBtf;

/// A fresh directory for one test (its memo lives in `memo/` under it, made by `save`).
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gdr-btf-memo-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn saved(path: &Path, boot: &str, answers: &[(&str, Option<u32>)]) {
    let mut m = Memo::open(path, boot, 100);
    for (q, a) in answers {
        m.remember(q.to_string(), *a);
    }
    m.save();
}

#[test]
fn answers_are_remembered_for_this_boot_only() {
    let d = scratch("boot");
    let path = d.join("memo/btf-memo.json");
    let first = Memo::open(&path, "boot-1", 100);
    assert!(!first.loaded, "no file yet");
    saved(&path, "boot-1", &[("offset vmlinux file.f_inode", Some(32)), ("func vmlinux nope", None)]);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);

    let again = Memo::open(&path, "boot-1", 100);
    assert!(again.loaded);
    assert_eq!(again.known("offset vmlinux file.f_inode"), Some(Some(32)));
    assert_eq!(again.known("func vmlinux nope"), Some(None), "an absence is remembered too");
    assert_eq!(again.known("offset vmlinux file.f_mode"), None);

    for (boot, size) in [("boot-2", 100), ("boot-1", 101)] {
        let other = Memo::open(&path, boot, size);
        assert!(!other.loaded, "{boot} {size}");
        assert_eq!(other.known("offset vmlinux file.f_inode"), None, "{boot} {size}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_memo_someone_else_could_write_is_not_read() {
    let d = scratch("trust");
    let path = d.join("memo/btf-memo.json");
    saved(&path, "b", &[("q", Some(1))]);
    assert!(Memo::open(&path, "b", 100).loaded);

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(!Memo::open(&path, "b", 100).loaded, "a world-writable file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

    std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(!Memo::open(&path, "b", 100).loaded, "a world-writable directory");
    std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o700)).unwrap();

    let link = d.join("memo/link.json");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(!Memo::open(&link, "b", 100).loaded, "a symlink");

    std::fs::write(&path, b"{ not json").unwrap();
    assert!(!Memo::open(&path, "b", 100).loaded, "garbage");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn remembered_answers_need_no_btf_and_modules_are_asked_by_their_bytes() {
    let d = scratch("kbtf");
    let path = d.join("memo/btf-memo.json");
    let btf_dir = d.join("btf");
    std::fs::create_dir_all(&btf_dir).unwrap();
    // A module "BTF" file: its answers are keyed by a hash of its bytes.
    std::fs::write(btf_dir.join("ib_core"), b"module btf v1").unwrap();
    let key = format!("ib_core@{:016x}", bytes_hash(b"module btf v1"));
    saved(
        &path,
        "b",
        &[
            ("vmlinux parses", Some(1)),
            ("offset vmlinux ib_device.name", None),
            (&format!("offset {key} ib_device.name"), Some(1048)),
            ("func vmlinux vfs_read", Some(77)),
            (&format!("func {key} ib_umem_get"), Some(9)),
            ("offset vmlinux pt_regs.di", Some(112)),
        ],
    );
    // No vmlinux BTF in this directory at all: every answer comes from the memo.
    let k = KernelBtf::with_memo(&btf_dir, Memo::open(&path, "b", 100));
    assert!(k.has_vmlinux());
    assert_eq!(k.member_offset("ib_device", "name", &["ib_core"]), Some(1048));
    assert_eq!(k.func_id("vfs_read", None), Ok(77));
    assert_eq!(k.func_id("ib_umem_get", Some("ib_core")), Ok(9));
    assert_eq!(k.vmlinux_offset("pt_regs", "di"), Some(112));
    assert!(k.func_id("ib_umem_get", Some("mlx5_ib")).unwrap_err().contains("no BTF for module mlx5_ib"));

    // The module's BTF changed (reloaded, upgraded): its old answers no longer apply, and with
    // no parsable BTF there is none.
    std::fs::write(btf_dir.join("ib_core"), b"module btf v2").unwrap();
    let k = KernelBtf::with_memo(&btf_dir, Memo::open(&path, "b", 100));
    assert_eq!(k.func_id("ib_umem_get", Some("ib_core")).ok(), None);
    assert_eq!(k.member_offset("ib_device", "name", &["ib_core"]), None);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_running_kernels_answers_come_back_the_same_from_the_memo() {
    let sys = Path::new("/sys/kernel/btf");
    let Ok(meta) = std::fs::metadata(sys.join("vmlinux")) else {
        eprintln!(
            "SKIP the_running_kernels_answers_come_back_the_same_from_the_memo: no {}/vmlinux",
            sys.display()
        );
        return;
    };
    let d = scratch("real");
    let path = d.join("memo/btf-memo.json");
    let parsed = KernelBtf::with_memo(sys, Memo::open(&path, "b", meta.len()));
    let id = parsed.func_id("vfs_read", None).expect("vmlinux BTF has vfs_read");
    let off = parsed.vmlinux_offset("file", "f_inode").expect("file.f_inode");
    assert!(parsed.has_vmlinux());
    parsed.save_memo();

    // The same questions of a directory with no BTF: the memo answers them alike.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let remembered = KernelBtf::with_memo(&empty, Memo::open(&path, "b", meta.len()));
    assert!(remembered.memo_loaded());
    assert_eq!(remembered.func_id("vfs_read", None), Ok(id));
    assert_eq!(remembered.vmlinux_offset("file", "f_inode"), Some(off));
    std::fs::remove_dir_all(&d).unwrap();
}

/// An RDMA core struct is read from the BTF of the module that defines it whenever that module
/// is loaded as a module: vmlinux's copy of `struct ib_device` (the inbox layout) is no answer
/// on a node running MLNX_OFED's ib_core without BTF; where ib_core is built in, vmlinux's is.
#[test]
fn a_loaded_modules_struct_is_never_taken_from_vmlinux() {
    let d = scratch("owned");
    let path = d.join("memo/btf-memo.json");
    let btf_dir = d.join("sys/kernel/btf");
    std::fs::create_dir_all(&btf_dir).unwrap();
    std::fs::write(btf_dir.join("vmlinux"), b"vmlinux").unwrap();
    saved(&path, "b", &[("vmlinux parses", Some(1)), ("offset vmlinux ib_device.name", Some(1048))]);
    let k = KernelBtf::with_memo(&btf_dir, Memo::open(&path, "b", 100));
    assert_eq!(k.owned_member_offset("ib_device", "name", &["ib_core"]), Some(1048), "built in: vmlinux's");
    std::fs::create_dir_all(d.join("sys/module/ib_core")).unwrap();
    std::fs::write(d.join("sys/module/ib_core/initstate"), "live\n").unwrap();
    let k = KernelBtf::with_memo(&btf_dir, Memo::open(&path, "b", 100));
    assert_eq!(
        k.owned_member_offset("ib_device", "name", &["ib_core"]),
        None,
        "a module without BTF: unknown"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
