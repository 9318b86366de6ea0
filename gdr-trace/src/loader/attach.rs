//! The attach strategy: for each row of the hook table, try what the kernel allows (fentry/fexit,
//! then kprobe/kretprobe; uprobes for libraries), keep the first that works, and record every
//! reason something did not. Nothing here is fatal: a hook that can't attach is reported.

use std::os::fd::OwnedFd;

use super::explain::explain;
use super::{
    btf::KernelBtf,
    module_fentry,
    options::{AttachMode, LoadOptions},
    storage_attach::{self, Pass},
    trampoline::Trampolines,
};
use crate::{
    facts::{HookStatus, KernelFacts, BYTES_LEFT_OUT, FENTRY_UNAVAILABLE, KPROBE_UNAVAILABLE, LEFT_OUT},
    hooks::{self, Hook, Path, Programs, Role, HOOKS},
};
use aya::{programs::KProbe, Ebpf};

pub fn attach_all(
    ebpf: &mut Ebpf,
    opts: &LoadOptions,
    kbtf: &KernelBtf,
    facts: &KernelFacts,
    homes: &std::collections::HashMap<String, Option<String>>,
    extra_links: &mut Vec<OwnedFd>,
) -> (Vec<HookStatus>, super::uprobe::Libraries) {
    let mut deferred = Vec::new();
    // The tracer's own rows (fork follower, capability probe) are the loader's, not hooks.
    let rows = HOOKS.iter().filter(|h| h.path != Path::Tracer);
    let tramp = Trampolines::new(kbtf, extra_links);
    let mut kernel = KernelSide { mode: opts.attach_mode, homes, facts, tramp };
    let started = std::time::Instant::now();
    let mut libs = super::uprobe::Libraries::default();
    // Every uprobe's perf event, opened now all at once (`perf_events`), and the programs of
    // those found verified side by side (`ahead`).
    let mut user_progs = Vec::new();
    for hook in rows.clone().filter(|h| opts.storage || !storage_attach::is_storage(h)) {
        let progs: Vec<&str> = match hook.programs {
            Programs::UserReturn { uprobe, uretprobe, .. } => vec![uprobe, uretprobe],
            Programs::UserSymbols { uprobe, uretprobe, .. } => {
                std::iter::once(uprobe).chain(uretprobe).collect()
            }
            // Attached by the library follower, which inherits them verified (`loader::provider`).
            Programs::Provider { uprobe, uretprobe, .. } if opts.uprobes => {
                user_progs.extend(std::iter::once(uprobe).chain(uretprobe));
                continue;
            }
            _ => continue,
        };
        let evs = match hook.programs {
            Programs::UserReturn { lib, .. } => {
                super::uprobe::events_ahead(&[hook.function], opts, &mut libs, lib, &progs)
            }
            Programs::UserSymbols { lib, symbols, .. } => {
                super::uprobe::events_ahead(symbols, opts, &mut libs, lib, &progs)
            }
            _ => continue,
        };
        if !evs.is_empty() {
            user_progs.extend(progs);
        }
        super::perf_events::open_ahead(evs);
    }
    super::ahead::load_programs(ebpf, user_progs);
    let mut statuses: Vec<HookStatus> = rows
        .enumerate()
        .map(|(i, hook)| {
            let mut st = HookStatus {
                hook: hook.function,
                side: if hook.is_kernel() { "kernel" } else { "user" },
                location: None,
                attached: None,
                reasons: vec![],
            };
            if let Some(why) = left_out(opts, hook) {
                st.reasons.push(why);
                return st;
            }
            match hook.programs {
                Programs::UserReturn { lib, uprobe, uretprobe } => super::uprobe::attach_user(
                    ebpf,
                    &[hook.function],
                    opts,
                    &mut libs,
                    lib,
                    &[uprobe, uretprobe],
                    &mut st,
                ),
                Programs::UserSymbols { lib, symbols, uprobe, uretprobe } => {
                    let progs: Vec<&str> = std::iter::once(uprobe).chain(uretprobe).collect();
                    super::uprobe::attach_user(ebpf, symbols, opts, &mut libs, lib, &progs, &mut st)
                }
                Programs::Provider { .. } if !opts.uprobes => st.reasons.push(super::uprobe::DISABLED.into()),
                Programs::Provider { .. } => st.reasons.push(super::provider::DEFERRED.into()),
                Programs::Syscalls { .. } | Programs::Tracepoint { .. } => {
                    let tramp = &mut kernel.tramp;
                    if storage_attach::attach(ebpf, hook, opts, facts, tramp, &mut st) == Pass::AfterAll {
                        deferred.push(i);
                    }
                }
                Programs::KernelSymbols { symbols, kprobe, kretprobe } => {
                    attach_symbols(ebpf, symbols, [kprobe, kretprobe], &kernel, &mut st)
                }
                _ => attach_kernel(ebpf, hook, &mut kernel, &mut st),
            }
            tracing::debug!("{} -> {:?} after {:?}", hook.function, st.attached, started.elapsed());
            st
        })
        .collect();
    storage_attach::finish(ebpf, opts, facts, &mut kernel.tramp, &mut statuses, &deferred);
    (statuses, libs)
}

