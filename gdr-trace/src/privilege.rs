//! Checks, before any BPF call, that the process may load and attach tracing programs.

use crate::exit::Fatal;

const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability set, from /proc/self/status.
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_cap_eff(&status)
}

pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status.lines().find_map(|l| u64::from_str_radix(l.strip_prefix("CapEff:")?.trim(), 16).ok())
}

/// Which of the needed capabilities are missing from `caps` (CAP_SYS_ADMIN stands in for both
/// on kernels before 5.8).
pub fn missing(caps: u64) -> Vec<&'static str> {
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    if has(CAP_SYS_ADMIN) {
        return vec![];
    }
    let mut out = vec![];
    if !has(CAP_BPF) {
        out.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        out.push("CAP_PERFMON");
    }
    out
}

/// Fails with exit code 2 and a message naming the capabilities when tracing is impossible.
pub fn require_tracing() -> Result<(), Fatal> {
    let caps = effective_caps().unwrap_or(0);
    let miss = missing(caps);
    if miss.is_empty() {
        return Ok(());
    }
    Err(Fatal::cannot_run(advice(&miss)))
}

/// What to do about missing capabilities: root, or a capable binary only a group may run.
fn advice(miss: &[&str]) -> String {
    format!(
        "not enough privilege to trace: missing {} (run as root, or give CAP_BPF and CAP_PERFMON \
         to a copy only a trusted group may run: `install -o root -g gdr-trace -m 0750 gdr-trace \
         /usr/local/sbin/ && setcap cap_bpf,cap_perfmon+ep /usr/local/sbin/gdr-trace`; a file \
         capability on a binary everyone can run lets every local user trace the machine)",
        miss.join(", ")
    )
}

/// Why `perf_event_open` (kprobes, uprobes) may refuse CAP_PERFMON here: Debian's and Ubuntu's
/// kernels carry a patch under which `kernel.perf_event_paranoid` 3 and above needs
/// CAP_SYS_ADMIN (upstream treats those levels as 2). None when that can't be the reason.
pub fn perf_paranoid_hint() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?;
    let level: i32 = text.trim().parse().ok()?;
    let admin = effective_caps().is_some_and(|c| c & (1u64 << CAP_SYS_ADMIN) != 0);
    (level > 2 && !admin).then(|| {
        format!(
            "kernel.perf_event_paranoid is {level}: distribution kernels that patch levels above 2 \
             (Debian, Ubuntu) refuse kprobes and uprobes without CAP_SYS_ADMIN, CAP_PERFMON or not; \
             set it to 2 (sysctl -w kernel.perf_event_paranoid=2) or grant CAP_SYS_ADMIN"
        )
    })
}

/// What the tracer still needs once its programs are attached: reading other users'
/// /proc/PID (maps and fd links: ptrace access; their fd directories: search).
pub const KEPT_AFTER_ATTACH: u64 = (1 << CAP_DAC_READ_SEARCH) | (1 << CAP_SYS_PTRACE);

/// Drops, in the calling thread, every capability but [`KEPT_AFTER_ATTACH`]: loading and
/// attaching are done, and whatever a hostile process, recording or client makes the tracer do
/// next it does without CAP_BPF, CAP_PERFMON or CAP_SYS_ADMIN. Threads started earlier drop
/// their own ([`drop_all_in_this_thread`]); threads started later inherit this. A failure is
/// logged, not fatal: tracing goes on with what it has.
pub fn drop_after_attach() {
    if let Err(e) = drop_to(KEPT_AFTER_ATTACH) {
        tracing::warn!("could not drop capabilities after attach: {e}");
    }
}

