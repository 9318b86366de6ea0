//! gdr-stash-flood: the stash flood, as an unprivileged tenant would run it. THREADS
//! threads each enter the real libibverbs' `ibv_reg_mr` with a bogus protection domain; the
//! library's first read through it faults, and the thread never returns from the call:
//!   park  the SIGSEGV handler blocks for good (the thread stays inside the call until the
//!         process exits);
//!   exit  the handler ends the thread (a thread exit in the middle of the call).
//! Given a libcufile, the threads enter its `cuFileRead` instead, each on a stack whose page
//! below is unmapped: the uprobe at the first instruction fires, the function's prologue then
//! faults (on an alternate signal stack), and the thread is inside the call as above — any
//! hooked function can be held this way, whatever its arguments.
//! Waits for a line on stdin first (lets a tracer attach), prints `flooded N` once every thread
//! is inside the call (park) or gone (exit) and `tids T,T,...` (the threads' ids), then waits
//! for another line and exits.
//!
//! Usage: gdr-stash-flood THREADS park|exit [LIBCUFILE]

use std::{
    ffi::{c_int, c_void, CString},
    io::BufRead,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void;

/// Threads whose call faulted (they are inside `ibv_reg_mr` for good).
static ENTERED: AtomicUsize = AtomicUsize::new(0);
static EXIT_THREAD: AtomicUsize = AtomicUsize::new(0);
/// The flooding threads' ids.
static TIDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

extern "C" fn on_fault(_sig: c_int, _info: *mut libc::siginfo_t, _uc: *mut c_void) {
    ENTERED.fetch_add(1, Ordering::SeqCst);
    if EXIT_THREAD.load(Ordering::SeqCst) != 0 {
        // SAFETY: exit(2) of this thread only (not exit_group): async-signal-safe.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
    loop {
        // SAFETY: pause(2) is async-signal-safe; the thread stays in the call.
        unsafe { libc::pause() };
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("gdr-stash-flood: {msg}");
    std::process::exit(2)
}

fn live_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(n), Some(mode)) = (args.first().and_then(|a| a.parse::<usize>().ok()), args.get(1)) else {
        fail("usage: gdr-stash-flood THREADS park|exit")
    };
    let exit = match mode.as_str() {
        "park" => false,
        "exit" => true,
        _ => fail("mode is park or exit"),
    };
    EXIT_THREAD.store(exit as usize, Ordering::SeqCst);
    let cufile = args.get(2).map(|lib| symbol(lib, "cuFileRead"));
    let soname = CString::new("libibverbs.so.1").unwrap();
    // SAFETY: plain dlopen/dlsym; the symbol has ibv_reg_mr's type.
    let reg_mr: RegMr = unsafe {
        let lib = libc::dlopen(soname.as_ptr(), libc::RTLD_NOW);
        if lib.is_null() {
            fail("cannot dlopen libibverbs.so.1");
        }
        let name = CString::new("ibv_reg_mr").unwrap();
        let p = libc::dlsym(lib, name.as_ptr());
        if p.is_null() {
            fail("libibverbs has no ibv_reg_mr");
        }
        std::mem::transmute::<*mut c_void, RegMr>(p)
    };
    // SAFETY: a SIGSEGV handler for the whole process, installed before any thread starts.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_fault as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) != 0 {
            fail("sigaction");
        }
    }
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let reg = reg_mr as usize;
    for i in 0..n {
        let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            // SAFETY: gettid has no preconditions.
            TIDS.lock().unwrap().push(unsafe { libc::gettid() });
            if let Some(f) = cufile {
                call_on_guarded_stack(f);
            }
            // SAFETY: ibv_reg_mr's own type; deliberately a bogus pd (in unmapped page 0), so
            // the call faults inside libibverbs.
            unsafe {
                let f: RegMr = std::mem::transmute::<usize, RegMr>(reg);
                f(8 as *mut c_void, std::ptr::null_mut(), 4096, 1);
            }
        });
        if let Err(e) = spawned {
            fail(&format!("thread {i} of {n}: {e}"));
        }
        // Keep the number of threads alive at once small in exit mode (a few at a time).
        while exit && i + 1 - ENTERED.load(Ordering::SeqCst) > 64 {
            std::thread::yield_now();
        }
    }
    while ENTERED.load(Ordering::SeqCst) < n {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    while exit && live_threads() > 1 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    println!("flooded {n}");
    let tids: Vec<String> = TIDS.lock().unwrap().iter().map(i32::to_string).collect();
    println!("tids {}", tids.join(","));
    let _ = std::io::stdin().lock().read_line(&mut line);
    // SAFETY: exit_group: every parked thread goes with the process.
    unsafe { libc::_exit(0) };
}

/// `name` in the library at `path` (dlopen'ed as frameworks do).
fn symbol(path: &str, name: &str) -> usize {
    let (path, name) = (CString::new(path).unwrap(), CString::new(name).unwrap());
    // SAFETY: plain dlopen/dlsym.
    let p = unsafe {
        let lib = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        if lib.is_null() {
            fail("cannot dlopen the libcufile given");
        }
        libc::dlsym(lib, name.as_ptr())
    };
    if p.is_null() {
        fail("no such function in the library");
    }
    p as usize
}

/// Calls `f` with 64 bytes of stack above an unmapped page: it faults as soon as its prologue
/// goes below them; the fault is handled on this thread's alternate stack and never returns.
#[cfg(target_arch = "x86_64")]
fn call_on_guarded_stack(f: usize) -> ! {
    const PAGE: usize = 4096;
    const ALT: usize = 64 * 1024;
    let anon = |len| {
        // SAFETY: a fresh private anonymous mapping.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            fail("mmap");
        }
        m.cast::<u8>()
    };
    let alt = libc::stack_t { ss_sp: anon(ALT).cast(), ss_flags: 0, ss_size: ALT };
    let stack = anon(2 * PAGE);
    // SAFETY: this thread's alternate signal stack, and the lower page of our own mapping.
    unsafe {
        if libc::sigaltstack(&alt, std::ptr::null_mut()) != 0
            || libc::mprotect(stack.cast(), PAGE, libc::PROT_NONE) != 0
        {
            fail("sigaltstack/mprotect");
        }
        let top = stack.add(PAGE + 64);
        // The call pushes its return address inside the 64 bytes; the callee's stack use
        // beyond them faults.
        std::arch::asm!("mov rsp, {top}", "call {f}", "ud2", top = in(reg) top, f = in(reg) f, options(noreturn));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn call_on_guarded_stack(_f: usize) -> ! {
    fail("the guarded-stack call is written for x86_64")
}
