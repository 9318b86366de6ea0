//! What every record's header says, decoded: who did it and when ([`Context`]), and which hook
//! saw it ([`source`]). A leaf of `events`: each family's decoding uses it.

use gdr_trace_common::{decode::c_str, AttachKind, EventHeader, HookId};
use serde::{Deserialize, Serialize};

use crate::hooks;

/// Who did it and when, from a record's header (every family has the same header).
pub fn context(h: &EventHeader) -> Context {
    Context {
        pid: h.pid,
        tid: h.tid,
        comm: c_str(&h.comm).to_string(),
        uid: h.uid,
        cgroup_id: h.cgroup_id,
        ts_ns: h.ts_ns,
    }
}

/// "uprobe:ibv_reg_mr", "kprobe:nvfs_ioctl", "tracepoint:ioctl": how users name a hook. A
/// probe pair is known by its entry name.
pub fn source(h: &EventHeader) -> String {
    let hook = HookId::from_u32(h.hook).map(|id| hooks::by_id(id).function).unwrap_or("?");
    let attach = match AttachKind::from_u32(h.attach) {
        Some(AttachKind::Uretprobe) => "uprobe",
        Some(AttachKind::Kretprobe) => "kprobe",
        Some(a) => a.as_str(),
        None => "?",
    };
    format!("{attach}:{hook}")
}

/// Who did something, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub uid: u32,
    pub cgroup_id: u64,
    pub ts_ns: u64,
}
