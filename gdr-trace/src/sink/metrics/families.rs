//! Hook families (rdma, gpu, p2p, storage, bytes): which are traced, and which hooks decide
//! verdicts.

use crate::{facts::HookStatus, loader::provider::DEFERRED};

/// A kernel registration hook: what tells host from GPU memory (the user-space ones only see
/// that a registration happened).
pub(super) fn decides_verdicts(hook: &str) -> bool {
    crate::hooks::HOOKS
        .iter()
        .any(|h| h.function == hook && h.is_kernel() && h.path == crate::hooks::Path::Rdma)
}

/// Each hook family, and whether it traces (a hook of it attached), in a fixed order.
pub fn hook_families(hooks: &[HookStatus]) -> Vec<(&'static str, bool)> {
    use crate::hooks::Path;
    let mut f: Vec<(&'static str, bool)> =
        [("rdma", Path::Rdma), ("gpu", Path::Gpu), ("p2p", Path::P2p), ("storage", Path::Storage)]
            .into_iter()
            .map(|(name, path)| {
                let of = |h: &&HookStatus| {
                    crate::hooks::HOOKS.iter().any(|d| d.function == h.hook && d.path == path)
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
