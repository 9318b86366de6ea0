//! A program that does nothing, loaded (never attached) by userspace to learn whether this
//! kernel accepts fentry programs at all, so `probes` can say so even where no hooked symbol
//! exists (`vfs_read` is in every kernel's BTF).

use aya_ebpf::{macros::fentry, programs::FEntryContext};

#[fentry(function = "vfs_read")]
pub fn capability_fentry(_ctx: FEntryContext) -> i32 {
    0
}
