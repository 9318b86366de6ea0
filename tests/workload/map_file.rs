//! gdr-map-file: maps the first page of PATH executable (as the dynamic loader maps a library's
//! code), prints `mapped`, and holds it until a line arrives on stdin.
//!
//! Usage: gdr-map-file PATH

use std::{io::BufRead, os::fd::AsRawFd};

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gdr-map-file PATH");
        std::process::exit(2)
    };
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        eprintln!("gdr-map-file: {path}: {e}");
        std::process::exit(2)
    });
    // SAFETY: a fresh private read+exec mapping of one page of a file we hold open.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        eprintln!("gdr-map-file: mmap: {}", std::io::Error::last_os_error());
        std::process::exit(2)
    }
    println!("mapped");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}
