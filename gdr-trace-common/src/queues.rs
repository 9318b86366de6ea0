//! The queue family on the wire: under which uverbs verb the kernel pinned user memory.
//!
//! Hardware NIC drivers (mlx5, bnxt_re, irdma, hns, erdma, mana, mlx4) pin their user queues
//! (CQ, QP, SRQ, WQ rings), doorbell records and DEVX UMEMs through the same `ib_umem_get` a
//! memory registration goes through. What tells them apart is the verb the thread is in: the
//! verb hooks (`queues::verbs` in the eBPF crate) keep it per thread, and every pin record
//! carries it (`MrEvent::purpose`, and `LiveUmem::purpose` for its release).

/// The verb a thread was in when the kernel pinned user memory (the low byte of `purpose`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinVerb {
    /// No verb hook saw the thread enter a verb.
    None = 0,
    /// A memory registration: reg_mr, rereg_mr, reg_dmabuf_mr (write or ioctl).
    Register = 1,
    /// create_cq, ex_create_cq, resize_cq, UVERBS_METHOD_CQ_CREATE.
    Cq = 2,
    /// create_qp, ex_create_qp, UVERBS_METHOD_QP_CREATE.
    Qp = 3,
    /// create_srq, create_xsrq, UVERBS_METHOD_SRQ_CREATE.
    Srq = 4,
    /// ex_create_wq, UVERBS_METHOD_WQ_CREATE.
    Wq = 5,
    /// mlx5 DEVX UMEM registration (MLX5_IB_METHOD_DEVX_UMEM_REG).
    DevxUmem = 6,
}

impl PinVerb {
    pub const fn from_u32(v: u32) -> Self {
        match v & VERB_MASK {
            1 => Self::Register,
            2 => Self::Cq,
            3 => Self::Qp,
            4 => Self::Srq,
            5 => Self::Wq,
            6 => Self::DevxUmem,
            _ => Self::None,
        }
    }
}

/// The verb's bits of `purpose`.
pub const VERB_MASK: u32 = 0xff;
/// Set in `purpose` when the pin was made inside a driver's doorbell-record mapping
/// (`mlx5_ib_db_map_user`, `mlx4_ib_db_map_user`, `hns_roce_db_map_user`, ...).
pub const DOORBELL: u32 = 0x100;

/// Whether a `purpose` word says the pin is a doorbell record's page.
pub const fn is_doorbell(purpose: u32) -> bool {
    purpose & DOORBELL != 0
}
