//! The verb a traced thread is in: a kprobe at each verb's handler (one program per verb, at
//! every handler of that verb the kernel has: the write command's and the ioctl method's), a
//! kretprobe at its return, and the same around the drivers' doorbell-record mappings. Cold
//! paths only (one call per queue or registration created): kprobes everywhere.
//!
//! The handlers (torvalds/linux drivers/infiniband/core, v6.1 and v6.12) are ib_uverbs'
//! method-table entries, so their address is taken and they keep a symbol: uverbs_cmd.c's
//! `ib_uverbs_reg_mr`, `ib_uverbs_create_cq`, ... and the ioctl handlers named by
//! `UVERBS_HANDLER(UVERBS_METHOD_*)` (`ib_uverbs_handler_UVERBS_METHOD_CQ_CREATE`, ...);
//! mlx5's DEVX UMEM handler (devx.c, `mlx5_ib_handler_MLX5_IB_METHOD_DEVX_UMEM_REG`).

use aya_ebpf::{
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::queues::PinVerb;

use crate::{filter::current_traced, pin_verb};

#[inline(always)]
fn enter(verb: PinVerb) -> u32 {
    if current_traced().is_some() {
        pin_verb::enter(verb);
    }
    0
}

#[inline(always)]
fn leave() -> u32 {
    if current_traced().is_some() {
        pin_verb::leave();
    }
    0
}

/// Declares each verb's kprobe and kretprobe (one pair a row of the hook table).
macro_rules! verb_programs {
    ($($verb:ident: $entry:ident, $ret:ident;)*) => {$(
        #[kprobe]
        pub fn $entry(_ctx: ProbeContext) -> u32 {
            enter(PinVerb::$verb)
        }

        #[kretprobe]
        pub fn $ret(_ctx: RetProbeContext) -> u32 {
            leave()
        }
    )*};
}

verb_programs! {
    Register: queue_kprobe_verb_register, queue_kretprobe_verb_register;
    Cq: queue_kprobe_verb_cq, queue_kretprobe_verb_cq;
    Qp: queue_kprobe_verb_qp, queue_kretprobe_verb_qp;
    Srq: queue_kprobe_verb_srq, queue_kretprobe_verb_srq;
    Wq: queue_kprobe_verb_wq, queue_kretprobe_verb_wq;
    DevxUmem: queue_kprobe_verb_devx_umem, queue_kretprobe_verb_devx_umem;
}

/// A driver maps a queue's doorbell record (`mlx5_ib_db_map_user` and its kin): its page is
/// pinned inside, once per page and user context.
#[kprobe]
pub fn queue_kprobe_doorbell(_ctx: ProbeContext) -> u32 {
    if current_traced().is_some() {
        pin_verb::doorbell(true);
    }
    0
}

#[kretprobe]
pub fn queue_kretprobe_doorbell(_ctx: RetProbeContext) -> u32 {
    if current_traced().is_some() {
        pin_verb::doorbell(false);
    }
    0
}
