//! How the hooks attached, for people: `probes`' table and `watch`/`attach`'s start banner.
//!
//! A fact of the whole kernel (no kprobe PMU, fentry refused, syscall tracepoints' cost) is
//! stated once above the rows it explains, which carry its mark (`[f]`); each row keeps one
//! short reason of its own. `probes --wide` (every reason, as the loader wrote it) and
//! `--json` give everything.

use std::fmt::Write;

use comfy_table::{ColumnConstraint, Width};

use crate::{
    facts::{HookStatus, KernelFacts, FENTRY_UNAVAILABLE, KPROBE_UNAVAILABLE, SYSCALL_TRACEPOINT_COST},
    term,
};

/// One fact of the kernel that explains several rows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KernelWide {
    /// The mark its rows carry.
    mark: char,
    /// What it is about ("fentry/fexit").
    what: &'static str,
    /// What the kernel said.
    why: String,
    /// The few words a row says when it has no reason of its own.
    short: &'static str,
}

fn candidates(facts: &KernelFacts) -> Vec<KernelWide> {
    let mut out = Vec::new();
    if let Some(why) = &facts.fentry_unavailable {
        out.push(KernelWide { mark: 'f', what: "fentry/fexit", why: why.clone(), short: "no fentry" });
    }
    if let Some(why) = &facts.kprobe_unavailable {
        out.push(KernelWide { mark: 'k', what: "kprobes", why: why.clone(), short: "no kprobe" });
    }
    out.push(KernelWide {
        mark: 's',
        what: "syscall tracepoints",
        why: SYSCALL_TRACEPOINT_COST.strip_prefix("syscall tracepoints ").unwrap_or_default().into(),
        short: "slows every syscall",
    });
    out
}

/// Which kernel-wide fact `reason` restates, by its mark.
fn mark_of(reason: &str) -> Option<char> {
    if reason.starts_with(FENTRY_UNAVAILABLE) || reason.contains(&format!(": {FENTRY_UNAVAILABLE}: ")) {
        Some('f')
    } else if reason.starts_with(KPROBE_UNAVAILABLE) {
        Some('k')
    } else if reason == SYSCALL_TRACEPOINT_COST {
        Some('s')
    } else {
        None
    }
}

/// The kernel-wide facts that explain at least one of `hooks`.
fn kernel_wide(facts: &KernelFacts, hooks: &[HookStatus]) -> Vec<KernelWide> {
    let used: Vec<char> = hooks.iter().flat_map(|h| h.reasons.iter().filter_map(|r| mark_of(r))).collect();
    candidates(facts).into_iter().filter(|k| used.contains(&k.mark)).collect()
}

/// A reason of the row's own, short: the hook's name and a closing explanation in
/// parentheses left out (`--wide` has them), but never an errno.
fn short(reason: &str, hook: &str) -> String {
    let r = reason.strip_prefix(&format!("symbol {hook} ")).unwrap_or(reason);
    match r.rfind(" (") {
        Some(i) if i > 0 && r.ends_with(')') && !r[i..].starts_with(" (os error") => r[..i].to_string(),
        _ => r.to_string(),
    }
}

/// The row's note: its own first reason (and how many more), else the short words of the
/// kernel-wide facts; then their marks.
fn note(h: &HookStatus, wide: &[KernelWide]) -> String {
    let own: Vec<&String> = h.reasons.iter().filter(|r| mark_of(r).is_none()).collect();
    let mut marks: Vec<&KernelWide> = Vec::new();
    for m in h.reasons.iter().filter_map(|r| mark_of(r)) {
        if let Some(k) = wide.iter().find(|k| k.mark == m) {
            if !marks.contains(&k) {
                marks.push(k);
            }
        }
    }
    let mut text = match own.as_slice() {
        [] => marks.iter().map(|k| k.short).collect::<Vec<_>>().join(", "),
        [one] => short(one, h.hook),
        [first, rest @ ..] => format!("{} (+{} more)", short(first, h.hook), rest.len()),
    };
    if !marks.is_empty() {
        let m: Vec<String> = marks.iter().map(|k| k.mark.to_string()).collect();
        let _ = write!(text, " [{}]", m.join(","));
    }
    text
}

