//! The system's RDMA providers' post/poll functions, learned at start: a child process of
//! gdr-trace (`gdr-trace provider-ops`, hidden; no capabilities) loads libibverbs, opens each
//! RDMA device, reads its context's ops table (the same public ABI the kernel side reads) and
//! the extended work-request functions of an RC QP it makes (and destroys) there, and says
//! where each function is (file, device, inode, offset). The loader hooks those before any
//! process is traced, so a process's first work requests are counted even when it posts right
//! after opening its device, and a process attached to after its registrations is covered.
//! A process using another copy of a provider (a container's) is still found at its
//! `ibv_open_device` / `ibv_reg_mr*` (`loader::provider`).

use std::{ffi::c_void, io::Write, process::Command, time::Duration};

use gdr_trace_common::mr::bytes::{
    IBV_CONTEXT_OPS_OFF, OPS_POLL_CQ, OPS_POST_RECV, OPS_POST_SEND, OPS_POST_SRQ_RECV, QPX_RDMA_READ,
    QPX_SET_INLINE_DATA, QPX_SET_SGE, QPX_SET_SGE_LIST,
};

pub use super::provider::Found;

/// The child's work: one JSON line per (device, slot). Returns the process's exit code.
pub fn run_child() -> u8 {
    crate::privilege::drop_all_in_this_thread();
    let mut out = std::io::stdout();
    for f in find() {
        let _ = writeln!(out, "{}", serde_json::to_string(&f).unwrap_or_default());
    }
    0
}

type GetList = unsafe extern "C" fn(*mut i32) -> *mut *mut c_void;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CreateCq = unsafe extern "C" fn(*mut c_void, i32, *mut c_void, *mut c_void, i32) -> *mut c_void;
type CreateQpEx = unsafe extern "C" fn(*mut c_void, *mut QpInitAttrEx) -> *mut c_void;
type ToQpEx = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;

/// `struct ibv_qp_init_attr_ex` (rdma-core libibverbs/verbs.h; x86_64 layout, 136 bytes,
/// checked against the header with offsetof).
#[repr(C)]
#[derive(Default)]
struct QpInitAttrEx {
    qp_context: u64,
    send_cq: u64,
    recv_cq: u64,
    srq: u64,
    /// max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data.
    cap: [u32; 5],
    qp_type: u32,
    sq_sig_all: i32,
    comp_mask: u32,
    pd: u64,
    xrcd: u64,
    create_flags: u32,
    max_tso_header: u16,
    _pad0: u16,
    rwq_ind_tbl: u64,
    /// struct ibv_rx_hash_conf: u8 function, u8 key_len, *key, u64 fields_mask.
    rx_hash_conf: [u64; 3],
    source_qpn: u32,
    _pad1: u32,
    send_ops_flags: u64,
}

const _: () = assert!(std::mem::size_of::<QpInitAttrEx>() == 136);

const IBV_QPT_RC: u32 = 2;
const IBV_QP_INIT_ATTR_PD: u32 = 1;
const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// IBV_QP_EX_WITH_RDMA_WRITE | _RDMA_READ | _SEND.
const SEND_OPS: u64 = 1 | 16 | 4;
/// `struct verbs_context` grows at its front, so from its `context` (last field) back: `sz` 8
/// bytes before it, `create_qp_ex` 56 bytes before it; `context.abi_compat` at 320, extended
/// when all ones. `sz` must cover `create_qp_ex` to the struct's end (56 + 328 bytes).
const VCTX_SZ_BACK: usize = 8;
const VCTX_CREATE_QP_EX_BACK: usize = 56;
const ABI_COMPAT_OFF: usize = 320;
const CREATE_QP_EX_SPAN: u64 = 56 + 328;
type Open = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type Close = unsafe extern "C" fn(*mut c_void) -> i32;
type FreeList = unsafe extern "C" fn(*mut *mut c_void);

fn find() -> Vec<Found> {
    // SAFETY: dlopen/dlsym of libibverbs' public entry points, called with their C signatures
    // (rdma-core libibverbs/verbs.h); the ops table is read at its public ABI offsets.
    unsafe {
        let h = libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return vec![];
        }
        let sym = |name: &std::ffi::CStr| libc::dlsym(h, name.as_ptr());
        let (g, o, c, fr) = (
            sym(c"ibv_get_device_list"),
            sym(c"ibv_open_device"),
            sym(c"ibv_close_device"),
            sym(c"ibv_free_device_list"),
        );
        if [g, o, c, fr].iter().any(|p| p.is_null()) {
            return vec![];
        }
        let get = std::mem::transmute::<*mut c_void, GetList>(g);
        let open = std::mem::transmute::<*mut c_void, Open>(o);
        let close = std::mem::transmute::<*mut c_void, Close>(c);
        let free = std::mem::transmute::<*mut c_void, FreeList>(fr);
        let mut n = 0i32;
        let list = get(&mut n);
        if list.is_null() {
            return vec![];
        }
        let mut found = Vec::new();
        for i in 0..n.max(0) as usize {
            let ctx = open(*list.add(i));
            if ctx.is_null() {
                continue;
            }
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
            let mut addrs: Vec<(u64, u64)> = [OPS_POLL_CQ, OPS_POST_SRQ_RECV, OPS_POST_SEND, OPS_POST_RECV]
                .into_iter()
                .map(|slot| {
                    (slot, *((ctx as *const u8).add((IBV_CONTEXT_OPS_OFF + 8 * slot) as usize) as *const u64))
                })
                .collect();
            addrs.extend(qpx_functions(ctx, &sym));
            for (slot, addr) in addrs {
                if let Some((e, offset)) = super::provider::locate(&maps, addr) {
                    let f =
                        Found { slot, path: e.path, dev: (e.dev_major, e.dev_minor), inode: e.inode, offset };
                    if !found.contains(&f) {
                        found.push(f);
                    }
                }
            }
            close(ctx);
        }
        free(list);
        found
    }
}

