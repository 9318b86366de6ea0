//! Hook families (rdma, gpu, p2p, storage): which are traced, and which hooks decide verdicts.

use crate::facts::HookStatus;

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
    [("rdma", Path::Rdma), ("gpu", Path::Gpu), ("p2p", Path::P2p), ("storage", Path::Storage)]
        .into_iter()
        .map(|(name, path)| {
            let of =
                |h: &&HookStatus| crate::hooks::HOOKS.iter().any(|d| d.function == h.hook && d.path == path);
            (name, hooks.iter().filter(of).any(|h| h.attached.is_some()))
        })
        .collect()
}
