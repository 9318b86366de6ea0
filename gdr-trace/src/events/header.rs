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

/// Which hook saw a record: its row (`HookId`) and how it was attached. Users read it as
/// "uprobe:ibv_reg_mr", "kprobe:nvfs_ioctl", "tracepoint:ioctl" (text, JSON, recordings), but
/// analysis asks it what it proves ([`Source::role`], [`Source::from_kernel`]), never its name.
/// A probe pair is one source, known by its entry: a uretprobe is `uprobe`, a kretprobe `kprobe`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Source {
    /// None: not known to this build (a recording of a newer one).
    pub attach: Option<AttachKind>,
    pub hook: Option<HookId>,
}

impl Source {
    pub fn new(hook: HookId, attach: AttachKind) -> Self {
        let attach = match attach {
            AttachKind::Uretprobe => AttachKind::Uprobe,
            AttachKind::Kretprobe => AttachKind::Kprobe,
            a => a,
        };
        Self { attach: Some(attach), hook: Some(hook) }
    }

    /// The hooked function as the table names it ("?" when unknown).
    pub fn function(&self) -> &'static str {
        self.hook.map_or("?", |id| hooks::by_id(id).function)
    }

    /// What its records prove (its row of the hook table).
    pub fn role(&self) -> Option<hooks::Role> {
        self.hook.map(|id| hooks::by_id(id).role)
    }

    /// Seen in the kernel, not by a userspace probe (false when not known).
    pub fn from_kernel(&self) -> bool {
        self.attach.is_some_and(|a| a != AttachKind::Uprobe)
    }

    /// Several, as users read them: "fexit:ib_umem_get, uprobe:ibv_reg_mr".
    pub fn join(list: &[Source]) -> String {
        list.iter().map(Source::to_string).collect::<Vec<_>>().join(", ")
    }

    /// As users write it ("fexit:ib_umem_get"); the hook is found by its function name.
    pub fn parse(s: &str) -> Self {
        let (attach, function) = s.split_once(':').unwrap_or(("", s));
        let attach = [
            AttachKind::Fentry,
            AttachKind::Fexit,
            AttachKind::Kprobe,
            AttachKind::Uprobe,
            AttachKind::Tracepoint,
        ]
        .into_iter()
        .find(|a| a.as_str() == attach);
        Self { attach, hook: hooks::by_function(function).map(|h| h.id) }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.attach.map_or("?", |a| a.as_str()), self.function())
    }
}

impl From<&str> for Source {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

impl PartialEq<str> for Source {
    fn eq(&self, other: &str) -> bool {
        let attach = self.attach.map_or("?", |a| a.as_str());
        other.split_once(':').is_some_and(|(a, f)| a == attach && f == self.function())
    }
}

impl PartialEq<&str> for Source {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

/// The source of a record from its header.
pub fn source(h: &EventHeader) -> Source {
    match (HookId::from_u32(h.hook), AttachKind::from_u32(h.attach)) {
        (Some(hook), Some(attach)) => Source::new(hook, attach),
        (hook, _) => Source { attach: None, hook },
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hook's source reads back as itself: recordings and `--json` carry the text, and
    /// replay must find the same row (so no two rows share a function name).
    #[test]
    fn every_source_reads_back_as_itself() {
        for h in hooks::HOOKS {
            for attach in
                [AttachKind::Fexit, AttachKind::Kretprobe, AttachKind::Uretprobe, AttachKind::Tracepoint]
            {
                let s = Source::new(h.id, attach);
                let text = s.to_string();
                assert_eq!(Source::parse(&text), s, "{text}");
                let json = serde_json::to_string(&s).unwrap();
                assert_eq!(serde_json::from_str::<Source>(&json).unwrap(), s, "{json}");
            }
        }
        let s = Source::new(hooks::by_function("ibv_reg_mr").unwrap().id, AttachKind::Uretprobe);
        assert_eq!(s.to_string(), "uprobe:ibv_reg_mr", "a probe pair is known by its entry");
        assert!(!s.from_kernel());
        assert!(Source::parse("kprobe:ib_umem_get_peer").from_kernel());
        assert_eq!(s.role(), Some(hooks::Role::UserRegister));
        // A name this build does not know (a newer recording's) is unknown, not another hook.
        let odd = Source::parse("uprobe:ibv_reg_mr_v9");
        assert_eq!((odd.hook, odd.to_string().as_str()), (None, "uprobe:?"));
        assert!(!Source::default().from_kernel());
    }
}
