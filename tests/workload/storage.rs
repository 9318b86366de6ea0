//! gdr-storage-workload: file I/O the storage tests trace — POSIX reads and writes (buffered or
//! O_DIRECT, sequential or random), and cuFile calls through the libcufile it dlopens (the test
//! library, or `$GDR_LIBCUFILE`) — printing what it did as JSON lines, the truth the tests
//! compare gdr-trace's output with.
//!
//! Usage: gdr-storage-workload [SETUP-STEP...] [go] STEP...
//!   Steps before `go` run at once; then it prints {"event":"ready"} and waits for a line on
//!   stdin before the rest (so a tracer can attach in between). Steps:
//!   create:PATH:SIZE             write SIZE bytes, fsync, drop them from the page cache
//!   drop:PATH                    fsync and drop PATH's pages from the page cache
//!   read:PATH:BS:COUNT[:FLAGS]   COUNT reads of BS bytes; FLAGS: direct,pread,random,openat2
//!                                (openat2: opened only through openat2(2), no mincore look)
//!   write:PATH:BS:COUNT[:FLAGS]  COUNT writes of BS bytes (creates PATH); FLAGS: direct,pwrite
//!   uring-read:PATH:BS:COUNT[:FLAGS]  COUNT sequential reads of BS bytes through io_uring;
//!                                FLAGS: fixed (a registered file, no descriptor in the request)
//!   cufile-read:PATH:SIZE[:OFFSET[:FLAGS]]   FLAGS: buffered (no O_DIRECT), async, batch,
//!                                hold (after cuFileBufRegister, as the `hold` step)
//!   cufile-write:PATH:SIZE[:OFFSET[:FLAGS]]
//!   cufile-open                  cuFileDriverOpen alone (e.g. NVIDIA's library without a GPU)
//!   cufile-close                 cuFileDriverClose
//!   sleep:MS
//!   hold                         print {"step":"hold"}, then wait for a line on stdin (a test's
//!                                handshake: it lets the workload go once the tracer has shown
//!                                what it must see first)
//!   dlopen[:PATH]                dlopen libcufile now (PATH, else as at start-up); with
//!                                $GDR_CUFILE_LATE set nothing is loaded at start-up
//!   map:PATH                     map PATH executable, as the dynamic loader maps a library
//! SIZE/BS/OFFSET take K and M suffixes. With $GDR_CUFILE_DLOPEN_LATE set, libcufile is dlopened
//! at the first cuFile step instead of at start. GPU memory is a mapping of /dev/nvidia0 when it exists
//! (the simulated driver), else page-aligned host memory.

use std::{ffi::c_void, io::BufRead, os::fd::AsRawFd, path::Path};

#[path = "storage_cufile.rs"]
mod cufile;
#[path = "storage_io.rs"]
mod io;
#[path = "storage_uring.rs"]
mod uring;

use io::{cached_pages, check, drop_cache, emit, fail, map_exec_page, open, open2, Aligned};

fn size(s: &str) -> u64 {
    let (n, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    n.parse::<u64>().unwrap_or_else(|_| fail(&format!("bad size {s:?}"))) * mul
}

fn flags_of(s: Option<&&str>) -> Vec<String> {
    s.map(|s| s.split(',').filter(|f| !f.is_empty()).map(str::to_string).collect()).unwrap_or_default()
}

fn posix(write: bool, args: &[&str]) {
    let path = args[0];
    let (bs, count) = (size(args[1]) as usize, size(args[2]));
    let flags = flags_of(args.get(3));
    let has = |f: &str| flags.iter().any(|x| x == f);
    let direct = if has("direct") { libc::O_DIRECT } else { 0 };
    let mode = if write { libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC } else { libc::O_RDONLY };
    // With openat2 the file is opened through openat2 only (no mincore look, which opens it).
    let look = |path: &str| if has("openat2") { None } else { Some(cached_pages(path)) };
    let cached_before = if write { Some(0) } else { look(path) };
    let f = if has("openat2") { open2(path, mode | direct) } else { open(path, mode | direct) };
    let fd = f.as_raw_fd();
    let buf = Aligned::new(bs);
    let blocks = if write { count } else { (f.metadata().map(|m| m.len()).unwrap_or(0) / bs as u64).max(1) };
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = 0u64;
    for i in 0..count {
        let off = if has("random") {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % blocks) * bs as u64
        } else {
            i * bs as u64
        };
        let positional = has("pread") || has("pwrite") || has("random");
        // SAFETY: buf holds bs bytes.
        let r = unsafe {
            match (write, positional) {
                (false, false) => libc::read(fd, buf.ptr as *mut c_void, bs),
                (false, true) => libc::pread(fd, buf.ptr as *mut c_void, bs, off as i64),
                (true, false) => libc::write(fd, buf.ptr as *const c_void, bs),
                (true, true) => libc::pwrite(fd, buf.ptr as *const c_void, bs, off as i64),
            }
        };
        bytes += check(r, if write { "write" } else { "read" }) as u64;
    }
    if write {
        // SAFETY: fsync on an open descriptor.
        unsafe { libc::fsync(fd) };
    }
    drop(f);
    emit(serde_json::json!({
        "step": if write { "write" } else { "read" },
        "path": path, "fd": fd, "bs": bs, "count": count, "bytes": bytes,
        "o_direct": direct != 0, "flags": flags,
        "cached_before": cached_before,
        "cached_after": look(path),
    }));
}

