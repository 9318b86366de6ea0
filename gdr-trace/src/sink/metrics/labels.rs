//! Label sets: a process identity and the values others chose, escaped.

use std::collections::HashMap;

/// A process identity as a label set: comm, container (12-digit ID), pod UID, and the uid it
/// ran as (empty where unknown, and on the `other` and over-budget series): a tenant can pick
/// any comm, not another's uid, so its series never pass for another tenant's.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcKey {
    pub comm: String,
    pub container: String,
    pub pod: String,
    pub uid: String,
}

pub(super) type Labels = Vec<(String, String)>;

/// A label value someone else chose (a process name): the exposition format escapes `\\`,
/// `"` and newline; every other control character (ESC, BEL, CR...) is escaped here, so a
/// scrape shown on a terminal cannot act on it.
fn value(v: &str) -> String {
    crate::escape::field(v).into_owned()
}

/// A process identity's labels.
pub(super) fn labels(k: &ProcKey) -> Labels {
    vec![
        ("comm".into(), value(&k.comm)),
        ("container".into(), value(&k.container)),
        ("pod".into(), value(&k.pod)),
        ("uid".into(), k.uid.clone()),
    ]
}

/// A pid's identity as learnt, else its comm alone.
pub(super) fn key_of(keys: &HashMap<u32, ProcKey>, pid: u32, comm: &str) -> ProcKey {
    keys.get(&pid).cloned().unwrap_or_else(|| ProcKey { comm: comm.into(), ..Default::default() })
}

/// Labels and more.
pub(super) fn with(mut l: Labels, extra: &[(&str, &str)]) -> Labels {
    l.extend(extra.iter().map(|(k, v)| (k.to_string(), value(v))));
    l
}

/// `pid`'s identity, learnt now if it was not (with the uid it ran as, kept for its other
/// series); a new comm (exec, PR_SET_NAME) replaces the old.
pub(super) fn learned(keys: &mut HashMap<u32, ProcKey>, pid: u32, comm: &str, uid: u32) -> ProcKey {
    let known = keys.entry(pid).or_insert_with(|| ProcKey { comm: comm.into(), ..Default::default() });
    if known.uid.is_empty() {
        known.uid = uid.to_string();
    }
    if known.comm != comm {
        known.comm = comm.into();
    }
    known.clone()
}
