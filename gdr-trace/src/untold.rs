//! What this host's hooks cannot tell. Each fact a verdict rests on needs one of a few hooks
//! (by [`Role`]); where none of them attached although the thing they watch could run here, the
//! fact cannot be told and every command says so first (text, the `hooks` record, metrics,
//! `/healthz`, `doctor`, `audit`, the gate's exit 2) instead of reporting its absence as
//! "nothing seen". Computed from the hook statuses and the kernel's facts only.

use serde::Serialize;

use crate::{
    facts::{HookStatus, KernelFacts, NOTHING_TO_WATCH, UPROBES_DISABLED},
    hooks::Role,
};

/// A fact the verdicts need, and the hooks that give it.
pub struct Fact {
    /// The hook family it belongs to (as `hook_families` names them).
    pub family: &'static str,
    pub name: &'static str,
    /// Hooks of these roles give it (on `kernel` side only, when set).
    roles: &'static [Role],
    kernel: bool,
    /// What cannot be told without it.
    what: &'static str,
    /// The hook that is missing, for the reason line.
    needs: &'static str,
    /// Only said when this fact is told (its records ride on that one's); and where that one
    /// is told, this one's hooks missing is a gap, not an absence.
    after: Option<&'static str>,
}

const fn fact(
    family: &'static str,
    name: &'static str,
    roles: &'static [Role],
    kernel: bool,
    what: &'static str,
    needs: &'static str,
) -> Fact {
    Fact { family, name, roles, kernel, what, needs, after: None }
}

/// Every fact, in the order they are said.
pub const FACTS: [Fact; 9] = [
    fact(
        "rdma",
        "registrations",
        &[Role::UserRegister, Role::UmemPinned, Role::DmabufRegister, Role::PeerRegister],
        false,
        "RDMA registrations",
        "registration hook",
    ),
    // Where libibverbs is hooked, registrations are seen whether or not ib_umem_get is there
    // (its module may load after the tracer started): then their memory type is the gap.
    Fact {
        after: Some("registrations"),
        ..fact(
            "rdma",
            "memory_type",
            &[Role::UmemPinned, Role::DmabufRegister, Role::PeerRegister],
            true,
            "memory type of registrations (host or GPU)",
            "kernel registration hook",
        )
    },
    Fact {
        after: Some("memory_type"),
        ..fact(
            "rdma",
            "queue_purpose",
            &[Role::PinVerb],
            true,
            "purpose of the kernel's pins (registration or queue memory: a pin no libibverbs call joins is reported as queue memory of unknown purpose)",
            "uverbs verb hook",
        )
    },
    fact(
        "gpu",
        "gpu_pins",
        &[
            Role::GpuPinned,
            Role::PeerPages,
            Role::PeerPagesPersistent,
            Role::PeerClient,
            Role::PeerClientPersistent,
        ],
        true,
        "GPU pages pinned for NICs (nvidia_p2p, nvidia-peermem)",
        "GPU pin hook",
    ),
    fact("p2p", "peer_copies", &[Role::PeerCopy], false, "GPU-to-GPU copies (direct or staged)", "libcuda copy hook"),
    fact("storage", "gds_calls", &[Role::CuFileCall], false, "cuFile calls (GDS or compatibility mode)", "cuFile hook"),
    fact("storage", "nvfs_io", &[Role::NvfsCall], true, "nvidia-fs direct I/O", "nvidia-fs hook"),
    fact(
        "storage",
        "file_io",
        &[Role::PosixCounter, Role::PageCacheFill],
        true,
        "file reads and writes (page cache or direct)",
        "file I/O hook",
    ),
    fact("bytes", "bytes_per_mr", &[Role::WorkRequest], false, "bytes per registration", "work-request hook"),
];

/// Why no kernel fact can be told on a kernel that takes neither way in (each one's own reason
/// is in the kernel facts: `probes`' [k] and [f] lines, the `hooks` record's `kernel`).
pub const BLIND_KERNEL: &str = "this kernel takes neither kprobes nor fentry";

/// Where a fact stands on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "why")]
pub enum State {
    /// A hook that gives it attached (or is placed later, per library copy).
    Told,
    /// What it watches could run here, and nothing sees it: why.
    Untold(String),
    /// Left out on purpose (`--no-storage`, `--no-bytes`, a command that does not use it).
    LeftOut,
    /// Nothing it watches is on this host (the module or library is not there): nothing to tell.
    Absent,
}

/// One fact that cannot be told, as every command says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untold {
    pub family: &'static str,
    pub fact: &'static str,
    /// The line: what cannot be told, and why.
    pub says: String,
}

