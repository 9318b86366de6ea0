//! gdr-filestorm: the storage storm of `cargo xtask bench --storm-only`.
//!   gdr-filestorm create DIR N     N files of 4 KiB in DIR (1,000 a subdirectory), then drops
//!                                  their pages from the page cache (posix_fadvise DONTNEED),
//!                                  so the reads below fill it again
//!   gdr-filestorm read DIR N       opens each, reads it once (4 KiB), closes it
//!   gdr-filestorm drop DIR N       drops the first N files' pages from the page cache again
//!   gdr-filestorm spawn DIR N      N short processes, one after another: each opens one of
//!                                  the files, reads it once, closes it and exits
//! Prints one JSON line of what it did ({"files":..,"bytes":..,"pids":[..]} for spawn).

use std::{ffi::CString, os::fd::AsRawFd, path::Path, time::Instant};

fn file(dir: &Path, i: u64) -> std::path::PathBuf {
    dir.join(format!("{}", i / 1000)).join(format!("f{i}"))
}

fn read_once(path: &Path) -> u64 {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    let mut buf = [0u8; 4096];
    // SAFETY: open/read/close with a valid path and buffer.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n.max(0) as u64
    }
}

/// Drops the first `n` files' pages from the page cache (clean pages only).
fn drop_pages(dir: &Path, n: u64) {
    for i in 0..n {
        if let Ok(f) = std::fs::File::open(file(dir, i)) {
            // SAFETY: advice on a descriptor we own.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(cmd), Some(dir), Some(n)) =
        (args.first(), args.get(1), args.get(2).and_then(|n| n.parse().ok()))
    else {
        eprintln!("usage: gdr-filestorm create|read|spawn DIR N");
        std::process::exit(2)
    };
    let (dir, n): (&Path, u64) = (Path::new(dir), n);
    let t = Instant::now();
    match cmd.as_str() {
        "create" => {
            let data = [7u8; 4096];
            for i in 0..n {
                let p = file(dir, i);
                if i % 1000 == 0 {
                    std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
                }
                std::fs::write(&p, data).expect("write");
            }
            // Written back once for all, so their pages can be dropped below.
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
            drop_pages(dir, n);
            println!("{{\"created\":{n}}}");
        }
        "read" => {
            let bytes: u64 = (0..n).map(|i| read_once(&file(dir, i))).sum();
            let s = t.elapsed().as_secs_f64();
            println!("{{\"pid\":{},\"files\":{n},\"bytes\":{bytes},\"seconds\":{s:.3}}}", std::process::id());
        }
        "drop" => {
            drop_pages(dir, n);
            println!("{{\"dropped\":{n}}}");
        }
        "spawn" => {
            let mut pids = Vec::with_capacity(n as usize);
            for i in 0..n {
                let p = file(dir, i);
                // SAFETY: the child only reads a file and exits without running Rust's atexit.
                match unsafe { libc::fork() } {
                    0 => {
                        let ok = read_once(&p) == 4096;
                        // SAFETY: ends the child at once.
                        unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                    }
                    -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                    pid => {
                        let mut st = 0;
                        // SAFETY: waits for our own child.
                        unsafe { libc::waitpid(pid, &mut st, 0) };
                        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "child {pid} failed");
                        pids.push(pid);
                    }
                }
            }
            let s = t.elapsed().as_secs_f64();
            println!(
                "{{\"pid\":{},\"processes\":{n},\"seconds\":{s:.3},\"pids\":{pids:?}}}",
                std::process::id()
            );
        }
        _ => {
            eprintln!("gdr-filestorm: unknown command {cmd}");
            std::process::exit(2)
        }
    }
}
