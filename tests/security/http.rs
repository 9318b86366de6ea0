//! Finding 2: clients of the metrics port cannot hold it (slow headers, idle connections, huge
//! headers, many connections); and `serve` stopped by SIGTERM while still loading ends cleanly.

use std::{
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use gdr_trace_tests::{
    gdr_trace,
    prom::{free_port, http_get},
    Lines, Tracer,
};

/// The connection cap `serve` promises (crate::http::Limits), plus its own other sockets.
const MAX_SOCKETS: usize = 32 + 8;

fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")))
        .count()
}

/// Waits until the server closes `s` (EOF or reset); false if it is still open at `until`.
fn closed_by_server(s: &mut TcpStream, until: Instant) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a 408 or the like before the close
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return false,
            Err(_) => return true, // reset
        }
    }
}

#[test]
fn slow_idle_and_oversized_clients_cannot_hold_the_metrics_port() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let t = Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from));
    let pid = t.child.id();
    assert_eq!(http_get(&addr, "/healthz").unwrap().0, 200);

    // 100 clients that never finish their headers, and one that sends nothing at all.
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    slow.push(TcpStream::connect(&addr).unwrap());
    std::thread::sleep(Duration::from_secs(1));
    let held = sockets_of(pid);
    assert!(held <= MAX_SOCKETS, "serve holds {held} sockets for 101 slow clients (cap {MAX_SOCKETS})");

    // Every one of them is closed by the server within the header timeout (5 s) and slack.
    let until = Instant::now() + Duration::from_secs(20);
    let open = slow.iter_mut().map(|s| closed_by_server(s, until)).filter(|c| !c).count();
    assert_eq!(open, 0, "{open} slow or idle connections still open after 20 s");

    // A header bigger than the request buffer is refused, not buffered.
    let mut big = TcpStream::connect(&addr).unwrap();
    let mut req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 256 * 1024));
    req.extend(b"\r\n\r\n");
    let _ = big.write_all(&req); // the server may close while we write
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = Vec::new();
    let _ = big.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(!reply.starts_with("HTTP/1.1 200"), "a 256 KiB header was accepted: {reply:.80}");

    // And the port still answers.
    let (status, _, body) = http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200, "{body}");
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let mut t = t;
    t.finish();
}

#[test]
fn serve_stopped_by_sigterm_while_loading_ends_cleanly() {
    let port = free_port();
    let mut child = Command::new(gdr_trace())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = Lines::new_stderr(child.stderr.take().unwrap());
    // "listening" comes before the programs load (seconds): stop it right then.
    let first = err.next(Duration::from_secs(30), "serve's listening line").unwrap_or_default();
    assert!(first.contains("listening on"), "{first}");
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let rest = err.rest(Duration::from_secs(60), "serve to end");
    let status = child.wait().unwrap();
    assert!(status.success(), "serve ended by {status} (stderr after listening: {rest:?})");
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}