/// What the library follower's own process keeps (`loader::follow_remote`): reading /proc as
/// the tracer does, and attaching uprobes with the programs loaded at start. CAP_SYS_ADMIN
/// too: measured on 6.18, `perf_event_open` of a uprobe fails with EACCES holding CAP_PERFMON
/// and CAP_BPF (and CAP_CHECKPOINT_RESTORE) but not CAP_SYS_ADMIN. The tracer itself (its
/// output, HTTP server and recordings) keeps none of these.
pub const KEPT_FOR_FOLLOWING: u64 =
    KEPT_AFTER_ATTACH | (1 << CAP_PERFMON) | (1 << CAP_BPF) | (1 << CAP_SYS_ADMIN);

/// Where the library follower's uid and gid are looked for, downwards: a range no distribution
/// hands out (below 2^31, so 32-bit uid maps and `id` print it as is). What it opens and parses
/// (other users' libraries, their ELF), it opens and parses as no one; and as no tenant: a
/// process may signal (and stop) another of its own uid, and 65534 (nobody) is the uid of many
/// unprivileged containers.
pub const FOLLOWER_IDS: std::ops::Range<u32> = 0x7fff_0000..0x7fff_ff00;

/// The follower's uid and gid: the highest of [`FOLLOWER_IDS`] that no process holds (as any
/// of its real, effective, saved or file-system ids) and no entry of /etc/passwd or /etc/group
/// names. None when every one is taken.
pub fn follower_id(proc_root: &std::path::Path, etc: &std::path::Path) -> Option<u32> {
    let mut taken = std::collections::HashSet::new();
    for e in std::fs::read_dir(proc_root).into_iter().flatten().flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else { continue };
        for l in status.lines().filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:")) {
            taken.extend(l.split_whitespace().skip(1).filter_map(|v| v.parse::<u32>().ok()));
        }
    }
    for db in ["passwd", "group"] {
        let text = std::fs::read_to_string(etc.join(db)).unwrap_or_default();
        taken.extend(text.lines().filter_map(|l| l.split(':').nth(2)?.parse::<u32>().ok()));
    }
    FOLLOWER_IDS.rev().find(|id| !taken.contains(id))
}

/// Becomes [`follower_id`] (when root and allowed to: CAP_SETUID, CAP_SETGID) and drops every
/// capability but [`KEPT_FOR_FOLLOWING`], in the follower's process only. The capabilities it
/// keeps are what lets it read other users' /proc and attach. Where the uid cannot change (no
/// CAP_SETUID, as in the DaemonSet, or a user namespace without that uid mapped) it stays root,
/// capabilities still dropped; the error says why. The change of uid clears the parent-death
/// signal: the caller sets it again.
pub fn drop_for_following() -> Result<(), String> {
    let own = become_no_tenant();
    drop_to(KEPT_FOR_FOLLOWING)?;
    own
}

