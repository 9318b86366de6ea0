//! `probes`' default: the hooks by family (rdma, gpu, p2p, storage), each family a line with
//! its count, then one line per way they attached or reason they did not, naming a few hooks.
//! Fits 80 columns in a screenful; `probes -v` has a row per hook, `--wide` every reason.

use crate::{
    facts::{HookCount, HookStatus, TRACER_ROWS},
    hooks::Path,
    term,
};

/// Why a hook did not attach, short (`hooks_text`'s note).
type Note<'a> = &'a dyn Fn(&HookStatus) -> String;

/// Hooks named per line (the rest counted).
const NAMED: usize = 4;

const FAMILIES: [(Path, &str); 4] =
    [(Path::Rdma, "rdma"), (Path::Gpu, "gpu"), (Path::P2p, "p2p"), (Path::Storage, "storage")];

fn family(h: &HookStatus) -> Option<Path> {
    crate::hooks::HOOKS.iter().find(|d| d.function == h.hook && d.path != Path::Tracer).map(|d| d.path)
}

/// `names` as "a, b, c and 5 more"; a row naming several system calls in parentheses.
fn named(names: &[&str]) -> String {
    let shown: Vec<String> = names
        .iter()
        .take(NAMED)
        .map(|n| if n.contains(", ") { format!("({n})") } else { n.to_string() })
        .collect();
    let mut s = shown.join(", ");
    if names.len() > NAMED {
        s.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    s
}

/// One family (or the tracer's rows): its count, then a line per outcome.
fn lines_of(title: &str, members: &[&HookStatus], note: Note, counted: bool) -> Vec<String> {
    let mut out = Vec::new();
    let c = HookCount::statuses(&members.iter().map(|h| (*h).clone()).collect::<Vec<_>>());
    out.push(match (counted, c.left_out) {
        (false, _) => format!("{title} (the tracer's own, not counted):"),
        (true, 0) => format!("{title}: {}/{} attached", c.attached, c.total),
        (true, n) => format!("{title}: {}/{} attached, {n} left out on purpose", c.attached, c.total),
    });
    // Outcomes in the order first met: how they attached, or the note saying why not.
    let mut outcomes: Vec<(String, Vec<&str>)> = Vec::new();
    for h in members {
        let key = match &h.attached {
            Some(how) => how.clone(),
            None if h.left_out() => "left out".into(),
            None => format!("! {}", note(h)),
        };
        match outcomes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(h.hook),
            None => outcomes.push((key, vec![h.hook])),
        }
    }
    for (key, names) in outcomes {
        out.push(term::wrap(&format!("  {key}: {}", named(&names)), "      "));
    }
    out
}

/// The grouped listing (without the kernel's lines and the closing count, which `probes` adds).
/// `note`: why a hook did not attach, in the few words of the banner.
pub(super) fn grouped(hooks: &[HookStatus], note: Note) -> String {
    let mut out = Vec::new();
    for (path, name) in FAMILIES {
        let members: Vec<&HookStatus> = hooks.iter().filter(|h| family(h) == Some(path)).collect();
        if !members.is_empty() {
            out.extend(lines_of(name, &members, note, true));
        }
    }
    // Rows of no family (none today): listed, never dropped.
    let other: Vec<&HookStatus> =
        hooks.iter().filter(|h| family(h).is_none() && !TRACER_ROWS.contains(&h.hook)).collect();
    if !other.is_empty() {
        out.extend(lines_of("other", &other, note, true));
    }
    let tracer: Vec<&HookStatus> = hooks.iter().filter(|h| TRACER_ROWS.contains(&h.hook)).collect();
    if !tracer.is_empty() {
        out.extend(lines_of("tracer", &tracer, note, false));
    }
    out.join("\n") + "\n"
}
