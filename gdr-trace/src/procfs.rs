//! What the tracer reads from /proc about processes and the running kernel.

use std::{
    fs,
    path::{Path, PathBuf},
};

mod gpu_use;
pub use gpu_use::GpuUseCache;

/// Whether a process with this PID runs now (exists and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) or a dying task is not alive: it does
    // no more I/O, and a trace of it must end rather than wait for a parent that never reaps.
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x") | None)
}

/// Kernel `dev_t` (major << 20 | minor) -> the userspace encoding `stat` reports.
pub fn user_dev(kdev: u32) -> u64 {
    libc::makedev(kdev >> 20, kdev & 0xfffff)
}

/// The process's command name, or None if it is gone.
pub fn comm(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim_end().to_string())
}

/// Whether a process uses a GPU: it has an NVIDIA device open (/dev/nvidia*) or libcuda
/// mapped. None when the process is gone or unreadable.
pub fn uses_gpu(pid: u32) -> Option<bool> {
    // A zombie (exited, not yet reaped) has no files and no memory map: that says nothing.
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if maps.is_empty() {
        return None;
    }
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let nvidia_fd = fds.flatten().any(|e| {
        fs::read_link(e.path()).is_ok_and(|t| t.to_str().is_some_and(|t| t.starts_with("/dev/nvidia")))
    });
    Some(nvidia_fd || find_in_maps(&maps, "libcuda.so").is_some())
}

/// Direct children of `pid` (from /proc/PID/task/*/children).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        if let Ok(s) = fs::read_to_string(task.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|t| t.parse::<u32>().ok()));
        }
    }
    out
}

/// Every process now (/proc's numeric entries), or `pid` and its descendants.
pub fn processes(tree_of: Option<u32>) -> Vec<u32> {
    let Some(root) = tree_of else {
        let Ok(dir) = fs::read_dir("/proc") else { return vec![] };
        return dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    };
    let (mut out, mut todo) = (vec![], vec![root]);
    while let Some(p) = todo.pop() {
        if out.contains(&p) {
            continue;
        }
        out.push(p);
        todo.extend(children(p));
    }
    out
}

/// The process's mount namespace (`mnt:[N]`: N).
pub fn mnt_ns(pid: u32) -> Option<u64> {
    let l = fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    l.to_str()?.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

/// The process's cgroup: its path in the unified hierarchy (`0::/...`), else the first line's.
pub fn cgroup(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = |l: &str| l.splitn(3, ':').nth(2).map(str::to_string);
    s.lines().find(|l| l.starts_with("0::")).or_else(|| s.lines().next()).and_then(path)
}

/// One file mapping of /proc/PID/maps: what the process says it maps. The path is the
/// process's own view (inside its root) and is only a name: the device and inode say which
/// file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// `start-end` in hex, as /proc/PID/map_files/ names the mapping.
    pub range: String,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The path as the process sees it, without the " (deleted)" mark.
    pub path: String,
    /// The file was unlinked (or replaced) after it was mapped.
    pub deleted: bool,
    /// Mapped executable (`r-xp`): code the process can run, not just bytes it mapped.
    pub exec: bool,
}

/// The mapping of a file whose name starts with `prefix` (e.g. "libibverbs.so") in a process,
/// from /proc/PID/maps. Open it with [`crate::libfile::LibraryFile::open_mapped`], never by
/// its path.
pub fn mapped_library(pid: u32, prefix: &str) -> Option<MapsEntry> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    find_in_maps(&maps, prefix)
}

/// Pure part of [`mapped_library`].
pub fn find_in_maps(maps: &str, prefix: &str) -> Option<MapsEntry> {
    maps.lines().filter_map(parse_maps_line).find(|e| {
        Path::new(&e.path).file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with(prefix))
    })
}

/// `7f01-7f02 r-xp 00001000 08:01 1234 /usr/lib/libx.so (deleted)`; None for anonymous
/// mappings and pseudo-files (`[heap]`).
pub fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let mut fields = [""; 5];
    for f in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ')?;
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start_matches(' ');
    if !path.starts_with('/') {
        return None;
    }
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    let (major, minor) = fields[3].split_once(':')?;
    Some(MapsEntry {
        range: fields[0].to_string(),
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: fields[4].parse().ok()?,
        path: path.to_string(),
        deleted,
        exec: fields[1].as_bytes().get(2) == Some(&b'x'),
    })
}