fn become_no_tenant() -> Result<(), String> {
    // SAFETY: plain system calls with integer arguments (and an empty group list).
    unsafe {
        if libc::getuid() != 0 {
            return Ok(());
        }
        // SECBIT_NO_SETUID_FIXUP (and NOROOT): the uid change keeps the capabilities.
        if libc::prctl(libc::PR_SET_SECUREBITS, 0b111 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(format!("securebits: {}", std::io::Error::last_os_error()));
        }
        let root = std::path::Path::new("/");
        let Some(id) = follower_id(&root.join("proc"), &root.join("etc")) else {
            return Err(format!("every uid of {FOLLOWER_IDS:?} is taken"));
        };
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(id, id, id) != 0
            || libc::setresuid(id, id, id) != 0
        {
            return Err(format!("becoming uid {id}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// What loading programs takes (CAP_SYS_ADMIN before Linux 5.8).
pub const FOR_LOADING: u64 = (1 << CAP_BPF) | (1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN);

/// Narrows the calling thread's effective and permitted capabilities to `keep`, and nothing
/// else: its bounding set and securebits stay, so a root process it execs still gets root's
/// capabilities (the library follower, which drops its own). For the thread that loads the
/// follower's programs and starts it.
pub fn narrow_this_thread(keep: u64) {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    let Ok(now) = rustix::thread::capabilities(None) else { return };
    let keep = CapabilitySet::from_bits_retain(keep);
    let sets = CapabilitySets {
        effective: now.effective & keep,
        permitted: now.permitted & keep,
        inheritable: CapabilitySet::empty(),
    };
    if let Err(e) = rustix::thread::set_capabilities(None, sets) {
        tracing::warn!("could not narrow the loading thread's capabilities: {e}");
    }
}

/// Drops every capability of the calling thread (the HTTP and signal threads need none).
pub fn drop_all_in_this_thread() {
    if let Err(e) = drop_to(0) {
        tracing::warn!("could not drop this thread's capabilities: {e}");
    }
}

fn drop_to(keep: u64) -> Result<(), String> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    // First, while CAP_SETPCAP may still be there: nothing dropped comes back through exec
    // (bounding set; root's exec rule). Without CAP_SETPCAP these fail: best effort.
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
        .min(63);
    for cap in (0..=last).filter(|c| keep & (1u64 << c) == 0) {
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    // SECBIT_NOROOT | SECBIT_NOROOT_LOCKED.
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_SECUREBITS, 0b11 as libc::c_ulong, 0, 0, 0) };
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) };
    let now = rustix::thread::capabilities(None).map_err(|e| format!("capget: {e}"))?;
    let keep = CapabilitySet::from_bits_retain(keep);
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: now.effective & keep,
            permitted: now.permitted & keep,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| format!("capset: {e}"))?;
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_follower_takes_a_uid_no_process_and_no_account_has() {
        let dir = tempfile::tempdir().unwrap();
        let (proc_root, etc) = (dir.path().join("proc"), dir.path().join("etc"));
        let top = FOLLOWER_IDS.end - 1;
        for (pid, uid) in [(1, 0), (7, top), (9, 65534)] {
            std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
            let status = format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n");
            std::fs::write(proc_root.join(format!("{pid}/status")), status).unwrap();
        }
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("passwd"), format!("x:x:{}:0::/:/bin/false\n", top - 1)).unwrap();
        std::fs::write(etc.join("group"), format!("g:x:{}:\n", top - 2)).unwrap();
        assert_eq!(follower_id(&proc_root, &etc), Some(top - 3));
        assert!(!FOLLOWER_IDS.contains(&65534), "never nobody, the uid of many containers");
    }

    #[test]
    fn parses_and_names_missing_caps() {
        assert_eq!(parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n"), Some(0x1ff_ffff_ffff));
        assert!(missing(0x1ff_ffff_ffff).is_empty());
        assert_eq!(missing(0), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert_eq!(missing(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert!(missing(1 << CAP_SYS_ADMIN).is_empty());
    }

    #[test]
    fn the_advice_restricts_who_may_run_a_capable_binary() {
        let text = advice(&["CAP_BPF"]);
        assert!(text.contains("-m 0750") && text.contains("-g gdr-trace"), "{text}");
        assert!(!text.contains("$(which"), "no setcap on whatever PATH finds: {text}");
    }

    #[test]
    fn a_thread_keeps_only_what_tracing_needs_after_attach() {
        // In a thread of its own: capabilities are per thread, the test runner's stay.
        std::thread::spawn(|| {
            drop_after_attach();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let eff = parse_cap_eff(&status).unwrap();
            assert_eq!(eff & !KEPT_AFTER_ATTACH, 0, "CapEff {eff:#x}");
            let prm = status.lines().find_map(|l| l.strip_prefix("CapPrm:")).unwrap().trim().to_string();
            assert_eq!(u64::from_str_radix(&prm, 16).unwrap() & !KEPT_AFTER_ATTACH, 0, "CapPrm {prm}");
            drop_all_in_this_thread();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            assert_eq!(parse_cap_eff(&status), Some(0));
        })
        .join()
        .unwrap();
    }
}
