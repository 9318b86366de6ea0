//! A recording's lines as types: the header, the end, and every item between (the format is
//! described in `recording.rs`). A leaf of the recording module: the reader, the sink, the parts
//! and the errors all use it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    audit::{Posture, ProcessFacts},
    counters::Counters,
    events::{storage::StorageEvent, MrRecord},
    facts::HookStatus,
    sink::Lost,
    storage::aggregate::StorageReport,
};

pub const FORMAT: &str = "gdr-trace.recording/2";
/// Recordings this build reads: [`FORMAT`], and the one before it (the same lines, none split
/// into parts).
pub const FORMATS_READ: [&str; 2] = [FORMAT, "gdr-trace.recording/1"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: String,
    pub host: String,
    pub kernel: Value,
    pub hooks: Value,
    pub target_pid: Option<u32>,
    #[serde(default)]
    pub posture: Posture,
    #[serde(default)]
    pub container_host_markers: Vec<String>,
    pub started_unix_ms: u64,
    /// CLOCK_MONOTONIC at `started_unix_ms`: the records' `ts_ns` to wall-clock time.
    #[serde(default)]
    pub started_monotonic_ns: u64,
    /// The boot the monotonic times belong to.
    #[serde(default)]
    pub boot_id: String,
}

impl Header {
    /// The wall-clock anchor of the records' `ts_ns` (None: a recording from before it was kept).
    pub fn anchor(&self) -> Option<crate::clock::Anchor> {
        let (unix_ms, monotonic_ns) = (self.started_unix_ms, self.started_monotonic_ns);
        (monotonic_ns > 0).then_some(crate::clock::Anchor { unix_ms, monotonic_ns })
    }

    /// The hooks as the live tracer reported them (rows this build knows by name), for replay
    /// to say what was traced as live output did.
    pub fn hook_statuses(&self) -> Vec<HookStatus> {
        self.hooks.as_array().into_iter().flatten().filter_map(from_recorded).collect()
    }
}

/// A row of a recording's `hooks` (what the live tracer wrote), for replay to say what was
/// traced as live did. None for a row this build has no hook of that name for.
fn from_recorded(v: &Value) -> Option<HookStatus> {
    let name = v["hook"].as_str()?;
    let hook = crate::hooks::HOOKS
        .iter()
        .map(|h| h.function)
        .chain(crate::facts::TRACER_ROWS)
        .find(|&n| n == name)?;
    let text = |k: &str| v[k].as_str().map(str::to_string);
    Some(HookStatus {
        hook,
        side: if v["side"] == "kernel" { "kernel" } else { "user" },
        location: text("location"),
        attached: text("attached"),
        reasons: v["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str())
            .map(str::to_string)
            .collect(),
    })
}

/// This build's format and version; everything else empty (callers set what they know).
impl Default for Header {
    fn default() -> Self {
        Header {
            format: FORMAT.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            host: String::new(),
            kernel: Value::Null,
            hooks: Value::Null,
            target_pid: None,
            posture: Posture::default(),
            container_host_markers: vec![],
            started_unix_ms: 0,
            started_monotonic_ns: 0,
            boot_id: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub lost: Lost,
    pub records: u64,
    pub ended_unix_ms: u64,
}

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Item {
    Header(Header),
    Process(ProcessFacts),
    Record(MrRecord),
    Tick {
        now_ns: u64,
    },
    /// The live line closed every open item here (its end): replay does it at the same point.
    Flush,
    Note {
        message: String,
    },
    /// A storage event (open, close, cuFile call, nvidia-fs call) as decoded and enriched.
    Storage {
        ev: StorageEvent,
    },
    /// A libcuda control call (contexts, peer access, IPC, pinned host memory) as decoded.
    Cuda {
        ev: crate::events::cuda::CudaCall,
    },
    /// A traced process ended: replay drops what it kept for it at the same point.
    Exit {
        ctx: crate::events::Context,
    },
    /// The kernel's storage counters as read at a summary tick (`last`: the final one).
    Counters {
        last: bool,
        snapshot: Counters,
        /// A part of a snapshot too long for one line: the next line has more of it (`parts`).
        #[serde(default, skip_serializing_if = "is_false")]
        more: bool,
    },
    StorageSummary {
        last: bool,
        report: StorageReport,
        /// A part of a report too long for one line: the next line has more of it.
        #[serde(default, skip_serializing_if = "is_false")]
        more: bool,
        /// This part's first process goes on from the last one of the part before.
        #[serde(default, skip_serializing_if = "is_false")]
        continued: bool,
    },
    End(End),
}

fn is_false(b: &bool) -> bool {
    !*b
}
