//! gdr-regstorm: the registration storm of `cargo xtask bench --storm-only`. Opens an RDMA
//! device through the real libibverbs (dlopen'ed, as NCCL does), prints {"event":"ready"},
//! then runs one timed loop per stdin line `N`: N times ibv_reg_mr + ibv_dereg_mr of the same
//! 4 KiB page-aligned host buffer, and prints {"n":N,"ns_per_op":...,"failed":F}. Each loop is
//! timed by the loop itself (CLOCK_MONOTONIC around it), so a tracer's start-up never counts.
//!
//! Usage: gdr-regstorm [DEVICE]   (default rxe0)

use std::{
    ffi::{c_char, c_int, c_void, CStr, CString},
    io::{BufRead, Write},
    time::Instant,
};

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;
type DeregMr = unsafe extern "C" fn(*mut c_void) -> c_int;

fn fail(msg: &str) -> ! {
    eprintln!("gdr-regstorm: {msg}");
    std::process::exit(2)
}

fn sym<T>(lib: *mut c_void, name: &str) -> T {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: dlsym on a handle from dlopen; the caller names the right function type.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        fail(&format!("libibverbs has no {name}"));
    }
    // SAFETY: a function pointer of the declared type.
    unsafe { std::mem::transmute_copy(&p) }
}

fn main() {
    let device = std::env::args().nth(1).unwrap_or_else(|| "rxe0".into());
    let soname = CString::new("libibverbs.so.1").expect("no NUL");
    // SAFETY: plain dlopen.
    let lib = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        fail("cannot dlopen libibverbs.so.1");
    }
    let get_list: GetDeviceList = sym(lib, "ibv_get_device_list");
    let get_name: GetDeviceName = sym(lib, "ibv_get_device_name");
    let open: OpenDevice = sym(lib, "ibv_open_device");
    let alloc_pd: AllocPd = sym(lib, "ibv_alloc_pd");
    let reg_mr: RegMr = sym(lib, "ibv_reg_mr");
    let dereg_mr: DeregMr = sym(lib, "ibv_dereg_mr");
    // SAFETY: libibverbs calls with pointers it returned.
    let pd = unsafe {
        let mut n = 0;
        let list = get_list(&mut n);
        if list.is_null() || n == 0 {
            fail("no RDMA devices (is rxe0 configured?)");
        }
        let dev = (0..n as usize)
            .map(|i| *list.add(i))
            .find(|d| CStr::from_ptr(get_name(*d)).to_str() == Ok(device.as_str()))
            .unwrap_or_else(|| fail(&format!("no RDMA device named {device}")));
        let ctx = open(dev);
        if ctx.is_null() {
            fail(&format!("ibv_open_device({device}) failed"));
        }
        let pd = alloc_pd(ctx);
        if pd.is_null() {
            fail("ibv_alloc_pd failed");
        }
        pd
    };
    // SAFETY: an anonymous RW page, touched so it is backed.
    let buf = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            fail("mmap failed");
        }
        std::ptr::write_bytes(p.cast::<u8>(), 1, 4096);
        p
    };
    let one = || -> bool {
        // SAFETY: registering a page this process owns, with a pd of this context; the MR is
        // deregistered at once.
        unsafe {
            let mr = reg_mr(pd, buf, 4096, 1);
            if mr.is_null() {
                return false;
            }
            dereg_mr(mr) == 0
        }
    };
    println!("{{\"event\":\"ready\",\"pid\":{}}}", std::process::id());
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let Ok(n) = line.trim().parse::<u64>() else { continue };
        let t = Instant::now();
        let failed = (0..n).filter(|_| !one()).count();
        let ns = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
        println!("{{\"n\":{n},\"ns_per_op\":{ns:.1},\"failed\":{failed}}}");
        let _ = std::io::stdout().flush();
    }
}
