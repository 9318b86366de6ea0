//! The system's RDMA providers' post/poll functions, learned at start: a child process of
//! gdr-trace (`gdr-trace provider-ops`, hidden; no capabilities) loads libibverbs, opens each
//! RDMA device, reads its context's ops table (the same public ABI the kernel side reads) and
//! says where each function is (file, device, inode, offset). The loader hooks those before any
//! process is traced, so a process's first work requests are counted even when it posts right
//! after opening its device, and a process attached to after its registrations is covered.
//! A process using another copy of a provider (a container's) is still found at its
//! `ibv_open_device` / `ibv_reg_mr*` (`loader::provider`).

use std::{ffi::c_void, io::Write, process::Command, time::Duration};

use gdr_trace_common::bytes::{
    IBV_CONTEXT_OPS_OFF, OPS_POLL_CQ, OPS_POST_RECV, OPS_POST_SEND, OPS_POST_SRQ_RECV,
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
            for slot in [OPS_POLL_CQ, OPS_POST_SRQ_RECV, OPS_POST_SEND, OPS_POST_RECV] {
                let addr = *((ctx as *const u8).add((IBV_CONTEXT_OPS_OFF + 8 * slot) as usize) as *const u64);
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
