//! Numbers that name hooks and attach modes on the wire. Userspace's hook table maps them to
//! names; the eBPF side stamps them into each record so `sources` can say which hook saw what.

/// Which function a record was taken at.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookId {
    IbUmemGet = 1,
    IbUmemRelease = 2,
    IbvRegMr = 3,
    IbvRegMrIova2 = 4,
    IbvDeregMr = 5,
}

impl HookId {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::IbUmemGet,
            2 => Self::IbUmemRelease,
            3 => Self::IbvRegMr,
            4 => Self::IbvRegMrIova2,
            5 => Self::IbvDeregMr,
            _ => return None,
        })
    }
}

/// How the program that produced a record was attached.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachKind {
    Fentry = 1,
    Fexit = 2,
    Kprobe = 3,
    Kretprobe = 4,
    Uprobe = 5,
    Uretprobe = 6,
}

impl AttachKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Fentry,
            2 => Self::Fexit,
            3 => Self::Kprobe,
            4 => Self::Kretprobe,
            5 => Self::Uprobe,
            6 => Self::Uretprobe,
            _ => return None,
        })
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Fexit => "fexit",
            Self::Kprobe => "kprobe",
            Self::Kretprobe => "kretprobe",
            Self::Uprobe => "uprobe",
            Self::Uretprobe => "uretprobe",
        }
    }
}

/// Slots of the `LOST` per-CPU counter array.
pub mod lost {
    /// A record could not be reserved in the ring buffer (it was full).
    pub const RINGBUF_FULL: u32 = 0;
    /// An entry-argument stash (kretprobe/uretprobe) was full, so a return had no arguments.
    pub const STASH_FULL: u32 = 1;
    /// A return fired with no stashed entry (probe attached mid-call, or stash evicted).
    pub const STASH_MISS: u32 = 2;
    pub const SLOTS: u32 = 4;
}
