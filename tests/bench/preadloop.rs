//! gdr-preadloop: the storage benchmark's workload. Warms FILE into the page cache, prints
//! {"event":"ready"}, then runs one timed loop per stdin line and prints its result:
//!   `4k N`  N preads of 4 KiB at random 4 KiB-aligned offsets
//!   `1m N`  N preads of 1 MiB, sequential, wrapping at the end of the file
//! Each loop is timed by the loop itself (CLOCK_MONOTONIC around it, after a short warm-up),
//! so a tracer's start-up never counts. `cargo xtask bench` drives it.

use std::{
    ffi::c_void,
    io::{BufRead, Write},
    os::fd::AsRawFd,
    time::Instant,
};

fn main() {
    let path = std::env::args().nth(1).expect("usage: gdr-preadloop FILE");
    let file = std::fs::File::open(&path).expect("open FILE");
    let fd = file.as_raw_fd();
    let len = file.metadata().expect("stat").len();
    assert!(len >= 1 << 20, "FILE must hold at least 1 MiB");
    let mut buf = vec![0u8; 1 << 20];
    let pread = |buf: &mut [u8], n: usize, off: u64| {
        // SAFETY: buf holds at least n bytes.
        let r = unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut c_void, n, off as i64) };
        assert_eq!(r, n as isize, "short read");
    };
    // Warm: every page in the cache.
    let mut off = 0;
    while off + (1 << 20) <= len {
        pread(&mut buf, 1 << 20, off);
        off += 1 << 20;
    }
    let pages = len / 4096;
    let chunks = len >> 20;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut run = |case: &str, n: u64| -> f64 {
        let mut one = |i: u64| match case {
            "4k" => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                pread(&mut buf, 4096, (x % pages) * 4096);
            }
            _ => pread(&mut buf, 1 << 20, (i % chunks) << 20),
        };
        for i in 0..(n / 20).max(1) {
            one(i);
        }
        let t = Instant::now();
        for i in 0..n {
            one(i);
        }
        t.elapsed().as_nanos() as f64 / n as f64
    };
    println!("{{\"event\":\"ready\",\"pid\":{}}}", std::process::id());
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let mut it = line.split_whitespace();
        let (Some(case), Some(n)) = (it.next(), it.next().and_then(|n| n.parse::<u64>().ok())) else {
            continue;
        };
        let ns = run(case, n);
        println!("{{\"case\":\"{case}\",\"n\":{n},\"ns_per_op\":{ns:.1}}}");
        let _ = std::io::stdout().flush();
    }
}
