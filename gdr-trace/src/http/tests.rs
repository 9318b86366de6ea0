use std::{
    io::{Read, Write},
    net::{Ipv4Addr, Ipv6Addr, TcpStream},
};

use super::*;

#[test]
fn loopback_is_one_peer_and_ipv6_counts_by_its_64() {
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    // Eight local addresses held 64 slow connections between them (8 each).
    assert_eq!(peer_key(v4(127, 0, 0, 2)), peer_key(v4(127, 9, 9, 9)));
    assert_eq!(peer_key(IpAddr::V6(Ipv6Addr::LOCALHOST)), peer_key(v4(127, 0, 0, 1)));
    let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 5).to_ipv6_mapped());
    assert_eq!(peer_key(mapped), peer_key(v4(127, 0, 0, 1)));
    assert_eq!(peer_key(IpAddr::V6(Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped())), v4(10, 1, 2, 3));
    assert_ne!(peer_key(v4(10, 0, 0, 1)), peer_key(v4(10, 0, 0, 2)), "other hosts stay apart");
    let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(peer_key(a), peer_key(b), "one /64, one peer");
    assert_ne!(peer_key(a), peer_key(c));
}

#[test]
fn new_passwords_cost_a_peer_one_bcrypt_check_a_second() {
    let checks = Checks::default();
    let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    assert_eq!(checks.turn(a), Duration::ZERO, "the first check at once");
    // The next ones of the same peer wait their turn, a second apart; another peer does not.
    let second = checks.turn(a);
    let third = checks.turn(a);
    assert!(second > Duration::from_millis(900) && second <= CHECK_EVERY, "{second:?}");
    assert!(third > Duration::from_millis(1900) && third <= CHECK_EVERY * 2, "{third:?}");
    assert_eq!(checks.turn(b), Duration::ZERO);
}

async fn server(limits: Limits) -> (std::net::SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let ok = |_: &Request<Incoming>| Response::new(Full::new(Bytes::from_static(b"ok\n")));
    tokio::spawn(serve(listener, limits, None, ok, rx));
    (addr, tx)
}

/// Sends `req` on a new connection and reads the status line (None: closed without one).
/// Blocking: the tests run on a runtime with a worker for the server.
fn status_of(addr: std::net::SocketAddr, req: &[u8]) -> (TcpStream, Option<String>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(req);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    (s, text.lines().next().map(String::from))
}

const METRICS: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_port_answers_healthz_and_one_peers_silent_connections_are_bounded() {
    let limits = Limits { max_connections: 1, health_slots: 1, max_pending_per_peer: 1, ..Limits::default() };
    let (addr, _stop) = server(limits).await;
    // A scraper keeping its connection takes the one general slot.
    let (_kept, first) = status_of(addr, METRICS);
    assert_eq!(first.as_deref(), Some("HTTP/1.1 200 OK"));
    let (_, busy) = status_of(addr, METRICS);
    assert_eq!(busy.as_deref(), Some("HTTP/1.1 503 Service Unavailable"), "only /healthz past the cap");
    // That connection is closed by the server (Connection: close): the slot is free again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, health) = status_of(addr, HEALTHZ);
    assert_eq!(health.as_deref(), Some("HTTP/1.1 200 OK"), "a liveness probe on a full port");

    // Silent connections of one peer: past its share the oldest is closed for the newer one,
    // so the peer's own scrapes are served beside any number of slow connections.
    let (addr, _stop) = server(Limits { max_pending_per_peer: 2, ..Limits::default() }).await;
    let mut silent: Vec<TcpStream> = (0..6).map(|_| TcpStream::connect(addr).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, ok) = status_of(addr, METRICS);
    assert_eq!(ok.as_deref(), Some("HTTP/1.1 200 OK"), "a scrape beside six silent connections");
    // The first five were closed (four by the next silent ones, one by the scrape).
    let open: Vec<bool> = silent
        .iter_mut()
        .map(|s| {
            s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            matches!(s.read(&mut [0u8; 16]), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
        })
        .collect();
    assert_eq!(open, [false, false, false, false, false, true], "which silent connections are still open");
}