/// Each fact's state on this host, in [`FACTS`]' order.
pub fn states(facts: &KernelFacts, hooks: &[HookStatus]) -> Vec<(&'static Fact, State)> {
    let mut out: Vec<(&'static Fact, State)> = Vec::new();
    for f in &FACTS {
        let state = state(f, facts, hooks);
        // A fact riding on another is only as knowable as that one.
        let state = match (f.after.and_then(|a| out.iter().find(|(g, _)| g.name == a)), state) {
            (Some((_, s)), _) if *s != State::Told => s.clone(),
            // The other's hooks show the subsystem is here: its own missing hooks leave a gap.
            (Some(_), State::Absent) => State::Untold(first_reason(f, hooks)),
            (_, state) => state,
        };
        out.push((f, state));
    }
    out
}

/// The facts that cannot be told here, each with its line (a fact riding on another untold one
/// is not said twice).
pub fn untold(facts: &KernelFacts, hooks: &[HookStatus]) -> Vec<Untold> {
    let states = states(facts, hooks);
    states
        .iter()
        .filter(|(f, _)| f.after.is_none_or(|a| states.iter().any(|(g, s)| g.name == a && *s == State::Told)))
        .filter_map(|(f, s)| match s {
            State::Untold(why) => Some(Untold {
                family: f.family,
                fact: f.name,
                says: format!("{} cannot be told here: no {} attached ({why})", f.what, f.needs),
            }),
            _ => None,
        })
        .collect()
}

/// Whether `name` is told here (an unknown name: told; no statuses at all: a replay that
/// recorded none, nothing says a hook is off).
pub fn is_told(facts: &KernelFacts, hooks: &[HookStatus], name: &str) -> bool {
    hooks.is_empty() || states(facts, hooks).iter().all(|(f, s)| f.name != name || *s == State::Told)
}

/// Whether a registration only a libibverbs uprobe saw is a claim, not evidence: where the
/// memory type is told (a kernel registration hook attached, or is placed when its module
/// loads) a real one is seen by the kernel too; where no RDMA core is here at all nothing real
/// can be registered. Where kernel hooks are missing, every registration is such a one, and
/// it stays counted (the untold line says what cannot be told).
pub fn claims_apart(facts: &KernelFacts, hooks: &[HookStatus]) -> bool {
    states(facts, hooks)
        .iter()
        .any(|(f, s)| f.name == "memory_type" && matches!(s, State::Told | State::Absent))
}

/// The statuses of the hooks that give `f`.
fn rows<'a>(f: &Fact, hooks: &'a [HookStatus]) -> Vec<&'a HookStatus> {
    hooks
        .iter()
        .filter(|h| {
            crate::hooks::by_function(h.hook)
                .is_some_and(|d| f.roles.contains(&d.role) && (!f.kernel || d.is_kernel()))
        })
        .collect()
}

/// "hook: its first reason", of `f`'s first hook.
fn first_reason(f: &Fact, hooks: &[HookStatus]) -> String {
    rows(f, hooks).first().map_or_else(String::new, |h| {
        format!("{}: {}", h.hook, h.reasons.first().map_or("not attached", String::as_str))
    })
}

fn state(f: &Fact, facts: &KernelFacts, hooks: &[HookStatus]) -> State {
    let rows = rows(f, hooks);
    let deferred = |h: &&HookStatus| h.reasons.iter().any(|r| r == crate::loader::provider::DEFERRED);
    if rows.is_empty() || rows.iter().any(|h| h.attached.is_some()) || rows.iter().any(deferred) {
        return State::Told;
    }
    if rows.iter().all(|h| h.left_out()) {
        return State::LeftOut;
    }
    if rows.iter().any(|h| h.reasons.iter().any(|r| r.ends_with(NOTHING_TO_WATCH))) {
        return State::Absent;
    }
    if rows.iter().any(|h| h.reasons.first().is_some_and(|r| r == UPROBES_DISABLED)) {
        return State::Untold(UPROBES_DISABLED.into());
    }
    // The kernel allows neither way in: whatever loads later cannot be seen either.
    if f.kernel && facts.kprobe_unavailable.is_some() && facts.fentry_unavailable.is_some() {
        return State::Untold(BLIND_KERNEL.into());
    }
    // Found but not hooked: the reason it gave.
    match rows.iter().find(|h| h.location.is_some()) {
        Some(h) => State::Untold(format!("{}: {}", h.hook, h.reasons.first().map_or("", String::as_str))),
        None => State::Absent,
    }
}

#[cfg(test)]
mod tests;
