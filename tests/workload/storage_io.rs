//! What the workloads share: failing with a message, JSON lines of what was done, page-aligned
//! buffers, opening files (also through openat2), the page cache, mapping a file executable.
#![allow(dead_code)]

use std::{
    ffi::{c_int, c_void, CString},
    os::fd::AsRawFd,
};

/// Prints `<program>: msg` and exits 2 (a workload's "I could not do what I was asked").
pub fn fail(msg: &str) -> ! {
    let prog = std::env::args().next().unwrap_or_default();
    let name = prog.rsplit('/').next().unwrap_or("workload");
    eprintln!("{name}: {msg}");
    std::process::exit(2)
}

pub fn emit(v: serde_json::Value) {
    let mut v = v;
    v["pid"] = std::process::id().into();
    // SAFETY: gettid has no preconditions.
    v["tid"] = unsafe { libc::gettid() }.into();
    println!("{v}");
}

pub fn check(r: libc::ssize_t, what: &str) -> usize {
    if r < 0 {
        fail(&format!("{what}: {}", std::io::Error::last_os_error()));
    }
    r as usize
}

/// Page-aligned memory (O_DIRECT needs it).
pub struct Aligned {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Self {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign with a valid out-pointer, power-of-two alignment.
        if unsafe { libc::posix_memalign(&mut p, 4096, len.max(4096)) } != 0 {
            fail("posix_memalign");
        }
        // SAFETY: freshly allocated, len bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x5a, len) };
        Self { ptr: p as *mut u8, len }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated by posix_memalign.
        unsafe { libc::free(self.ptr as *mut c_void) };
    }
}

pub fn open(path: &str, flags: c_int) -> std::fs::File {
    let c = CString::new(path).unwrap();
    // SAFETY: NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        fail(&format!("open {path}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor we own.
    unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }
}

/// `open` through openat2(2) (as some runtimes open files), `struct open_how` by hand.
pub fn open2(path: &str, flags: c_int) -> std::fs::File {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let c = CString::new(path).unwrap();
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: 0, resolve: 0 };
    // SAFETY: NUL-terminated path, a valid open_how and its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        fail(&format!("openat2 {path}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor we own.
    unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as c_int) }
}

/// Pages of `path` in the page cache now (mincore).
pub fn cached_pages(path: &str) -> u64 {
    let f = open(path, libc::O_RDONLY);
    let len = f.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    if len == 0 {
        return 0;
    }
    // SAFETY: a read-only shared mapping of an open file, unmapped below.
    let p =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return 0;
    }
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: vec has one byte per page of the mapping.
    let r = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, len) };
    if r != 0 {
        return 0;
    }
    vec.iter().filter(|&&b| b & 1 != 0).count() as u64
}

pub fn drop_cache(path: &str) {
    let f = open(path, libc::O_RDONLY);
    // SAFETY: plain syscalls on an open descriptor.
    unsafe {
        libc::fsync(f.as_raw_fd());
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

/// Maps the first page of `path` executable, as the dynamic loader maps a library's code; the
/// mapping (and the file) stay until the process exits.
pub fn map_exec_page(path: &str) {
    let f = open(path, libc::O_RDONLY);
    // SAFETY: a fresh private mapping of an open file; kept until exit.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        fail(&format!("mmap {path}: {}", std::io::Error::last_os_error()));
    }
}