/// The system's copy of a shared library (`libibverbs.so.1`), from the usual multiarch
/// directories, then `ldconfig -p`.
pub fn system_library(soname: &str) -> Option<PathBuf> {
    for dir in ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64"] {
        let p = Path::new(dir).join(soname);
        if p.exists() {
            return Some(p);
        }
    }
    // Never through PATH: as root, a PATH entry someone else can write would run their program.
    // One `ldconfig -p` per run, not one per hook (a process start each: ~0.3 s at start-up
    // for the nine cuFile/CUDA hooks of a machine without those libraries).
    static LDCONFIG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let cache = LDCONFIG.get_or_init(|| {
        ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .and_then(|ldconfig| std::process::Command::new(ldconfig).arg("-p").output().ok())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    });
    cache
        .lines()
        .find(|l| l.trim_start().starts_with(soname))
        .and_then(|l| l.rsplit("=> ").next())
        .map(|p| PathBuf::from(p.trim()))
}

/// Where each of `symbols` lives, in one pass over /proc/kallsyms (a stream: the file is
/// megabytes and only a few names are wanted): `None` in vmlinux, `Some(module)` in a module;
/// absent from the map when the kernel doesn't list it.
pub fn kallsyms_homes(
    kallsyms: impl std::io::BufRead,
    symbols: &[&str],
) -> std::collections::HashMap<String, Option<String>> {
    let wanted: std::collections::HashSet<&[u8]> = symbols.iter().map(|s| s.as_bytes()).collect();
    // A name is hashed only when its length and first byte are those of a wanted one: the
    // file has 100-200k lines, this crate may run unoptimised (tests in an emulated VM), and
    // memchr does the byte scanning.
    let mut lengths = [false; 256];
    let mut firsts = [false; 256];
    for s in symbols {
        lengths[s.len().min(255)] = true;
        firsts[usize::from(s.as_bytes().first().copied().unwrap_or(0))] = true;
    }
    let mut out = std::collections::HashMap::new();
    let mut kallsyms = kallsyms;
    let mut line = Vec::with_capacity(256);
    // `ffffffff81000000 T _stext` or `ffffffffc0a01000 t ib_umem_get\t[ib_uverbs]`.
    while matches!(kallsyms.read_until(b'\n', &mut line), Ok(n) if n > 0) {
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let after_addr = memchr::memchr(b' ', l).map(|i| &l[i + 1..]);
        let rest = after_addr.and_then(|r| memchr::memchr(b' ', r).map(|i| &r[i + 1..]));
        if let Some(rest) = rest {
            let (name, module) = match memchr::memchr(b'\t', rest) {
                Some(i) => (&rest[..i], Some(&rest[i + 1..])),
                None => (rest, None),
            };
            if lengths[name.len().min(255)]
                && firsts[usize::from(name.first().copied().unwrap_or(0))]
                && wanted.contains(name)
            {
                let name = String::from_utf8_lossy(name).into_owned();
                out.entry(name).or_insert_with(|| {
                    module.map(|m| {
                        String::from_utf8_lossy(m).trim().trim_matches(|c| c == '[' || c == ']').to_string()
                    })
                });
            }
        }
        line.clear();
    }
    out
}

/// Where one kernel symbol lives (see [`kallsyms_homes`]).
pub fn kallsyms_lookup(kallsyms: &str, symbol: &str) -> Option<Option<String>> {
    kallsyms_homes(kallsyms.as_bytes(), &[symbol]).remove(symbol)
}

/// Makes sure tracefs is mounted (tracepoints are attached through it): mounts it at
/// /sys/kernel/tracing when neither usual place has it.
pub fn ensure_tracefs() -> Result<(), String> {
    if ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        return Ok(());
    }
    let (src, target, fstype) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: NUL-terminated constant strings; no data argument.
    let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Byte offset of a field in a tracepoint record, from tracefs's format file.
pub fn tracepoint_field_offset(category: &str, name: &str, field: &str) -> Option<u32> {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if let Some(text) = tracefs_text(&format!("{root}/events/{category}/{name}/format")) {
            return parse_format_offset(&text, field);
        }
    }
    None
}

