//! Who a record or a table entry is charged to, tracing the whole node: the tenant (a uid, or
//! for root a cgroup, since containers commonly all run as root), and whether tenants are held
//! to budgets at all (`attach` holds its process tree to none).

use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_get_current_uid_gid};

/// Records a second per uid (0: no budget), patched by the loader.
#[unsafe(no_mangle)]
pub static EVENTS_PER_UID_S: u64 = 0;

/// The tenant a record is charged to: the uid, or for root `ROOT_CGROUP | cgroup id`.
#[inline(always)]
pub fn tenant() -> u64 {
    let uid = bpf_get_current_uid_gid() as u32;
    if uid != 0 {
        return u64::from(uid);
    }
    // SAFETY: a plain helper.
    gdr_trace_common::ROOT_CGROUP | unsafe { bpf_get_current_cgroup_id() }
}

/// Whether tenants are held to budgets (tracing the whole node; `attach` holds its tree to none).
#[inline(always)]
pub fn on() -> bool {
    // SAFETY: a read-only global patched by the loader.
    unsafe { core::ptr::read_volatile(&EVENTS_PER_UID_S) != 0 }
}
