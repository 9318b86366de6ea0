//! Why a record or a count never reached userspace: each reason declared once, here. The eBPF
//! side counts into `LOST` slots by these constants; userspace names, totals, prints and
//! exports them (JSON `lost` lines, recordings, `gdr_trace_lost_events{reason}`, the text
//! summary) from [`REASONS`], in its order.

/// One reason: its `LOST` slot, its name in JSON, recordings and metrics, the hook family
/// whose own loss it is (its series exists only while that family traces; None: every
/// family's), and the words the text summary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reason {
    pub slot: u32,
    pub name: &'static str,
    pub family: Option<&'static str>,
    pub text: &'static str,
}

macro_rules! reasons {
    ($($(#[$doc:meta])* $id:ident = $slot:literal, $name:literal, $family:expr, $text:literal;)*) => {
        $($(#[$doc])* pub const $id: u32 = $slot;)*
        /// Every reason, in the order outputs list them.
        pub const REASONS: &[Reason] = &[$(Reason { slot: $slot, name: $name, family: $family, text: $text }),*];
    };
}

reasons! {
    /// A record could not be reserved in the ring buffer (it was full).
    RINGBUF_FULL = 0, "ringbuf_full", None, "ring buffer full";
    /// An entry-argument stash (kretprobe/uretprobe) was full, so a return had no arguments.
    STASH_FULL = 1, "stash_full", None, "stash full";
    /// A return fired with no stashed entry (probe attached mid-call, or stash evicted).
    STASH_MISS = 2, "stash_miss", None, "return without entry";
    /// A storage map (`FILE_IO`, `PAGE_FILLS`, the cuFile stash) was full: I/O not counted.
    STORAGE_MAP_FULL = 4, "storage_map_full", Some("storage"), "storage map full";
    /// The map of traced processes (`TRACKED`, `attach`) was full: a child forked then is
    /// not traced.
    TRACKED_FULL = 5, "tracked_full", None, "traced-process map full";
    /// An async nvidia-fs I/O completed (`nvfs_io_complete`) with no submission on record
    /// (`NVFS_ASYNC`: evicted, or `nvfs_direct_io` not hookable): its bytes are not attributed.
    NVFS_ASYNC_MISS = 6, "nvfs_async_miss", Some("storage"), "nvidia-fs completion without submission";
    /// The per-(process, lkey) byte map (`BYTES`) was full: a work request's bytes not counted.
    BYTES_MAP_FULL = 3, "bytes_map_full", Some("bytes"), "byte map full";
    /// A work request chain, SGE list or completion batch longer than the bounded walk: the
    /// rest not counted.
    BYTES_TRUNCATED = 7, "bytes_truncated", Some("bytes"), "work requests past the bounded walk";
    /// A user sent more records than its budget (`--events-per-uid`): its own were dropped
    /// (never another user's).
    OVER_BUDGET = 8, "over_budget", None, "over a user's budget";
    /// A ring record had an unknown kind or was shorter or longer than its kind's struct:
    /// refused by the userspace decoder (a build mismatch or a corrupt ring). Userspace's own
    /// slot: the eBPF side never counts into it.
    UNDECODABLE = 15, "undecodable", None, "undecodable";
}

/// Slots of the `LOST` per-CPU counter array.
pub const SLOTS: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_slot_and_name() {
        for (i, a) in REASONS.iter().enumerate() {
            assert!(a.slot < SLOTS, "{a:?}");
            for b in &REASONS[i + 1..] {
                assert!(a.slot != b.slot && a.name != b.name, "{a:?} {b:?}");
            }
        }
    }
}