/// A tracefs file's text, read once per run in as few `read` calls as it takes (one, for a
/// `format` file). Every `read` of a format file takes the kernel's event mutex, the one each
/// perf event open and release takes too (a release holds it for an RCU grace period): with
/// other tracers starting and stopping, each wait was 0.1-0.5 s, and `read_to_string` makes
/// five or six reads of a 1 KiB file (32 bytes, then doubling). None when it can't be read.
pub fn tracefs_text(path: &str) -> Option<std::sync::Arc<str>> {
    use std::{collections::HashMap, io::Read, sync::Arc, sync::Mutex};
    static CACHE: Mutex<Option<HashMap<String, Option<Arc<str>>>>> = Mutex::new(None);
    if let Some(hit) = CACHE.lock().ok()?.get_or_insert_with(HashMap::new).get(path) {
        return hit.clone();
    }
    let read = || -> Option<Arc<str>> {
        let mut f = fs::File::open(path).ok()?;
        let mut buf = vec![0u8; 64 << 10];
        let mut len = 0;
        loop {
            let n = f.read(&mut buf[len..]).ok()?;
            len += n;
            // A seq_file read fills the buffer up to the last record that fits: well short of
            // the end of the buffer, this was the end of the file (no second read to see EOF).
            if n == 0 || len + 4096 < buf.len() {
                break;
            }
            buf.resize(buf.len() * 2, 0);
        }
        buf.truncate(len);
        Some(String::from_utf8_lossy(&buf).into())
    };
    let text = read();
    CACHE.lock().ok()?.get_or_insert_with(HashMap::new).insert(path.to_string(), text.clone());
    text
}

/// Pure part of [`tracepoint_field_offset`]: `field:pid_t child_pid;\toffset:44;\tsize:4;...`.
pub fn parse_format_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|l| {
        let l = l.trim();
        let decl = l.strip_prefix("field:")?.split(';').next()?;
        let name = decl.split_whitespace().last()?.split('[').next()?;
        if name != field {
            return None;
        }
        l.split(';').find_map(|p| p.trim().strip_prefix("offset:")?.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_library_in_maps() {
        let maps = "\
7f00 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f01 r-xp 00001000 08:01 2 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0
7f02 rw-p 00000000 00:00 0 [heap]";
        let e = find_in_maps(maps, "libibverbs.so").expect("found");
        assert_eq!(e.path, "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0");
        assert_eq!(
            (e.range.as_str(), e.dev_major, e.dev_minor, e.inode, e.deleted),
            ("7f01", 8, 1, 2, false)
        );
        assert_eq!(find_in_maps(maps, "libcuda.so"), None);
    }

    #[test]
    fn maps_line_with_deleted_file_and_spaces_in_the_name() {
        let e = parse_maps_line("7f0000-7f1000 r-xp 00000000 fd:1a 99 /lib/my lib/libibverbs.so.1 (deleted)")
            .unwrap();
        assert_eq!((e.dev_major, e.dev_minor, e.inode), (0xfd, 0x1a, 99));
        assert_eq!(e.path, "/lib/my lib/libibverbs.so.1");
        assert!(e.deleted);
        assert_eq!(e.range, "7f0000-7f1000");
        assert_eq!(parse_maps_line("7f02-7f03 rw-p 00000000 00:00 0 [heap]"), None);
        assert_eq!(parse_maps_line("7f02-7f03 rw-p 00000000 00:00 0"), None);
        assert_eq!(parse_maps_line("garbage"), None);
        assert_eq!(parse_maps_line("7f02-7f03 rw-p 0 zz:00 0 /x"), None);
    }

    #[test]
    fn kallsyms_module_and_vmlinux() {
        let k = "ffffffff81000000 T _stext\nffffffffc0a01230 t ib_umem_get\t[ib_uverbs]\n";
        assert_eq!(kallsyms_lookup(k, "_stext"), Some(None));
        assert_eq!(kallsyms_lookup(k, "ib_umem_get"), Some(Some("ib_uverbs".into())));
        assert_eq!(kallsyms_lookup(k, "nv_mem_acquire"), None);
    }

    #[test]
    fn tracepoint_format_offset() {
        let f = "name: sched_process_fork\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                 \tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
                 \tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";
        assert_eq!(parse_format_offset(f, "child_pid"), Some(44));
        assert_eq!(parse_format_offset(f, "parent_comm"), Some(8));
        assert_eq!(parse_format_offset(f, "nope"), None);
    }
}
