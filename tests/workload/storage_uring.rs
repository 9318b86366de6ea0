//! io_uring reads: one request at a time on a real ring (the io-uring crate), on the file's
//! descriptor or, with `fixed`, on a registered file (then the request names no descriptor).

use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

use super::io::{cached_pages, emit, fail, open, Aligned};

pub fn read(path: &str, bs: usize, count: u64, flags: &[String]) {
    let fixed = flags.iter().any(|f| f == "fixed");
    let cached_before = cached_pages(path);
    let f = open(path, libc::O_RDONLY);
    let fd = f.as_raw_fd();
    let mut ring = IoUring::new(8).unwrap_or_else(|e| fail(&format!("io_uring_setup: {e}")));
    if fixed {
        ring.submitter().register_files(&[fd]).unwrap_or_else(|e| fail(&format!("register_files: {e}")));
    }
    let buf = Aligned::new(bs);
    let mut bytes = 0u64;
    for i in 0..count {
        let off = i * bs as u64;
        let sqe = if fixed {
            opcode::Read::new(types::Fixed(0), buf.ptr, bs as u32).offset(off).build()
        } else {
            opcode::Read::new(types::Fd(fd), buf.ptr, bs as u32).offset(off).build()
        };
        // SAFETY: buf outlives the request (we wait for its completion below).
        unsafe { ring.submission().push(&sqe) }.unwrap_or_else(|_| fail("submission queue full"));
        ring.submit_and_wait(1).unwrap_or_else(|e| fail(&format!("io_uring_enter: {e}")));
        let cqe = ring.completion().next().unwrap_or_else(|| fail("no completion"));
        if cqe.result() < 0 {
            fail(&format!("io_uring read: {}", std::io::Error::from_raw_os_error(-cqe.result())));
        }
        bytes += cqe.result() as u64;
    }
    drop(ring);
    drop(f);
    emit(serde_json::json!({
        "step": "uring_read", "path": path, "fd": fd, "bs": bs, "count": count, "bytes": bytes,
        "fixed": fixed, "cached_before": cached_before, "cached_after": cached_pages(path),
    }));
}
