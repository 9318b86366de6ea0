//! What the mounted filesystems say about a device number (a `/proc/PID/mountinfo` the live
//! layer read): where it is mounted and which filesystem it is. The live layer uses it for
//! counter entries the kernel could not name: a synthetic filesystem's are not storage;
//! filesystem metadata (the block device's own page cache, which a directory walk fills; a
//! filesystem's internal inode 1) is named as such; the rest get a name that says where they
//! are ("inode 7 on /", not "dev 254:0 inode 7").

use std::collections::HashMap;

/// A mounted filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: String,
    pub fs_type: String,
}

/// Kernel `dev_t` (major << 20 | minor) -> the first mount of it.
pub fn parse(mountinfo: &str) -> HashMap<u32, Mount> {
    let mut out = HashMap::new();
    for m in crate::parse::mountinfo::parse_mountinfo(mountinfo) {
        let mount = Mount { mount_point: m.mount_point, fs_type: m.fstype };
        out.entry((m.major << 20) | m.minor).or_insert(mount);
    }
    out
}

/// What an entry the kernel could not name is: None when it is no storage file (a synthetic
/// filesystem, or an anonymous device the process has not mounted), else its name.
/// `own_mounts`: `mounts` are the process's own (else another namespace's: a device not
/// mounted there may be mounted in the process's, a container's overlay). `is_block`: whether
/// a device number is a block device's (`/sys/dev/block`).
pub fn unnamed(
    mounts: &HashMap<u32, Mount>,
    own_mounts: bool,
    dev: u32,
    ino: u64,
    is_block: impl Fn(u32) -> bool,
) -> Option<String> {
    let (major, minor) = (dev >> 20, dev & 0xfffff);
    // The block devices' own inodes live on an internal anonymous superblock, numbered by
    // the device (the kernel's MKDEV): their pages are a filesystem's metadata blocks.
    if let Ok(bdev) = u32::try_from(ino) {
        if major == 0 && bdev >> 20 != 0 && is_block(bdev) {
            let (bmaj, bmin) = (bdev >> 20, bdev & 0xfffff);
            return Some(match mounts.get(&bdev) {
                Some(m) => format!(
                    "filesystem metadata of {} ({}, block device {bmaj}:{bmin})",
                    m.mount_point, m.fs_type
                ),
                None => format!("block device {bmaj}:{bmin} (read as a device, not through a file)"),
            });
        }
    }
    match mounts.get(&dev) {
        Some(m) if gdr_trace_common::storage::PSEUDO_FS_NAMES.contains(&m.fs_type.as_str()) => None,
        // ext4's block-allocation cache and btrfs's tree of trees: inodes of number 1 that
        // hold no file's data.
        Some(m) if ino == 1 && matches!(m.fs_type.as_str(), "ext2" | "ext3" | "ext4" | "btrfs") => {
            Some(format!("filesystem metadata of {} ({})", m.mount_point, m.fs_type))
        }
        Some(m) => Some(format!("inode {ino} on {} ({}, name unknown)", m.mount_point, m.fs_type)),
        // Anonymous devices (major 0) of nothing the process has mounted: the kernel's own.
        None if major == 0 && own_mounts => None,
        None => Some(format!("dev {major}:{minor} inode {ino} (not mounted here)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
22 27 0:21 / /proc rw,nosuid - proc proc rw
23 27 0:22 / /sys rw,nosuid - sysfs sysfs rw
40 27 259:3 / /mnt/my\\040data rw - xfs /dev/nvme0n1 rw
";

    #[test]
    fn unnamed_entries_are_named_by_their_mount_or_left_out() {
        let m = parse(MOUNTINFO);
        let vda = |d: u32| d == 254 << 20;
        let un = |own, dev, ino| unnamed(&m, own, dev, ino, vda);
        assert_eq!(m[&(254 << 20)].mount_point, "/");
        assert_eq!(m[&((259 << 20) | 3)].mount_point, "/mnt/my data");
        assert_eq!(un(true, 254 << 20, 7).as_deref(), Some("inode 7 on / (ext4, name unknown)"));
        assert_eq!(un(false, 21, 4026531840), None, "procfs is not storage");
        assert_eq!(un(true, 3, 7), None, "an anonymous device nothing is mounted from");
        // Another namespace's mounts can't say a device is mounted nowhere.
        assert_eq!(un(false, 3, 7).as_deref(), Some("dev 0:3 inode 7 (not mounted here)"));
        assert_eq!(un(true, (8 << 20) | 1, 12).as_deref(), Some("dev 8:1 inode 12 (not mounted here)"));
    }

    /// A directory walk fills the block device's own page cache, and ext4's allocator fills
    /// its inode 1: metadata, named so whoever's mounts tell it (a process gone included),
    /// never "dev 0:3 inode 266338304" or "inode 1".
    #[test]
    fn filesystem_metadata_is_named_as_metadata() {
        let m = parse(MOUNTINFO);
        let vda = |d: u32| d == 254 << 20;
        for own in [true, false] {
            assert_eq!(
                unnamed(&m, own, 3, 266338304, vda).as_deref(),
                Some("filesystem metadata of / (ext4, block device 254:0)")
            );
            assert_eq!(
                unnamed(&m, own, 254 << 20, 1, vda).as_deref(),
                Some("filesystem metadata of / (ext4)")
            );
        }
        let sdb = (8 << 20) | 16;
        assert_eq!(
            unnamed(&m, true, 3, u64::from(sdb), |d| d == sdb).as_deref(),
            Some("block device 8:16 (read as a device, not through a file)")
        );
        // An inode number that is no block device's stays what it was; xfs's inode 1 is a file's.
        assert_eq!(unnamed(&m, true, 3, 266338304, |_| false), None);
        assert_eq!(
            unnamed(&m, true, (259 << 20) | 3, 1, vda).as_deref(),
            Some("inode 1 on /mnt/my data (xfs, name unknown)")
        );
    }
}
