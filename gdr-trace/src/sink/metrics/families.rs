//! Hook families (rdma, gpu, p2p, storage, bytes): which are traced (what each can tell:
//! `crate::untold`).

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::labels::Labels;

use crate::{facts::HookStatus, loader::provider::DEFERRED};

/// Each hook family, and whether it traces (a hook of it attached), in a fixed order.
pub fn hook_families(hooks: &[HookStatus]) -> Vec<(&'static str, bool)> {
    use crate::hooks::Path;
    let mut f: Vec<(&'static str, bool)> =
        [("rdma", Path::Rdma), ("gpu", Path::Gpu), ("p2p", Path::P2p), ("storage", Path::Storage)]
            .into_iter()
            .map(|(name, path)| {
                // libibverbs' `ibv_reg_dmabuf_mr` is on the GPU path (its MRs are GPU memory
                // when the exporter is NVIDIA's) but tells nothing of the GPU by itself: a
                // registration call, in the rdma family's facts.
                let of = |h: &&HookStatus| {
                    crate::hooks::HOOKS.iter().any(|d| {
                        d.function == h.hook
                            && d.path == path
                            && !(path == Path::Gpu
                                && !d.is_kernel()
                                && d.role == crate::hooks::Role::DmabufRegister)
                    })
                };
                (name, hooks.iter().filter(of).any(|h| h.attached.is_some()))
            })
            .collect();
    // Bytes per MR: the work-request hooks are mostly placed later, where a process's provider
    // is found; the family traces unless left out (`--no-bytes`) or uprobes are off.
    let wr = |h: &&HookStatus| {
        crate::hooks::HOOKS.iter().any(|d| d.function == h.hook && d.role == crate::hooks::Role::WorkRequest)
    };
    let bytes =
        hooks.iter().filter(wr).any(|h| h.attached.is_some() || h.reasons.iter().any(|r| r == DEFERRED));
    f.push(("bytes", bytes));
    f
}

/// Whether a hook of `role` is attached. Without any hook status (a sink fed records, not a
/// trace) nothing says a hook is off.
pub fn role_traced(hooks: &[HookStatus], role: crate::hooks::Role) -> bool {
    hooks.is_empty()
        || hooks.iter().any(|h| {
            h.attached.is_some() && crate::hooks::HOOKS.iter().any(|d| d.function == h.hook && d.role == role)
        })
}

/// Whether a loss reason's family traces (storage's and byte counting's own reasons are no
/// series when theirs is off: not traced, never 0).
pub fn lost_traced(hooks: &[HookStatus], reason: &str) -> bool {
    let family = gdr_trace_common::lost::REASONS.iter().find(|r| r.name == reason).and_then(|r| r.family);
    let Some(family) = family else { return true };
    hooks.is_empty() || hook_families(hooks).contains(&(family, true))
}

/// The GPU counters, each only where its hook traces (not traced is no series, never a 0):
/// pins outside any registration (`pins`: count, bytes) and GPU memory freed under one.
pub(super) fn register_gpu(reg: &mut Registry, hooks: &[HookStatus], pins: (u64, u64), freed: u64) {
    use crate::hooks::Role;
    if role_traced(hooks, Role::GpuPinned) {
        let count = Counter::<u64>::default();
        count.inc_by(pins.0);
        reg.register(
            "gpu_pins_outside_rdma",
            "GPU pages pinned for P2P outside any registration (GDS or other)",
            count,
        );
        let bytes = Counter::<u64>::default();
        bytes.inc_by(pins.1);
        reg.register_with_unit("gpu_pinned_outside_rdma", "Bytes of those pins", Unit::Bytes, bytes);
    }
    if role_traced(hooks, Role::GpuFreeCallback) {
        let n = Counter::<u64>::default();
        n.inc_by(freed);
        reg.register("gpu_freed_under_registration", "GPU memory freed while a registration used it", n);
    }
}

/// Whether registrations are traced: a hook that sees them is attached, or a libibverbs row
/// waits for the library follower (it hooks each copy a process maps). Without either they are
/// "not traced", never "none seen".
pub fn rdma_traced(hooks: &[HookStatus]) -> bool {
    let rdma = |h: &&HookStatus| {
        crate::hooks::HOOKS.iter().any(|d| d.function == h.hook && d.path == crate::hooks::Path::Rdma)
    };
    hooks.iter().filter(rdma).any(|h| {
        h.attached.is_some()
            || (h.side == "user"
                && !h.left_out()
                && h.reasons.first().is_none_or(|r| r != crate::facts::UPROBES_DISABLED))
    })
}

/// The hook series: each hook (attached or not), each fact (told or not), each family.
pub(super) fn register_hooks(
    reg: &mut Registry,
    hooks: &[HookStatus],
    told: &[(&'static str, &'static str, i64)],
) {
    let attached = Family::<Labels, Gauge>::default();
    for h in hooks {
        let how = h.attached.clone().unwrap_or_else(|| "none".into());
        let l = vec![("hook".into(), h.hook.into()), ("side".into(), h.side.into()), ("attach".into(), how)];
        attached.get_or_create(&l).set(i64::from(h.attached.is_some()));
    }
    reg.register("hook_attached", "1 when the hook is attached (attach: how), 0 when not", attached);
    let families = Family::<Labels, Gauge>::default();
    for (family, on) in hook_families(hooks) {
        families.get_or_create(&vec![("family".into(), family.into())]).set(i64::from(on));
    }
    let facts = Family::<Labels, Gauge>::default();
    for (family, fact, on) in told {
        facts
            .get_or_create(&vec![("family".into(), (*family).into()), ("fact".into(), (*fact).into())])
            .set(*on);
    }
    reg.register(
        "fact_told",
        "1 when a fact the verdicts need can be told on this host, 0 when no hook that gives it attached \
         (/healthz and the hooks record say why); facts with nothing to watch here have no series",
        facts,
    );
    reg.register(
        "hook_family_enabled",
        "1 when a hook family (rdma, gpu, p2p, storage) traces (a hook of it attached), 0 when not: \
         its series are then absent, never 0",
        families,
    );
}

/// `lost_events` (every reason `Lost` has, by its serialized name: one list for JSON,
/// recordings and here; a family's own only while it traces) and `lost_events_by_tenant`.
pub fn register_lost(reg: &mut Registry, hooks: &[HookStatus], lost: &crate::sink::Lost) {
    let by_reason = Family::<Labels, Counter>::default();
    for (reason, n) in lost.by_reason().into_iter().filter(|(r, _)| lost_traced(hooks, r)) {
        by_reason.get_or_create(&vec![("reason".into(), reason)]).inc_by(n);
    }
    reg.register("lost_events", "Records that never reached userspace, by reason", by_reason);
    let by_tenant = Family::<Labels, Counter>::default();
    for (key, n) in lost.by_tenant.iter().filter(|(_, n)| *n > 0) {
        by_tenant.get_or_create(&vec![("tenant".into(), crate::sink::tenant_label(*key))]).inc_by(*n);
    }
    reg.register(
        "lost_events_by_tenant",
        "Records lost to a full ring buffer, a tenant's budget or its share of the user-call stash, \
         by the tenant (uid, or a root process's cgroup) whose they were; the most affected tenants",
        by_tenant,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached(hook: &'static str, yes: bool) -> HookStatus {
        HookStatus { hook, side: "", location: None, attached: yes.then(|| "uprobe".into()), reasons: vec![] }
    }

    /// A blind host where only libibverbs is hooked: `ibv_reg_dmabuf_mr` is on the GPU path but
    /// says nothing of the GPU, so the gpu family is not traced; a GPU pin hook makes it so.
    #[test]
    fn a_libibverbs_uprobe_alone_does_not_make_the_gpu_family_traced() {
        let blind = [
            attached("ibv_reg_mr", true),
            attached("ibv_reg_dmabuf_mr", true),
            attached("ib_umem_get", false),
        ];
        let f = hook_families(&blind);
        assert!(f.contains(&("rdma", true)) && f.contains(&("gpu", false)), "{f:?}");
        let seeing = [attached("ibv_reg_dmabuf_mr", true), attached("nvidia_p2p_get_pages", true)];
        assert!(hook_families(&seeing).contains(&("gpu", true)));
    }
}
