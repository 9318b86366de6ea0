//! The MR family on the wire: registrations and releases from the kernel and from libibverbs,
//! GPU evidence (`MrEvent`), what a return probe needs of its entry (`MrArgs`), what the kernel
//! keeps of a live umem (`LiveUmem`), and the bytes work requests move (`bytes`).

pub mod bytes;

use crate::wire::{EventHeader, DEVICE_NAME_LEN, LABEL_LEN};

/// A memory registration or release, from the kernel or from libibverbs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrEvent {
    pub hdr: EventHeader,
    /// User virtual address registered (for dma-buf umems: the offset in the buffer).
    pub addr: u64,
    pub length: u64,
    /// IOVA the MR is addressed by (`ibv_reg_mr_iova2`); equal to `addr` otherwise.
    pub iova: u64,
    /// Kernel: `struct ib_umem *`. Userspace: `struct ibv_mr *`. Joins a release to its
    /// registration.
    pub handle: u64,
    /// 0 on success, a negative errno on failure (-1 where userspace gives no errno).
    pub ret: i64,
    /// Per kind: the dma-buf fd of a dma-buf registration, peer-memory flags, the
    /// in-registration flag of GPU evidence.
    pub aux: u64,
    /// `enum ib_access_flags` / `enum ibv_access_flags` bits.
    pub access: u32,
    /// `ibv_mr.lkey` of a userspace registration (0 elsewhere): joins work requests' bytes.
    pub lkey: u32,
    /// The MR's device context (`bytes::dev_tag` of `ibv_mr.context`; 0 elsewhere): an lkey
    /// is unique per device only.
    pub dev: u32,
    /// Kernel pins and their releases: the verb the thread was in and the doorbell flag
    /// ([`crate::queues`]); 0 elsewhere.
    pub purpose: u32,
    /// Kernel pins: the device number (`MKDEV`) of the uverbs file the verb came through,
    /// which names the RDMA device by sysfs where no BTF describes `struct ib_device`; 0 unknown.
    pub uverbs_dev: u32,
    pub _pad1: u32,
    /// RDMA device name, NUL-padded; empty when it could not be read.
    pub device: [u8; DEVICE_NAME_LEN],
    /// dma-buf exporter name (`dma_buf.exp_name`), NUL-padded; empty when unknown.
    pub label: [u8; LABEL_LEN],
    /// `ibv_dereg_mr`: the work requests' bytes counted against this MR's lkey (`BYTES`,
    /// taken out of the map as the MR goes); `ops` is 0 and the rest 0 elsewhere. `wr_seen`
    /// is 1 when the map held an entry for it.
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub ops: u64,
    pub wr_seen: u64,
}

impl MrEvent {
    pub const fn zeroed() -> Self {
        Self {
            hdr: EventHeader::zeroed(),
            addr: 0,
            length: 0,
            iova: 0,
            handle: 0,
            ret: 0,
            aux: 0,
            access: 0,
            lkey: 0,
            dev: 0,
            purpose: 0,
            uverbs_dev: 0,
            _pad1: 0,
            device: [0; DEVICE_NAME_LEN],
            label: [0; LABEL_LEN],
            bytes_out: 0,
            bytes_in: 0,
            ops: 0,
            wr_seen: 0,
        }
    }
}

/// Arguments stashed at a kprobe/uprobe entry for the matching return probe.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrArgs {
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    /// `struct ib_device *` (kernel) or `struct ibv_pd *` (userspace).
    pub dev_or_pd: u64,
    /// Per hook: the dma-buf fd, the 7th argument, the out-pointer of an export.
    pub aux: u64,
    pub access: u32,
    pub _pad0: u32,
}

/// What `ibv_dereg_mr`'s entry keeps for its return: the MR as it was (read before the
/// provider frees it). Stashed as an [`MrArgs`] (one stash map for every user call), through
/// [`MrArgs::dereg`] and [`MrArgs::as_dereg`] only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeregArgs {
    /// `ibv_mr.pd`, `.addr`, `.length`.
    pub pd: u64,
    pub addr: u64,
    pub length: u64,
    /// The `struct ibv_mr *` released: joins the release to its registration.
    pub mr: u64,
    /// `ibv_mr.lkey`: the key its work requests' bytes were counted under.
    pub lkey: u32,
    /// Its device tag (`bytes::dev_tag` of `ibv_mr.context`).
    pub dev: u32,
}

impl MrArgs {
    pub const fn dereg(d: DeregArgs) -> Self {
        Self {
            dev_or_pd: d.pd,
            addr: d.addr,
            length: d.length,
            iova: d.mr,
            aux: d.dev as u64,
            access: d.lkey,
            _pad0: 0,
        }
    }
    pub const fn as_dereg(&self) -> DeregArgs {
        DeregArgs {
            pd: self.dev_or_pd,
            addr: self.addr,
            length: self.length,
            mr: self.iova,
            lkey: self.access,
            dev: self.aux as u32,
        }
    }
}

/// What the kernel remembers of a live umem, so a release can be attributed and sized.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveUmem {
    pub pid: u32,
    /// The pin's `purpose` word ([`crate::queues`]), carried to its release.
    pub purpose: u32,
    pub length: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dereg_stash_gives_back_each_field_by_its_name() {
        let d = DeregArgs { pd: 1, addr: 2, length: 3, mr: 4, lkey: 5, dev: 6 };
        assert_eq!(MrArgs::dereg(d).as_dereg(), d);
    }
}
