//! /proc/PID/mountinfo (proc(5)): which filesystem a device's files are on. No dependencies,
//! so the storage analysis, the live layer and the preflight read mounts through it.

/// One line of /proc/PID/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    pub major: u32,
    pub minor: u32,
    pub mount_point: String,
    pub fstype: String,
    pub source: String,
}

/// Parses mountinfo (proc(5)): `id parent maj:min root mount-point opts [optional...] - fstype
/// source super-opts`. Malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split_whitespace().collect();
            let (maj, min) = f.get(2)?.split_once(':')?;
            let mut p = post.split_whitespace();
            Some(Mount {
                major: maj.parse().ok()?,
                minor: min.parse().ok()?,
                mount_point: unescape(f.get(4)?),
                fstype: p.next()?.to_string(),
                source: p.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The filesystem type of a file on device `major:minor` (the kernel's st_dev), from the
/// process's mounts. The last mount of that device wins (bind mounts share the type).
pub fn fstype_of_dev(mounts: &[Mount], major: u32, minor: u32) -> Option<&str> {
    mounts.iter().rev().find(|m| m.major == major && m.minor == minor).map(|m| m.fstype.as_str())
}
