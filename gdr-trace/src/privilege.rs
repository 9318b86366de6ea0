//! Checks, before any BPF call, that the process may load and attach tracing programs.

use crate::exit::Fatal;

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
    Err(Fatal::cannot_run(format!(
        "not enough privilege to trace: missing {} (run as root, or grant CAP_BPF and \
         CAP_PERFMON, e.g. `sudo setcap cap_bpf,cap_perfmon+ep $(which gdr-trace)`)",
        miss.join(", ")
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_missing_caps() {
        assert_eq!(parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n"), Some(0x1ff_ffff_ffff));
        assert!(missing(0x1ff_ffff_ffff).is_empty());
        assert_eq!(missing(0), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert_eq!(missing(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert!(missing(1 << CAP_SYS_ADMIN).is_empty());
    }
}
