//! Work requests: the provider library's post and poll functions, which `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv` and `ibv_poll_cq` (inline in verbs.h) call through
//! `qp->context->ops`. Not exported: each process's own ops table says where they are (read at
//! its first registration), and the library follower hooks them at that file and offset.
//! The extended WR API (`ibv_wr_*`, perftest's default where the provider has it) jumps
//! through the QP's `ibv_qp_ex` instead: its SGE setters are found at `ibv_qp_to_qp_ex` and
//! hooked the same way. Not seen: work requests a library writes to the NIC itself (UCX's
//! rc_mlx5/dc_mlx5 write WQEs directly), and QPs made extended before the trace started when
//! no process makes one after it (the functions are learned from that call).

use gdr_trace_common::{mr::bytes, HookId};

use super::{row, Hook, Path, Programs, Role};

pub const BYTES: &[Hook] = &[
    // linux-rdma/rdma-core libibverbs/device.c (libibverbs.so.1, IBVERBS_1.1).
    row(
        HookId::IbvOpenDevice,
        Role::ProviderContext,
        Path::Rdma,
        "ibv_open_device",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: super::Library::Ibverbs,
            uprobe: "bytes_uprobe_ibv_open_device",
            uretprobe: "bytes_uretprobe_ibv_open_device",
        },
        "the provider's post/poll functions from the new context's ops table (also read at each ibv_reg_mr*)",
    ),
    // linux-rdma/rdma-core libibverbs/verbs.c (libibverbs.so.1, IBVERBS_1.6).
    row(
        HookId::IbvQpToQpEx,
        Role::ProviderContext,
        Path::Rdma,
        "ibv_qp_to_qp_ex",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: super::Library::Ibverbs,
            uprobe: "bytes_uprobe_ibv_qp_to_qp_ex",
            uretprobe: "bytes_uretprobe_ibv_qp_to_qp_ex",
        },
        "the provider's ibv_wr_* SGE setters from the returned ibv_qp_ex",
    ),
    row(
        HookId::ProviderPostSend,
        Role::WorkRequest,
        Path::Rdma,
        "post_send",
        "the RDMA provider (ibv_context.ops.post_send)",
        Programs::Provider { slot: bytes::OPS_POST_SEND, uprobe: "bytes_uprobe_post_send", uretprobe: None },
        "bytes_out (sends, RDMA-write sources) and bytes_in (RDMA-read destinations) per MR",
    ),
    row(
        HookId::ProviderPostRecv,
        Role::WorkRequest,
        Path::Rdma,
        "post_recv",
        "the RDMA provider (ibv_context.ops.post_recv)",
        Programs::Provider { slot: bytes::OPS_POST_RECV, uprobe: "bytes_uprobe_post_recv", uretprobe: None },
        "receive buffers by wr_id, joined to their completions (poll_cq)",
    ),
    row(
        HookId::ProviderPostSrqRecv,
        Role::WorkRequest,
        Path::Rdma,
        "post_srq_recv",
        "the RDMA provider (ibv_context.ops.post_srq_recv)",
        Programs::Provider {
            slot: bytes::OPS_POST_SRQ_RECV,
            uprobe: "bytes_uprobe_post_srq_recv",
            uretprobe: None,
        },
        "shared receive queue buffers by wr_id, joined to their completions (poll_cq)",
    ),
    row(
        HookId::ProviderPollCq,
        Role::WorkRequest,
        Path::Rdma,
        "poll_cq",
        "the RDMA provider (ibv_context.ops.poll_cq)",
        Programs::Provider {
            slot: bytes::OPS_POLL_CQ,
            uprobe: "bytes_uprobe_poll_cq",
            uretprobe: Some("bytes_uretprobe_poll_cq"),
        },
        "bytes_in of receives: each IBV_WC_RECV completion's byte_len, to its posted buffer's MR",
    ),
    row(
        HookId::QpxRdmaRead,
        Role::WorkRequest,
        Path::Rdma,
        "wr_rdma_read",
        "the RDMA provider (ibv_qp_ex.wr_rdma_read)",
        Programs::Provider {
            slot: bytes::QPX_RDMA_READ,
            uprobe: "bytes_uprobe_wr_rdma_read",
            uretprobe: None,
        },
        "marks the work request being built as an RDMA read: its SGE's bytes are bytes_in",
    ),
    row(
        HookId::QpxSetSge,
        Role::WorkRequest,
        Path::Rdma,
        "wr_set_sge",
        "the RDMA provider (ibv_qp_ex.wr_set_sge)",
        Programs::Provider { slot: bytes::QPX_SET_SGE, uprobe: "bytes_uprobe_wr_set_sge", uretprobe: None },
        "bytes_out (ibv_wr_send, ibv_wr_rdma_write sources) and bytes_in (ibv_wr_rdma_read) per MR",
    ),
    row(
        HookId::QpxSetSgeList,
        Role::WorkRequest,
        Path::Rdma,
        "wr_set_sge_list",
        "the RDMA provider (ibv_qp_ex.wr_set_sge_list)",
        Programs::Provider {
            slot: bytes::QPX_SET_SGE_LIST,
            uprobe: "bytes_uprobe_wr_set_sge_list",
            uretprobe: None,
        },
        "as wr_set_sge, for each SGE of the list",
    ),
    row(
        HookId::QpxSetInlineData,
        Role::WorkRequest,
        Path::Rdma,
        "wr_set_inline_data",
        "the RDMA provider (ibv_qp_ex.wr_set_inline_data)",
        Programs::Provider {
            slot: bytes::QPX_SET_INLINE_DATA,
            uprobe: "bytes_uprobe_wr_set_inline_data",
            uretprobe: None,
        },
        "bytes_out of inline sends (copied by the CPU, no MR read)",
    ),
];
