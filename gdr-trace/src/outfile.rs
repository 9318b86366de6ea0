//! Files gdr-trace writes (`record -o`, `audit --log`): created new, never through a symlink,
//! readable by their owner only. A privileged tracer that opened an existing name would
//! truncate whatever file that name (or a symlink planted there) points at; and recordings
//! hold every tenant's process names, containers and byte counts.

use std::{
    fs::{File, OpenOptions},
    io::ErrorKind,
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use crate::exit::Fatal;

/// Creates `path` (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600); `what` names it in errors.
pub fn create_private(path: &Path, what: &str) -> Result<File, Fatal> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            Fatal::cannot_run(match e.kind() {
                ErrorKind::AlreadyExists => format!(
                    "{what} {} already exists: gdr-trace never overwrites a file (remove it or choose a new name)",
                    path.display()
                ),
                _ => format!("cannot create {what} {}: {e}", path.display()),
            })
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
        std::fs::remove_dir_all(dir).unwrap();
    }
}
