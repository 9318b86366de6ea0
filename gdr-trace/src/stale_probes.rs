//! Probes a killed tracer left in tracefs. Where the kernel has no kprobe/uprobe PMU, aya
//! creates "legacy" probe events in tracefs (`kprobe_events`, `uprobe_events`) named
//! `aya_<pid>_...` and removes them when the program detaches; a tracer killed with SIGKILL
//! never detaches, and the kernel keeps those events forever. At start-up, every such event of a
//! process that no longer exists is removed. Imports nothing of ours.

use std::{fs::OpenOptions, io::Write, path::Path};

const ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Removes the legacy probe events of dead aya processes; returns the events removed, and the
/// ones that could not be (with why).
pub fn remove() -> (Vec<String>, Vec<String>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    let Some(root) = ROOTS.iter().map(Path::new).find(|r| r.join("README").exists()) else {
        return (removed, failed);
    };
    for file in ["kprobe_events", "uprobe_events"] {
        let path = root.join(file);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        for event in stale(&text, |pid| Path::new(&format!("/proc/{pid}")).exists()) {
            let r = OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("-:{event}\n").as_bytes()));
            match r {
                Ok(()) => removed.push(event),
                Err(e) => failed.push(format!("{event}: {e}")),
            }
        }
    }
    (removed, failed)
}

/// `group/event` of each line of a `*_events` file that names an aya event of a process for
/// which `alive(pid)` is false. Lines look like `p:kprobes/aya_123_p_ib_umem_get_0x0_4 ib_umem_get`.
fn stale(text: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let name = line.split_whitespace().next()?.split_once(':')?.1;
            let event = name.split_once('/')?.1;
            let pid: u32 = event.strip_prefix("aya_")?.split('_').next()?.parse().ok()?;
            (!alive(pid)).then(|| name.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::stale;

    #[test]
    fn only_aya_events_of_dead_processes() {
        let text = "p:kprobes/aya_123_p_ib_umem_get_0x0_4 ib_umem_get\n\
                    r:kprobes/aya_77_r_ib_umem_get_0x0_5 ib_umem_get\n\
                    p:uprobes/aya_123_p__usr_lib_libibverbs_so_1_0x1234_0 /usr/lib/libibverbs.so.1:0x1234\n\
                    p:kprobes/my_probe do_sys_open\n\
                    p:uprobes/aya_x_p_f_0x0_1 /bin/true:0x10\n\
                    garbage\n";
        let dead = stale(text, |pid| pid == 77);
        assert_eq!(
            dead,
            ["kprobes/aya_123_p_ib_umem_get_0x0_4", "uprobes/aya_123_p__usr_lib_libibverbs_so_1_0x1234_0"]
        );
    }
}
