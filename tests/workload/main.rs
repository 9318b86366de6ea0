//! gdr-workload: registers RDMA memory regions through the real libibverbs (dlopen'ed, as NCCL
//! does) on a real device (rxe0 in the VM), and prints what it did as JSON lines, so tests can
//! compare gdr-trace's output with the truth.
//!
//! Usage: gdr-workload [--device NAME] [--wait-stdin] [--iova2] [--keep] [--hold-ms N] SPEC...
//!   SPEC = SIZE[:ACCESS]   register a fresh page-aligned host buffer of SIZE bytes
//!        | bad:SIZE        register an unmapped address (the kernel fails it: EFAULT)
//!   --wait-stdin  read one line from stdin before registering (lets a tracer attach first)
//!   --keep        don't deregister; --hold-ms N: sleep N ms before deregistering/exiting

use std::{
    ffi::{c_char, c_int, c_uint, c_void, CStr, CString},
    io::BufRead,
};

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut IbvMr;
type RegMrIova2 = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u64, c_uint) -> *mut IbvMr;
type DeregMr = unsafe extern "C" fn(*mut IbvMr) -> c_int;

/// `struct ibv_mr` (libibverbs ABI).
#[repr(C)]
struct IbvMr {
    context: *mut c_void,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

struct Verbs {
    reg_mr: RegMr,
    reg_mr_iova2: RegMrIova2,
    dereg_mr: DeregMr,
}

fn sym<T>(lib: *mut c_void, name: &str) -> T {
    let c = CString::new(name).unwrap();
    // SAFETY: dlsym on a handle from dlopen; the caller names the right function type.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    assert!(!p.is_null(), "libibverbs has no {name}");
    // SAFETY: function pointer of the declared type.
    unsafe { std::mem::transmute_copy(&p) }
}

fn fail(msg: String) -> ! {
    eprintln!("gdr-workload: {msg}");
    std::process::exit(2)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flag = |name: &str| {
        let found = args.iter().position(|a| a == name);
        found.map(|i| args.remove(i)).is_some()
    };
    let wait_stdin = flag("--wait-stdin");
    let iova2 = flag("--iova2");
    let keep = flag("--keep");
    let value = |args: &mut Vec<String>, name: &str| {
        let i = args.iter().position(|a| a == name)?;
        args.remove(i);
        (i < args.len()).then(|| args.remove(i))
    };
    let device = value(&mut args, "--device").unwrap_or_else(|| "rxe0".into());
    let hold_ms: u64 = value(&mut args, "--hold-ms").map_or(0, |v| v.parse().expect("--hold-ms N"));
    let specs = args;
    if specs.is_empty() {
        fail("usage: gdr-workload [--device NAME] [--wait-stdin] [--iova2] [--keep] [--hold-ms N] SIZE[:ACCESS]|bad:SIZE ...".into());
    }

    let soname = CString::new("libibverbs.so.1").unwrap();
    // SAFETY: plain dlopen.
    let lib = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        fail("cannot dlopen libibverbs.so.1".into());
    }
    let get_list: GetDeviceList = sym(lib, "ibv_get_device_list");
    let get_name: GetDeviceName = sym(lib, "ibv_get_device_name");
    let open: OpenDevice = sym(lib, "ibv_open_device");
    let alloc_pd: AllocPd = sym(lib, "ibv_alloc_pd");
    let verbs = Verbs {
        reg_mr: sym(lib, "ibv_reg_mr"),
        reg_mr_iova2: sym(lib, "ibv_reg_mr_iova2"),
        dereg_mr: sym(lib, "ibv_dereg_mr"),
    };

    // SAFETY: libibverbs calls with pointers it returned.
    let pd = unsafe {
        let mut n = 0;
        let list = get_list(&mut n);
        if list.is_null() || n == 0 {
            fail("no RDMA devices (is rxe0 configured?)".into());
        }
        let dev = (0..n as usize)
            .map(|i| *list.add(i))
            .find(|d| CStr::from_ptr(get_name(*d)).to_str() == Ok(device.as_str()))
            .unwrap_or_else(|| fail(format!("no RDMA device named {device}")));
        let ctx = open(dev);
        if ctx.is_null() {
            fail(format!("ibv_open_device({device}) failed"));
        }
        let pd = alloc_pd(ctx);
        if pd.is_null() {
            fail("ibv_alloc_pd failed".into());
        }
        pd
    };

    if wait_stdin {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut mrs = Vec::new();
    for spec in &specs {
        let (bad, rest) = match spec.strip_prefix("bad:") {
            Some(r) => (true, r),
            None => (false, spec.as_str()),
        };
        let mut it = rest.split(':');
        let size: usize =
            it.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| fail(format!("bad spec {spec}")));
        let access: c_int = it
            .next()
            .map(|a| {
                i32::from_str_radix(a.trim_start_matches("0x"), 16)
                    .unwrap_or_else(|_| fail(format!("bad access in {spec}")))
            })
            .unwrap_or(1);
        let addr = if bad {
            // A reserved, inaccessible range: pinning it fails in the kernel.
            // SAFETY: anonymous PROT_NONE mapping.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            }
        } else {
            // SAFETY: anonymous RW mapping, touched so it is backed.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                std::ptr::write_bytes(p.cast::<u8>(), 1, size);
                p
            }
        };
        let iova = addr as u64;
        // SAFETY: registering memory this process owns, with a pd from this context.
        let mr = unsafe {
            if iova2 {
                (verbs.reg_mr_iova2)(pd, addr, size, iova, access as c_uint)
            } else {
                (verbs.reg_mr)(pd, addr, size, access)
            }
        };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        println!(
            "{{\"event\":\"{}\",\"pid\":{pid},\"tid\":{tid},\"addr\":{},\"length\":{size},\"access\":{access},\"errno\":{}}}",
            if mr.is_null() { "failed" } else { "registered" },
            addr as u64,
            if mr.is_null() { errno } else { 0 }
        );
        if !mr.is_null() {
            mrs.push((mr, addr as u64, size));
        }
    }
    if hold_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(hold_ms));
    }
    if !keep {
        for (mr, addr, size) in mrs {
            // SAFETY: an MR this process registered.
            let rc = unsafe { (verbs.dereg_mr)(mr) };
            println!(
                "{{\"event\":\"deregistered\",\"pid\":{pid},\"addr\":{addr},\"length\":{size},\"rc\":{rc}}}"
            );
        }
    }
}