/// What attaching kernel hooks needs to know of this kernel.
struct KernelSide<'a> {
    mode: AttachMode,
    /// Where each hooked kernel symbol lives (None: vmlinux), from one pass over kallsyms.
    homes: &'a std::collections::HashMap<String, Option<String>>,
    facts: &'a KernelFacts,
    tramp: Trampolines<'a>,
}

/// Why a row is left out on purpose (`--no-storage`, `serve` where fentry is refused,
/// `--no-bytes`), if it is.
fn left_out(opts: &LoadOptions, hook: &Hook) -> Option<String> {
    if !opts.storage && storage_attach::is_storage(hook) {
        return Some(if opts.storage_if_fentry {
            format!(
                "{LEFT_OUT}: fentry is refused here, and the system call tracepoints would cost every \
                 system call (serve --storage attaches them anyway)"
            )
        } else {
            format!("{LEFT_OUT} (--no-storage; doctor and audit don't use them)")
        });
    }
    (opts.no_bytes && matches!(hook.role, Role::WorkRequest | Role::ProviderContext))
        .then(|| format!("{BYTES_LEFT_OUT} (--no-bytes)"))
}

fn attach_kernel(ebpf: &mut Ebpf, hook: &Hook, k: &mut KernelSide, st: &mut HookStatus) {
    let Programs::Kernel { fentry, fexit, kprobe, kretprobe } = hook.programs else {
        unreachable!("user, syscall and tracepoint hooks are attached elsewhere")
    };
    let Some(module) = k.homes.get(hook.function).cloned() else {
        st.reasons.push(format!(
            "symbol {} not in /proc/kallsyms (this kernel or its loaded modules don't have it)",
            hook.function
        ));
        // Say also what this kernel would allow, so a reader knows what is missing besides the symbol.
        if let Some(why) = &k.facts.fentry_unavailable {
            st.reasons.push(format!("{FENTRY_UNAVAILABLE}: {why}"));
        }
        if let Some(why) = &k.facts.kprobe_unavailable {
            st.reasons.push(format!("{KPROBE_UNAVAILABLE}: {why}"));
        }
        return;
    };
    st.location = Some(module.clone().unwrap_or_else(|| "vmlinux".into()));

    // A row with kprobes only (nvidia.ko ships no BTF: `hooks/nv_host.rs`) has no BTF side.
    let has_btf_side = fentry.is_some() || fexit.is_some();
    if !has_btf_side && k.mode == AttachMode::Fentry {
        st.reasons.push("fentry: this hook has kprobe programs only (its module ships no BTF)".into());
    }
    if k.mode != AttachMode::Kprobe && has_btf_side {
        // The reporting program (fexit) first: if it can't attach, nothing is left half-attached.
        let btf_progs: Vec<(&str, bool)> = [(fexit, true), (fentry, false)]
            .into_iter()
            .filter_map(|(p, exit)| p.map(|p| (p, exit)))
            .collect();
        let mut done = Vec::new();
        for (prog, is_exit) in &btf_progs {
            let kind = if *is_exit { "fexit" } else { "fentry" };
            match k.tramp.attach(ebpf, prog, *is_exit, hook.function, module.as_deref()) {
                Ok(()) => done.push(kind),
                Err(e) => {
                    st.reasons.push(format!("{kind}: {e}"));
                    break;
                }
            }
        }
        if done.len() == btf_progs.len() {
            done.reverse();
            st.attached = Some(done.join("+"));
            return;
        }
        if !done.is_empty() {
            // Rare (same function, same BTF): keep what works and say what is missing.
            st.attached = Some(done.join("+"));
            st.reasons.push("entry program missing: the call-in-progress marker is not set".into());
            return;
        }
    }
    if k.mode != AttachMode::Fentry {
        let probes: Vec<&str> = [kprobe, kretprobe].into_iter().flatten().collect();
        match attach_kprobes(ebpf, &probes, hook.function) {
            Ok(()) => {
                let kinds: Vec<&str> = [kprobe.map(|_| "kprobe"), kretprobe.map(|_| "kretprobe")]
                    .into_iter()
                    .flatten()
                    .collect();
                st.attached = Some(kinds.join("+"));
            }
            Err(e) => st.reasons.push(format!("kprobe: {e}")),
        }
    }
}

