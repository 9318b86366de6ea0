//! The library follower of a running tracer: its process, found among the children of the
//! tracer's threads (the thread that loads its programs starts it).

/// The follower of `tracer`: exec'd as /proc/self/exe `follow-libraries` once its programs are
/// loaded, it names itself gdr-trace first thing. Waits up to 30 s; the children seen, if none.
pub fn follower_of(tracer: u32) -> Result<u32, String> {
    let mut children = String::new();
    for _ in 0..600 {
        children = std::fs::read_dir(format!("/proc/{tracer}/task"))
            .map(|d| {
                d.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok()).collect()
            })
            .unwrap_or_default();
        let found: Vec<u32> = children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.contains("follow-libraries"))
            })
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "gdr-trace")
            })
            .collect();
        match found[..] {
            [one] => return Ok(one),
            [] => std::thread::sleep(std::time::Duration::from_millis(50)),
            _ => return Err(format!("more than one follower among {children:?}")),
        }
    }
    Err(format!("no follower among {children:?}"))
}

/// What `pid`'s descriptors past 2 are (their link targets: `anon_inode:bpf_link`...).
pub fn descriptors(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()).is_some_and(|n| n > 2))
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|l| l.display().to_string())
                .collect()
        })
        .unwrap_or_default()
}