/// The provider's extended work-request functions (`ibv_wr_*`) for an RC QP: one made on the
/// device (`ibv_create_qp_ex` is inline in verbs.h: the context's `create_qp_ex`, as it calls
/// it) and destroyed at once. Nothing when the provider has no extended API.
///
/// # Safety
/// `ctx` is an open `struct ibv_context`; `sym` resolves libibverbs' exported functions.
unsafe fn qpx_functions(ctx: *mut c_void, sym: &dyn Fn(&std::ffi::CStr) -> *mut c_void) -> Vec<(u64, u64)> {
    let c = ctx as *const u8;
    if *(c.add(ABI_COMPAT_OFF) as *const u64) != u64::MAX
        || *(c.sub(VCTX_SZ_BACK) as *const u64) < CREATE_QP_EX_SPAN
    {
        return vec![];
    }
    let create = *(c.sub(VCTX_CREATE_QP_EX_BACK) as *const *mut c_void);
    let fns = [
        sym(c"ibv_alloc_pd"),
        sym(c"ibv_create_cq"),
        sym(c"ibv_qp_to_qp_ex"),
        sym(c"ibv_destroy_qp"),
        sym(c"ibv_destroy_cq"),
        sym(c"ibv_dealloc_pd"),
    ];
    if create.is_null() || fns.iter().any(|p| p.is_null()) {
        return vec![];
    }
    let create = std::mem::transmute::<*mut c_void, CreateQpEx>(create);
    let alloc_pd = std::mem::transmute::<*mut c_void, AllocPd>(fns[0]);
    let create_cq = std::mem::transmute::<*mut c_void, CreateCq>(fns[1]);
    let to_qpx = std::mem::transmute::<*mut c_void, ToQpEx>(fns[2]);
    let [destroy_qp, destroy_cq, dealloc_pd] =
        [fns[3], fns[4], fns[5]].map(|f| std::mem::transmute::<*mut c_void, Destroy>(f));
    let mut found = Vec::new();
    let pd = alloc_pd(ctx);
    if pd.is_null() {
        return found;
    }
    let cq = create_cq(ctx, 1, std::ptr::null_mut(), std::ptr::null_mut(), 0);
    if !cq.is_null() {
        let mut attr = QpInitAttrEx {
            send_cq: cq as u64,
            recv_cq: cq as u64,
            cap: [1, 1, 1, 1, 0],
            qp_type: IBV_QPT_RC,
            comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            pd: pd as u64,
            send_ops_flags: SEND_OPS,
            ..Default::default()
        };
        let qp = create(ctx, &mut attr);
        if !qp.is_null() {
            let qpx = to_qpx(qp) as *const u8;
            if !qpx.is_null() {
                for slot in [QPX_RDMA_READ, QPX_SET_SGE, QPX_SET_SGE_LIST, QPX_SET_INLINE_DATA] {
                    found.push((slot, *(qpx.add((slot & 0xffff_ffff) as usize) as *const u64)));
                }
            }
            destroy_qp(qp);
        }
        destroy_cq(cq);
    }
    dealloc_pd(pd);
    found
}

/// Starts the child (this very executable), before any hook is attached: its own file reads
/// are not a workload's (and `SELF_PIDS` names it while it runs, `loader::load`). None when
/// there is no RDMA device.
pub fn spawn() -> Option<std::process::Child> {
    if std::fs::read_dir("/sys/class/infiniband").map_or(true, |mut d| d.next().is_none()) {
        return None;
    }
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    Command::new(exe)
        .arg("provider-ops")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// Reads what the child found; nothing when it found nothing (no libibverbs) or did not
/// answer within a few seconds.
pub fn learn(child: Option<std::process::Child>) -> Vec<Found> {
    let Some(mut child) = child else { return vec![] };
    let start = std::time::Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            return vec![];
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let Ok(out) = child.wait_with_output() else { return vec![] };
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}
