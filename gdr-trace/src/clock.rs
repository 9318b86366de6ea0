//! Where an NDJSON stream stands in the world: the schema it follows, the host and boot it
//! comes from, and a wall-clock anchor that turns the records' CLOCK_MONOTONIC `ts_ns` into
//! wall-clock time (to line events up with NCCL logs or Prometheus).

use serde::{Deserialize, Serialize};

/// The schema of `watch --json` / `attach --json` / `record`'s live stream (docs/schema/).
pub const EVENTS_SCHEMA: &str = "gdr-trace.events/1";

/// A wall-clock time and the CLOCK_MONOTONIC time read at the same moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    pub unix_ms: u64,
    pub monotonic_ns: u64,
}

impl Anchor {
    pub fn now() -> Self {
        Self { unix_ms: unix_ms(), monotonic_ns: monotonic_ns() }
    }

    /// The wall-clock time (ms since the epoch) of a CLOCK_MONOTONIC time.
    pub fn unix_ms_of(&self, monotonic_ns: u64) -> u64 {
        let delta_ms = (monotonic_ns as i128 - self.monotonic_ns as i128) / 1_000_000;
        (self.unix_ms as i128 + delta_ms).max(0) as u64
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`): monotonic times of two boots never
/// compare.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The first record of a stream.
pub fn header(anchor: &Anchor) -> serde_json::Value {
    serde_json::json!({
        "event": "header",
        "schema": EVENTS_SCHEMA,
        "version": env!("CARGO_PKG_VERSION"),
        "hostname": hostname(),
        "boot_id": boot_id(),
        "started_unix_ms": anchor.unix_ms,
        "started_monotonic_ns": anchor.monotonic_ns,
    })
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_times_map_to_wall_clock_around_the_anchor() {
        let a = Anchor { unix_ms: 1_700_000_000_000, monotonic_ns: 5_000_000_000 };
        assert_eq!(a.unix_ms_of(5_000_000_000), 1_700_000_000_000);
        assert_eq!(a.unix_ms_of(6_500_000_000), 1_700_000_001_500);
        assert_eq!(a.unix_ms_of(4_000_000_000), 1_699_999_999_000, "before the anchor");
        let h = header(&a);
        assert_eq!(h["schema"], EVENTS_SCHEMA);
        assert_eq!(h["started_unix_ms"], 1_700_000_000_000u64);
    }
}