fn create(path: &str, len: u64) {
    let f = open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
    let buf = Aligned::new(1 << 20);
    let mut left = len as usize;
    while left > 0 {
        let n = left.min(buf.len);
        // SAFETY: buf holds n bytes.
        left -= check(unsafe { libc::write(f.as_raw_fd(), buf.ptr as *const c_void, n) }, "write");
    }
    drop(f);
    drop_cache(path);
    emit(
        serde_json::json!({ "step": "create", "path": path, "size": len, "cached_pages": cached_pages(path) }),
    );
}

fn step(s: &str, cu: &mut Option<cufile::Session>) {
    let parts: Vec<&str> = s.split(':').collect();
    let args = &parts[1..];
    let need = |n: usize| {
        if args.len() < n {
            fail(&format!("step {s:?} needs {n} arguments"));
        }
    };
    match parts[0] {
        "create" => {
            need(2);
            create(args[0], size(args[1]));
        }
        "drop" => {
            need(1);
            drop_cache(args[0]);
            emit(
                serde_json::json!({ "step": "drop", "path": args[0], "cached_pages": cached_pages(args[0]) }),
            );
        }
        "read" | "write" => {
            need(3);
            posix(parts[0] == "write", args);
        }
        "uring-read" => {
            need(3);
            uring::read(args[0], size(args[1]) as usize, size(args[2]), &flags_of(args.get(3)));
        }
        "cufile-read" | "cufile-write" => {
            need(2);
            let offset = args.get(2).map_or(0, |o| size(o));
            let flags = flags_of(args.get(3));
            let session = cu.get_or_insert_with(cufile::Session::open);
            session.io(parts[0] == "cufile-write", args[0], size(args[1]), offset, &flags);
        }
        "cufile-open" => {
            cu.get_or_insert_with(cufile::Session::open);
        }
        "cufile-close" => {
            if let Some(session) = cu.take() {
                session.close();
            }
        }
        "dlopen" => {
            cufile::load(args.first().copied());
            emit(serde_json::json!({ "step": "dlopen", "path": args.first() }));
        }
        "map" => {
            need(1);
            map_exec_page(args[0]);
            emit(serde_json::json!({ "step": "map", "path": args[0] }));
        }
        "hold" => {
            emit(serde_json::json!({ "step": "hold" }));
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
        }
        "sleep" => {
            need(1);
            std::thread::sleep(std::time::Duration::from_millis(size(args[0])));
        }
        other => fail(&format!("unknown step {other:?}")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        fail("usage: gdr-storage-workload [SETUP-STEP...] [go] STEP... (see the source)");
    }
    let mut cu = None;
    // The library is mapped before the tracer attaches (the tracer finds it in /proc/PID/maps),
    // unless $GDR_CUFILE_DLOPEN_LATE asks for it at the first cuFile step (as frameworks do), or
    // $GDR_CUFILE_LATE for a `dlopen` step.
    if std::env::var_os("GDR_CUFILE_DLOPEN_LATE").is_none() && std::env::var_os("GDR_CUFILE_LATE").is_none() {
        cufile::load(None);
    }
    let (setup, run) = match args.iter().position(|a| a == "go") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (&args[..0], &args[..]),
    };
    for s in setup {
        step(s, &mut cu);
    }
    if args.iter().any(|a| a == "go") {
        emit(serde_json::json!({ "event": "ready", "nvidia_fs": Path::new("/dev/nvidia-fs0").exists() }));
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    for s in run {
        step(s, &mut cu);
    }
}
