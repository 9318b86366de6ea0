//! Label sets: a process identity and the values others chose, escaped.

use std::collections::HashMap;

/// A process identity as a label set: comm, container (12-digit ID), pod UID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcKey {
    pub comm: String,
    pub container: String,
    pub pod: String,
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
    ]
}

/// A pid's identity as learnt, else its comm alone.
pub(super) fn key_of(keys: &HashMap<u32, ProcKey>, pid: u32, comm: &str) -> ProcKey {
    keys.get(&pid).cloned().unwrap_or_else(|| ProcKey {
        comm: comm.into(),
        container: String::new(),
        pod: String::new(),
    })
}

/// Labels and more.
pub(super) fn with(mut l: Labels, extra: &[(&str, &str)]) -> Labels {
    l.extend(extra.iter().map(|(k, v)| (k.to_string(), value(v))));
    l
}
