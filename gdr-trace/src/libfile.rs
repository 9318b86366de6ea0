//! Opening a library the tracer parses and puts uprobes on, without letting the traced process
//! steer it.
//!
//! A traced process (maybe in a container, maybe hostile) names its libraries in
//! /proc/PID/maps. Opening `/proc/PID/root<path>` would follow an absolute symlink planted at
//! that name against the *tracer's* root: the tracer would parse, and hook, any host file. So a
//! library is opened once, as the very file the process maps (/proc/PID/map_files/, or the
//! name resolved inside the process's root with `openat2(RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS)`), kept only when it is a regular file whose device and inode are
//! the ones the maps line gives, and under a size cap. Parsing reads that descriptor and the
//! uprobes attach through `/proc/self/fd/N`: no path is resolved twice, and there is no
//! fallback to a host path of the same name. Only the parts of it the ELF parser asks for are
//! read, [`bounded::MAX_SYMBOL_BYTES`] at most ([`bounded`]).

pub mod bounded;

use std::{
    os::fd::{AsFd, AsRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use crate::procfs::MapsEntry;

/// The largest library file the tracer opens (libcuda is ~100 MB; more is not a library). Of
/// it, only the headers and symbol tables are read, [`bounded::MAX_SYMBOL_BYTES`] at most.
pub const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// A library file, opened once and checked; parse it with [`LibraryFile::symbols`] and attach
/// through [`LibraryFile::fd_path`].
#[derive(Debug)]
pub struct LibraryFile {
    fd: OwnedFd,
    /// What to call it in messages (`probes`' location).
    pub shown: String,
    pub size: u64,
}

impl LibraryFile {
    /// A path the operator gave (`--libibverbs`) or a system library directory's file: still
    /// only a regular file under the size cap (a FIFO would hang the read, /dev/zero would
    /// never end).
    pub fn open_path(path: &Path) -> Result<Self, String> {
        Self::open_path_capped(path, MAX_LIBRARY_BYTES)
    }

    pub fn open_path_capped(path: &Path, cap: u64) -> Result<Self, String> {
        let shown = path.display().to_string();
        let opath = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("{shown}: {e}"))?;
        Self::checked(opath, None, shown, cap)
    }

    /// The file `pid` maps at `entry`, and nothing else: see the module's comment.
    pub fn open_mapped(pid: u32, entry: &MapsEntry) -> Result<Self, String> {
        Self::open_mapped_capped(pid, entry, MAX_LIBRARY_BYTES)
    }

    pub fn open_mapped_capped(pid: u32, entry: &MapsEntry, cap: u64) -> Result<Self, String> {
        let shown = format!(
            "{}{} in pid {pid} (dev {:x}:{:x} inode {})",
            entry.path,
            if entry.deleted { " (deleted)" } else { "" },
            entry.dev_major,
            entry.dev_minor,
            entry.inode
        );
        let want = Some((entry.dev_major, entry.dev_minor, entry.inode));
        // The mapping itself: exact even when the name was unlinked or replaced. The kernel
        // asks CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) for it.
        let map_file = format!("/proc/{pid}/map_files/{}", entry.range);
        let by_map = rustix::fs::open(map_file.as_str(), OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("{map_file}: {e}"))
            .and_then(|fd| Self::checked(fd, want, shown.clone(), cap));
        let map_err = match by_map {
            Ok(f) => return Ok(f),
            Err(e) => e,
        };
        // The name, resolved as the process would: inside its root, no magic links.
        let root = format!("/proc/{pid}/root");
        let in_root = rustix::fs::open(
            root.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{root}: {e}"))
        .and_then(|dir| {
            rustix::fs::openat2(
                &dir,
                entry.path.as_str(),
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(|e| format!("{} in pid {pid}'s root: {e}", entry.path))
        })
        .and_then(|fd| Self::checked(fd, want, shown.clone(), cap));
        in_root.map_err(|e| format!("not opened safely ({map_err}; {e}); no host path is used instead"))
    }

    /// Checks the `O_PATH` descriptor (no open side effects yet: a device is never opened),
    /// then opens it for reading through /proc/self/fd, which is the same inode.
    fn checked(
        opath: OwnedFd,
        want: Option<(u32, u32, u64)>,
        shown: String,
        cap: u64,
    ) -> Result<Self, String> {
        let st = rustix::fs::fstat(&opath).map_err(|e| format!("{shown}: {e}"))?;
        let ftype = FileType::from_raw_mode(st.st_mode);
        if ftype != FileType::RegularFile {
            return Err(format!("{shown}: not a regular file ({ftype:?})"));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size > cap {
            return Err(format!("{shown}: {size} bytes, more than the {cap} a library may have"));
        }
        let fd = rustix::fs::open(
            format!("/proc/self/fd/{}", opath.as_raw_fd()).as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| format!("{shown}: {e}"))?;
        if let Some(want) = want {
            let got = mapped_identity(&fd, size).map_err(|e| format!("{shown}: {e}"))?;
            if got != want {
                return Err(format!(
                    "{shown}: the name leads to another file (dev {:x}:{:x} inode {}, mapped: dev {:x}:{:x} inode {})",
                    got.0, got.1, got.2, want.0, want.1, want.2
                ));
            }
        }
        Ok(Self { fd, shown, size })
    }

    /// The file for its ELF parser: read on demand, at most [`bounded::MAX_SYMBOL_BYTES`] (and
    /// never past the size it had when checked).
    pub fn symbols(&self) -> Result<bounded::BoundedElf, String> {
        let file = std::fs::File::from(self.fd.as_fd().try_clone_to_owned().map_err(|e| e.to_string())?);
        Ok(bounded::BoundedElf::new(file, self.size, bounded::MAX_SYMBOL_BYTES))
    }

    /// The path uprobes attach through: this descriptor, whatever the name now points at.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Device (major, minor) and inode of the opened file the way /proc/PID/maps shows them.
    pub fn maps_identity(&self) -> Result<(u32, u32, u64), String> {
        mapped_identity(&self.fd, self.size)
    }

    /// Device and inode of the opened file.
    pub fn identity(&self) -> Result<(u64, u64), String> {
        let st = rustix::fs::fstat(&self.fd).map_err(|e| e.to_string())?;
        Ok((st.st_dev, st.st_ino))
    }
}

/// The device and inode /proc/PID/maps shows for a mapping of `fd`: mapped here for a moment
/// and read back from our own maps. Stacking filesystems make this differ from `fstat` (before
/// Linux 6.8 maps shows an overlayfs file's real inode), so the comparison with the traced
/// process's maps line is made the kernel's way on both sides.
fn mapped_identity(fd: &OwnedFd, size: u64) -> Result<(u32, u32, u64), String> {
    if size == 0 {
        return Err("an empty file".into());
    }
    // SAFETY: a fresh one-page read-only private mapping of a file we hold open, unmapped below
    // before anything else uses it; no memory is read through it.
    let addr = unsafe {
        libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, fd.as_raw_fd(), 0)
    };
    if addr == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    let start = addr as u64;
    let found = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string()).map(|maps| {
        maps.lines()
            .find(|l| l.split('-').next().and_then(|a| u64::from_str_radix(a, 16).ok()) == Some(start))
            .and_then(crate::procfs::parse_maps_line)
    });
    // SAFETY: the mapping made above, of that length.
    unsafe { libc::munmap(addr, 4096) };
    let e = found?.ok_or("our own mapping of it is not in /proc/self/maps")?;
    Ok((e.dev_major, e.dev_minor, e.inode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gdr-libfile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let d = tmp("fifo");
        let fifo = d.join("libibverbs.so.1");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = LibraryFile::open_path(&fifo).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = LibraryFile::open_path(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_file_over_the_cap_is_refused() {
        let d = tmp("cap");
        let big = d.join("libbig.so");
        std::fs::File::create(&big).unwrap().set_len(4096).unwrap();
        let e = LibraryFile::open_path_capped(&big, 1024).unwrap_err();
        assert!(e.contains("more than the 1024"), "{e}");
        let f = LibraryFile::open_path_capped(&big, 4096).unwrap();
        let e = crate::loader::elf::symbol_file_offsets(&f.symbols().unwrap(), "big", "f").unwrap_err();
        assert!(e.contains("parsing big"), "{e}");
        assert!(f.fd_path().starts_with("/proc/self/fd/"));
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A sparse gigabyte named like a library costs a failed parse of a
    /// few bytes, not a gigabyte of memory.
    #[test]
    fn a_sparse_gigabyte_library_is_not_read_whole() {
        let d = tmp("sparse");
        let big = d.join("libcuda.so.0");
        std::fs::File::create(&big).unwrap().set_len(MAX_LIBRARY_BYTES).unwrap();
        let f = LibraryFile::open_path(&big).unwrap();
        let r = f.symbols().unwrap();
        let e = crate::loader::elf::offsets_by_name(&r, "sparse", &["cuInit"]).unwrap_err();
        assert!(e.contains("parsing sparse"), "{e}");
        assert!(r.used() <= 4096, "read {} bytes of a file of zeros", r.used());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_mapped_name_leading_to_another_inode_is_refused() {
        // This process's own mapping of the test binary, but the inode of some other file:
        // the check must refuse it even though the name opens.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap().to_string();
        let mut entry = crate::procfs::find_in_maps(&maps, &name).expect("own executable mapped");
        let pid = std::process::id();
        let f = LibraryFile::open_mapped(pid, &entry).expect("own mapping opens");
        assert!(f.size > 0);
        entry.inode += 1;
        entry.range = "0-0".into();
        let e = LibraryFile::open_mapped(pid, &entry).unwrap_err();
        assert!(e.contains("leads to another file") && e.contains("no host path"), "{e}");
    }
}