/// The kernel-wide facts as lines of `indent` + `[mark] what: why`, wrapped to the width.
fn facts_lines(wide: &[KernelWide], indent: &str) -> String {
    let hang = format!("{indent}    ");
    wide.iter()
        .map(|k| format!("{}\n", term::wrap(&format!("{indent}[{}] {}: {}", k.mark, k.what, k.why), &hang)))
        .collect()
}

/// Where, short: a library by its file name, a tracepoint by its category when its name is
/// the hook's ("filemap"), else in full.
fn location(h: &HookStatus) -> Option<String> {
    let l = h.location.as_deref()?;
    Some(match l.strip_prefix("tracepoint ") {
        _ if l.starts_with('/') => l.rsplit('/').next().unwrap_or(l).to_string(),
        Some(tp) => match tp.split_once(':') {
            Some((category, name)) if name == h.hook => category.to_string(),
            _ => tp.to_string(),
        },
        None => l.to_string(),
    })
}

/// A row's last column: where it attached (or was found), then its note.
fn where_why(h: &HookStatus, wide: &[KernelWide]) -> String {
    let note = note(h, wide);
    match location(h) {
        Some(l) if note.is_empty() => l,
        Some(l) => format!("{l}: {note}"),
        None => note,
    }
}

/// How many hooks attached, and how: "12/40 hooks attached (8 uprobe+uretprobe, 4 tracepoint)",
/// each count glued to its kind (for [`term::wrap`]).
fn attached_count(hooks: &[HookStatus]) -> String {
    let count = crate::facts::HookCount::statuses(hooks);
    let mut how: Vec<(&str, usize)> = Vec::new();
    let counted = hooks.iter().filter(|h| !crate::facts::TRACER_ROWS.contains(&h.hook));
    for a in counted.filter_map(|h| h.attached.as_deref()) {
        match how.iter_mut().find(|(k, _)| *k == a) {
            Some((_, n)) => *n += 1,
            None => how.push((a, 1)),
        }
    }
    let how: Vec<String> = how.iter().map(|(k, n)| format!("{n}{}{k}", term::GLUE)).collect();
    let how = if how.is_empty() { String::new() } else { format!(" ({})", how.join(", ")) };
    // Hooks left out on purpose are neither attached nor missing: out of the total.
    let out = match count.left_out {
        0 => String::new(),
        n => format!(", {n} left out on purpose"),
    };
    format!("{}/{} hooks attached{how}{out}", count.attached, count.total)
}

/// How much `probes` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// The hooks by family and outcome, a few names a line (the default).
    Grouped,
    /// A row per hook with one short reason (`-v`).
    Rows,
    /// Every column and every reason, unwrapped (`--wide`).
    Wide,
}

