//! Clients of the metrics port cannot hold it (slow headers, idle connections, huge
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

/// The TCP sockets `pid` holds (its listener and connections; not the Unix socket to its
/// library follower, made while the follower's programs load).
fn sockets_of(pid: u32) -> usize {
    let mut tcp = std::collections::HashSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        tcp.extend(
            text.lines().skip(1).filter_map(|l| l.split_whitespace().nth(9).map(|i| format!("socket:[{i}]"))),
        );
    }
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| tcp.contains(&*t.to_string_lossy())))
        .count()
}

/// Connections waiting in the accept queue of the IPv4 listener on `port` (the rx_queue column
/// of a LISTEN row in /proc/net/tcp is the accept backlog).
fn accept_queue(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let row = table.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|f| {
        f[3] == "0A" && f[1].rsplit_once(':').is_some_and(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
    });
    let row = row.unwrap_or_else(|| panic!("no listener on port {port} in /proc/net/tcp"));
    let (_, rx) = row[4].split_once(':').unwrap();
    u64::from_str_radix(rx, 16).unwrap()
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
    // Every connect above is complete, so each of the 101 is in the listener's accept queue or
    // taken by serve: once the queue is empty serve has seen them all, and must hold no more
    // than its cap (a deadline guards against a hang; a server that keeps them never gets there).
    let until = Instant::now() + Duration::from_secs(60);
    let (mut queued, mut held) = (accept_queue(port), sockets_of(pid));
    while queued != 0 || held > MAX_SOCKETS {
        assert!(
            Instant::now() < until,
            "serve holds {held} sockets for 101 slow clients (cap {MAX_SOCKETS}), {queued} not accepted"
        );
        std::thread::yield_now();
        (queued, held) = (accept_queue(port), sockets_of(pid));
    }

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

/// A connection to 127.0.0.1:`port` from the local address 127.0.0.`last` (all of 127/8 is this
/// host, and one peer to the server).
fn connect_from(last: u8, port: u16) -> TcpStream {
    use std::os::fd::FromRawFd;
    let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip) },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, plain sockaddr_in values that outlive the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let s = TcpStream::from_raw_fd(fd);
        let from = addr([127, 0, 0, last], 0);
        assert_eq!(libc::bind(fd, (&raw const from).cast(), len), 0, "{}", std::io::Error::last_os_error());
        let to = addr([127, 0, 0, 1], port);
        assert_eq!(libc::connect(fd, (&raw const to).cast(), len), 0, "{}", std::io::Error::last_os_error());
        s
    }
}

/// `n` connections from 127.0.0.`last` that send half a request and wait.
fn hog(last: u8, port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = connect_from(last, port);
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
            s
        })
        .collect()
}

/// Waits (a minute at most) until `pid` holds a number of sockets `ok` accepts; that number.
fn until_sockets(pid: u32, ok: impl Fn(usize) -> bool) -> usize {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let held = sockets_of(pid);
        if ok(held) || Instant::now() > until {
            return held;
        }
        std::thread::yield_now();
    }
}

/// One client's connections cannot starve the port: of 32 header-less connections from one
/// address, those past its share of waiting ones (2) are closed at once; and the whole loopback
/// range is one client: 8 local addresses x 8 slow connections (partial headers) held the port
/// when each address was a peer of its own (/metrics answered 3 of 20 scrapes, /healthz 5).
/// A port full of scrapers still answering /healthz: crate::http's unit tests.
#[test]
fn one_client_cannot_starve_metrics_nor_can_many_local_addresses() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let t = Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from));
    let pid = t.child.id();
    let base = sockets_of(pid);
    assert_eq!(http_get(&addr, "/healthz").unwrap().0, 200);

    let mut held = hog(2, port, 32);
    let mut closed = vec![false; held.len()];
    let until = Instant::now() + Duration::from_secs(30);
    while closed.iter().filter(|c| **c).count() < 30 && Instant::now() < until {
        for (s, c) in held.iter_mut().zip(closed.iter_mut()).filter(|(_, c)| !**c) {
            *c = closed_by_server(s, Instant::now() + Duration::from_millis(10));
        }
    }
    assert_eq!(closed.iter().filter(|c| **c).count(), 30, "the connections past the peer's waiting share");
    assert_eq!(http_get(&addr, "/metrics").unwrap().0, 200, "a scrape beside a connection hog");
    drop(held);
    assert!(until_sockets(pid, |n| n <= base) <= base);

    // Eight local addresses, eight slow connections each: one peer, two of them held.
    let held: Vec<TcpStream> = (2..=9).flat_map(|last| hog(last, port, 8)).collect();
    assert!(until_sockets(pid, |n| n <= base + 2) <= base + 2, "one peer's two waiting connections");
    for _ in 0..20 {
        assert_eq!(http_get(&addr, "/metrics").unwrap().0, 200);
        assert_eq!(http_get(&addr, "/healthz").unwrap().0, 200);
    }
    drop(held);
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let mut t = t;
    t.finish();
}