/// A symbol-set row: its kprobe and kretprobe at every one of `symbols` this kernel has (kprobes
/// only: the rows are cold verbs). Attached where any is found; the reasons list which were
/// hooked and which this kernel lacks.
fn attach_symbols(ebpf: &mut Ebpf, symbols: &[&str], progs: [&str; 2], k: &KernelSide, st: &mut HookStatus) {
    let (found, missing): (Vec<&str>, Vec<&str>) = symbols.iter().partition(|s| k.homes.contains_key(**s));
    if found.is_empty() {
        st.reasons.push(format!("none of {} in /proc/kallsyms", symbols.join(", ")));
        if let Some(why) = &k.facts.kprobe_unavailable {
            st.reasons.push(format!("{KPROBE_UNAVAILABLE}: {why}"));
        }
        return;
    }
    if k.mode == AttachMode::Fentry {
        st.reasons.push("fentry: this hook has kprobe programs only (cold verbs)".into());
        return;
    }
    let mut homes: Vec<String> =
        found.iter().map(|s| k.homes[*s].clone().unwrap_or_else(|| "vmlinux".into())).collect();
    homes.dedup();
    st.location = Some(homes.join(", "));
    let mut hooked = Vec::new();
    for sym in &found {
        match attach_kprobes(ebpf, &progs, sym) {
            Ok(()) => hooked.push(*sym),
            Err(e) => st.reasons.push(format!("kprobe at {sym}: {e}")),
        }
    }
    if hooked.is_empty() {
        return;
    }
    st.attached = Some("kprobe+kretprobe".into());
    st.reasons.push(format!("hooked: {}", hooked.join(", ")));
    if !missing.is_empty() {
        st.reasons.push(format!("not in this kernel: {}", missing.join(", ")));
    }
}

/// Why kprobes can't attach here, if they can't: no kprobe PMU means no CONFIG_KPROBES.
pub fn kprobe_unavailable() -> Option<String> {
    let pmu = "/sys/bus/event_source/devices/kprobe/type";
    (!std::path::Path::new(pmu).exists())
        .then(|| format!("no kprobe PMU ({pmu} missing: kernel built without CONFIG_KPROBES?)"))
}

/// Why fentry can't load here, if it can't: loads (never attaches) a no-op fentry program on
/// the capability probe's function (`module_fentry::probe`), with the BTF id from btf-rs.
pub fn fentry_unavailable(kbtf: &KernelBtf) -> Option<String> {
    let row = hooks::by_role(Role::CapabilityProbe);
    let Programs::Kernel { fentry: Some(prog), .. } = row.programs else {
        unreachable!("the capability probe row is an fentry program")
    };
    kbtf.func_id(row.function, None).and_then(|id| module_fentry::probe(prog, id)).err()
}

fn attach_kprobes(ebpf: &mut Ebpf, progs: &[&str], function: &str) -> Result<(), String> {
    if let Some(why) = kprobe_unavailable() {
        return Err(why);
    }
    for prog in progs {
        let p = ebpf.program_mut(prog).ok_or_else(|| format!("program {prog} missing from object"))?;
        let p: &mut KProbe = p.try_into().map_err(|e| format!("{prog}: {e}"))?;
        // A symbol-set row attaches one program at several functions: loaded once.
        if p.fd().is_err() {
            p.load().map_err(|e| explain(prog, e))?;
        }
        p.attach(function, 0).map_err(|e| explain(prog, e))?;
    }
    Ok(())
}
