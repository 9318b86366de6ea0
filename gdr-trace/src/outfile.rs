//! Files gdr-trace writes (`record -o`, `audit --log`): created new, never through a symlink,
//! readable by their owner only. A privileged tracer that opened an existing name would
//! truncate whatever file that name (or a symlink planted there) points at; and recordings
//! hold every tenant's process names, containers and byte counts. No component of the path may
//! be a symlink either (`openat2(RESOLVE_NO_SYMLINKS)`): a directory someone swapped for a link
//! would lead the file elsewhere.

use std::{
    fs::{File, OpenOptions},
    io::ErrorKind,
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use crate::exit::Fatal;

/// Creates `path` (O_CREAT | O_EXCL, mode 0600, through no symlink at all); `what` names it in
/// errors.
pub fn create_private(path: &Path, what: &str) -> Result<File, Fatal> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat2(CWD, path, flags, Mode::from_raw_mode(0o600), ResolveFlags::NO_SYMLINKS) {
        Ok(fd) => return Ok(File::from(fd)),
        Err(rustix::io::Errno::LOOP) => {
            return Err(Fatal::cannot_run(format!(
                "cannot create {what} {}: a component of the path is a symlink (give the real path)",
                path.display()
            )))
        }
        // Before Linux 5.6: no openat2; the last component is still never a link.
        Err(rustix::io::Errno::NOSYS) => {}
        Err(e) => return Err(error(path, what, std::io::Error::from(e))),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| error(path, what, e))
}

fn error(path: &Path, what: &str, e: std::io::Error) -> Fatal {
    Fatal::cannot_run(match e.kind() {
        ErrorKind::AlreadyExists => format!(
            "{what} {} already exists: gdr-trace never overwrites a file (remove it or choose a new name)",
            path.display()
        ),
        _ => format!("cannot create {what} {}: {e}", path.display()),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn new_files_are_private_and_existing_names_and_links_are_refused() {
        let dir = std::env::temp_dir().join(format!("gdr-outfile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let new = dir.join("rec.ndjson");
        create_private(&new, "the recording").unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().permissions().mode() & 0o777, 0o600);
        let e = create_private(&new, "the recording").unwrap_err();
        assert!(e.message.contains("already exists"), "{e}");
        let target = dir.join("precious");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_private(&link, "the audit log").is_err());
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
        assert!(create_private(&dangling, "the audit log").is_err());
        assert!(!dir.join("nowhere").exists(), "no file made through a dangling link");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // A symlinked directory on the way is refused too, and nothing is made there.
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("out")).unwrap();
        let e = create_private(&dir.join("out").join("rec.ndjson"), "the recording").unwrap_err();
        assert!(e.message.contains("symlink"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