/// `probes`' text: the kernel's facts once, then the hooks (by family, or a row each with one
/// short reason, laid out to the width); with `Wide`, every column and every reason on its row.
pub fn probes(facts: &KernelFacts, hooks: &[HookStatus], detail: Detail) -> String {
    let wide = detail == Detail::Wide;
    let kernel = format!(
        "kernel {} (vmlinux BTF: {}; ib_device.name offset: {})",
        facts.kernel,
        if facts.vmlinux_btf { "yes" } else { "no" },
        facts.ib_device_name_off.map_or("unknown (no BTF for struct ib_device)".into(), |o| o.to_string())
    );
    let mut out = if wide { kernel } else { term::wrap(&kernel, "    ") };
    out.push('\n');
    for f in &facts.fact_sources {
        let line = format!("  {}: {}{}", f.fact, f.source, if f.fallback { " [fallback]" } else { "" });
        out.push_str(&if wide { line } else { term::wrap(&line, "      ") });
        out.push('\n');
    }
    if let Some(d) = &facts.driver {
        for line in driver_lines(d) {
            out.push_str(&if wide { line } else { term::wrap(&line, "      ") });
            out.push('\n');
        }
    }
    if wide {
        let mut t = full_table(hooks);
        t.set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        let _ = writeln!(out, "{}", crate::term::render(&t));
        return out;
    }
    let kw = kernel_wide(facts, hooks);
    if !kw.is_empty() {
        out.push_str("On this kernel (rows marked with the letter):\n");
        out.push_str(&facts_lines(&kw, "  "));
    }
    if detail == Detail::Grouped {
        out.push_str(&grouped::grouped(hooks, &|h| note(h, &kw)));
        out.push_str(&term::wrap(
            &format!(
                "{}. Each hook: gdr-trace probes -v; every reason in full: --wide (or --json).",
                attached_count(hooks)
            ),
            "",
        ));
        out.push('\n');
        return out;
    }
    let mut t = term::table();
    t.set_header(["HOOK", "ATTACHED", "WHERE / WHY"]);
    for h in hooks {
        t.add_row([h.hook.to_string(), h.attached.clone().unwrap_or_else(|| "NO".into()), where_why(h, &kw)]);
    }
    // Names are not cut inside a word (lists of system calls wrap at their commas), and how
    // each attached stays on one line: the reasons take what is left.
    let longest_word = hooks.iter().flat_map(|h| h.hook.split(' ')).map(str::len).max().unwrap_or(4);
    // The constraint's width counts the cell's padding (a space each side).
    let hook_width = u16::try_from(longest_word.max(4) + 2).unwrap_or(u16::MAX);
    if let Some(c) = t.column_mut(0) {
        c.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(hook_width)));
    }
    if let Some(c) = t.column_mut(1) {
        c.set_constraint(ColumnConstraint::ContentWidth);
    }
    let _ = writeln!(out, "{}", crate::term::render(&t));
    out.push_str(&term::wrap(
        &format!("{}. Every reason in full: gdr-trace probes --wide (or --json).", attached_count(hooks)),
        "",
    ));
    out.push('\n');
    out
}

/// The NVIDIA driver branch found, the versions it came from, and the nvidia-peermem flow
/// expected there (docs/drivers.md).
pub fn driver_lines(d: &crate::drivers::Detected) -> Vec<String> {
    let version = |r: &crate::drivers::Reading| match (&r.version, &r.reason) {
        (Some(v), _) => format!("{v} ({})", r.file),
        (None, Some(why)) => why.clone(),
        (None, None) => r.file.clone(),
    };
    let branch = match (d.branch, d.row) {
        (Some(b), Some((rb, tag))) if b == rb => format!("branch {b} (flow read at {tag})"),
        (Some(b), Some((rb, tag))) => format!("branch {b} (flow of {rb}, read at {tag})"),
        (Some(b), None) => format!("branch {b}"),
        (None, _) => "branch unknown".into(),
    };
    let mut lines = vec![format!(
        "NVIDIA driver {branch}: nvidia.ko {}; nvidia-peermem {}",
        version(&d.nvidia),
        version(&d.nvidia_peermem)
    )];
    lines.extend(d.expected.iter().map(|e| format!("  expected peer flow: {e}")));
    lines.extend(d.reasons.iter().map(|r| format!("  ! {r}")));
    lines
}

/// Every column, every reason (one a line in its cell).
fn full_table(hooks: &[HookStatus]) -> comfy_table::Table {
    let mut t = term::table();
    t.set_header(["HOOK", "SIDE", "WHERE", "ATTACHED", "WHY NOT / NOTES"]);
    for h in hooks {
        t.add_row([
            h.hook.to_string(),
            h.side.to_string(),
            h.location.clone().unwrap_or_else(|| "-".into()),
            h.attached.clone().unwrap_or_else(|| "NO".into()),
            h.reasons.join("\n"),
        ]);
    }
    t
}

