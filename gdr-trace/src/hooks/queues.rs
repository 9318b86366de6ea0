//! The queue family's rows: the verbs and driver functions inside which the kernel pins user
//! memory, so a pin says what it is for. `ib_umem_get` is not only memory registration: mlx5,
//! bnxt_re, irdma, hns, erdma, mana and mlx4 pin each CQ, QP, SRQ and WQ ring, each doorbell
//! record's page and each DEVX UMEM through it (torvalds/linux drivers/infiniband/hw/*, v6.1 and
//! v6.12; MLNX_OFED's mlx5 through `ib_umem_get_peer`). These rows keep, per thread, the verb it
//! is in (`PIN_VERB`); every pin record carries it (`purpose`), and a pin made in no
//! registration verb is never reported as a registration.
//!
//! Handlers (torvalds/linux drivers/infiniband/core, v6.1, v6.12): the write commands of
//! uverbs_cmd.c's method table (`ib_uverbs_reg_mr`, ...: address taken, so never inlined away)
//! and the ioctl methods' handlers, `UVERBS_HANDLER(UVERBS_METHOD_*)` =
//! `ib_uverbs_handler_UVERBS_METHOD_*` (global). A row attaches at every one of its symbols the
//! kernel has; `probes` lists which.

use gdr_trace_common::HookId;

use super::{row, Hook, Path, Programs, Role};

const fn verb(symbols: &'static [&'static str], kprobe: &'static str, kretprobe: &'static str) -> Programs {
    Programs::KernelSymbols { symbols, kprobe, kretprobe }
}

pub const QUEUES: &[Hook] = &[
    row(
        HookId::VerbRegister,
        Role::PinVerb,
        Path::Rdma,
        "uverbs reg_mr",
        "ib_uverbs",
        verb(
            &[
                "ib_uverbs_reg_mr",
                "ib_uverbs_rereg_mr",
                "ib_uverbs_handler_UVERBS_METHOD_REG_DMABUF_MR",
                "ib_uverbs_handler_UVERBS_METHOD_REG_MR",
            ],
            "queue_kprobe_verb_register",
            "queue_kretprobe_verb_register",
        ),
        "purpose of pins: a registration (reg_mr, rereg_mr, reg_dmabuf_mr)",
    ),
    row(
        HookId::VerbCq,
        Role::PinVerb,
        Path::Rdma,
        "uverbs create_cq",
        "ib_uverbs",
        verb(
            &[
                "ib_uverbs_create_cq",
                "ib_uverbs_ex_create_cq",
                "ib_uverbs_resize_cq",
                "ib_uverbs_handler_UVERBS_METHOD_CQ_CREATE",
            ],
            "queue_kprobe_verb_cq",
            "queue_kretprobe_verb_cq",
        ),
        "queue_pin: a CQ's ring (create_cq, resize_cq) and its doorbell record",
    ),
    row(
        HookId::VerbQp,
        Role::PinVerb,
        Path::Rdma,
        "uverbs create_qp",
        "ib_uverbs",
        verb(
            &["ib_uverbs_create_qp", "ib_uverbs_ex_create_qp", "ib_uverbs_handler_UVERBS_METHOD_QP_CREATE"],
            "queue_kprobe_verb_qp",
            "queue_kretprobe_verb_qp",
        ),
        "queue_pin: a QP's send/receive rings and its doorbell record",
    ),
    row(
        HookId::VerbSrq,
        Role::PinVerb,
        Path::Rdma,
        "uverbs create_srq",
        "ib_uverbs",
        verb(
            &["ib_uverbs_create_srq", "ib_uverbs_create_xsrq", "ib_uverbs_handler_UVERBS_METHOD_SRQ_CREATE"],
            "queue_kprobe_verb_srq",
            "queue_kretprobe_verb_srq",
        ),
        "queue_pin: an SRQ's ring and its doorbell record",
    ),
    row(
        HookId::VerbWq,
        Role::PinVerb,
        Path::Rdma,
        "uverbs create_wq",
        "ib_uverbs",
        verb(
            &["ib_uverbs_ex_create_wq", "ib_uverbs_handler_UVERBS_METHOD_WQ_CREATE"],
            "queue_kprobe_verb_wq",
            "queue_kretprobe_verb_wq",
        ),
        "queue_pin: a WQ's ring and its doorbell record",
    ),
    // torvalds/linux drivers/infiniband/hw/mlx5/devx.c: UVERBS_HANDLER(MLX5_IB_METHOD_DEVX_UMEM_REG)
    // with UVERBS_MODULE_NAME mlx5_ib (v6.1, v6.12); MLNX_OFED's mlx5_ib the same.
    row(
        HookId::VerbDevxUmem,
        Role::PinVerb,
        Path::Rdma,
        "mlx5 devx_umem_reg",
        "mlx5_ib",
        verb(
            &["mlx5_ib_handler_MLX5_IB_METHOD_DEVX_UMEM_REG"],
            "queue_kprobe_verb_devx_umem",
            "queue_kretprobe_verb_devx_umem",
        ),
        "queue_pin: a DEVX UMEM (UCX, NVSHMEM IBGDA and DOCA GPUNetIO rings, doorbells, keys)",
    ),
    // The doorbell record's page, pinned once per page and user context: mlx5 doorbell.c,
    // mlx4 doorbell.c, hns hns_roce_db.c, erdma erdma_verbs.c (static: may be inlined; then its
    // pins are its queue's) (torvalds/linux v6.1, v6.12).
    row(
        HookId::DoorbellMap,
        Role::PinVerb,
        Path::Rdma,
        "doorbell record mapping",
        "mlx5_ib, mlx4_ib, hns_roce_hw_v2, erdma",
        verb(
            &[
                "mlx5_ib_db_map_user",
                "mlx4_ib_db_map_user",
                "hns_roce_db_map_user",
                "erdma_map_user_dbrecords",
            ],
            "queue_kprobe_doorbell",
            "queue_kretprobe_doorbell",
        ),
        "queue_pin kind doorbell: the page of a queue's doorbell record",
    ),
];