/// `watch`/`attach`'s start: how many attached and how, the kernel-wide facts that matter,
/// what is missing grouped by why (a few names each), and where to read the rest.
pub fn banner(facts: &KernelFacts, hooks: &[HookStatus]) -> Vec<String> {
    let mut lines =
        vec![term::wrap(&format!("gdr-trace: kernel {}, {}", facts.kernel, attached_count(hooks)), "    ")];
    let kw = kernel_wide(facts, hooks);
    if !kw.is_empty() {
        lines.push(facts_lines(&kw, "  ").trim_end().to_string());
    }
    let mut missing: Vec<(String, Vec<&str>)> = Vec::new();
    for h in hooks.iter().filter(|h| h.attached.is_none()) {
        let why = note(h, &kw);
        match missing.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(h.hook),
            None => missing.push((why, vec![h.hook])),
        }
    }
    const NAMED: usize = 3;
    for (why, names) in &missing {
        let mut who = names.iter().take(NAMED).copied().collect::<Vec<_>>().join(", ");
        if names.len() > NAMED {
            let _ = write!(who, " and {} more", names.len() - NAMED);
        }
        // Left out on purpose: said, without the warning mark.
        let mark = if crate::facts::is_left_out(why) { "  left out:" } else { "  ! not attached:" };
        lines.push(term::wrap(&format!("{mark} {who}: {why}"), "      "));
    }
    if !missing.is_empty() || !kw.is_empty() {
        lines.push("  every hook and why: gdr-trace probes".into());
    }
    lines
}

mod grouped;

#[cfg(test)]
mod tests;

/// `library libcufile.so.0 attached: /opt/lib/libcufile.so.0 (dev 0:2f inode 12, mount ns
/// 4026532300, cgroup /ctr) in 1 process: 9 functions hooked`.
pub fn copy_line(c: &crate::facts::LibraryCopy) -> String {
    let ns = match (c.own_mnt_ns, c.mnt_ns) {
        (true, _) => String::new(),
        (false, Some(n)) => format!(", mount ns {n}"),
        (false, None) => ", mount ns unknown".into(),
    };
    let cg = c.cgroup.as_deref().map_or(String::new(), |g| format!(", cgroup {}", crate::escape::field(g)));
    let what = match c.state.as_str() {
        "attached" => match c.via.as_deref() {
            Some(via) => format!("{} functions hooked ({via})", c.hooked.len()),
            None => format!("{} functions hooked", c.hooked.len()),
        },
        "detached" => "hooks removed (no process maps it now)".into(),
        _ => format!("not hooked: {}", crate::escape::field(&c.reasons.join("; "))),
    };
    format!(
        "library {} {}: {} (dev {} inode {}{ns}{cg}) in {} process{}: {what}",
        c.library,
        c.state,
        crate::escape::field(&c.path),
        c.dev,
        c.inode,
        c.processes,
        if c.processes == 1 { "" } else { "es" }
    )
}

#[cfg(test)]
mod copy_line_tests {
    use super::copy_line;
    use crate::facts::LibraryCopy;

    #[test]
    fn a_copy_line_names_the_namespace_only_when_it_is_another() {
        let mut c = LibraryCopy {
            library: "libcufile.so.0".into(),
            state: "attached".into(),
            path: "/opt/lib/libcufile.so.0".into(),
            dev: "0:2f".into(),
            inode: 12,
            mnt_ns: Some(4026532300),
            own_mnt_ns: false,
            cgroup: Some("/ctr".into()),
            processes: 2,
            hooked: vec!["cuFileRead".into(), "cuFileWrite".into()],
            ..Default::default()
        };
        assert_eq!(
            copy_line(&c),
            "library libcufile.so.0 attached: /opt/lib/libcufile.so.0 (dev 0:2f inode 12, mount ns 4026532300, \
             cgroup /ctr) in 2 processes: 2 functions hooked"
        );
        c.via = Some("uprobe_multi".into());
        assert!(copy_line(&c).ends_with(": 2 functions hooked (uprobe_multi)"), "{}", copy_line(&c));
        c.own_mnt_ns = true;
        c.state = "failed".into();
        c.processes = 1;
        c.reasons = vec!["none of the hooked libcufile.so.0 functions is in this copy".into()];
        assert_eq!(
            copy_line(&c),
            "library libcufile.so.0 failed: /opt/lib/libcufile.so.0 (dev 0:2f inode 12, cgroup /ctr) in 1 process: \
             not hooked: none of the hooked libcufile.so.0 functions is in this copy"
        );
    }
}
