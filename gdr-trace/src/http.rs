//! The HTTP/1.1 server behind `serve`'s /metrics and /healthz, written for a port that every
//! pod on the node may reach: each connection has a header-read timeout and an overall
//! deadline, the request buffer is small, connections over the cap are closed at once, and a
//! failing accept (out of descriptors) backs off instead of spinning. One peer holds at most
//! `max_per_peer` connections, so one client cannot take them all; a peer is an address, but
//! the whole loopback range (127/8, ::1) is one peer, and so is an IPv6 /64 (one host has as
//! many of those addresses as it likes). Connections that have not sent a request's headers yet
//! hold one of `max_pending` slots, at most `max_pending_per_peer` of them a peer's (its oldest
//! silent one closed for a newer one), so slow or silent clients cannot take the port; and a few
//! slots past the cap are kept for `/healthz`, so a liveness probe is answered even then.
//! With a web configuration (`crate::webconfig`) connections are TLS (the handshake within the
//! header-read timeout) and every path but `/healthz` asks for basic-auth credentials.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::Semaphore,
};

use crate::webconfig::WebConfig;

/// What one client may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's headers must be in within this.
    pub header_read: Duration,
    /// A connection is closed after this, whatever it is doing (a scraper reconnects).
    pub connection: Duration,
    /// Connections served at once; more are closed on accept (but see `health_slots`).
    pub max_connections: usize,
    /// Connections one peer address may hold at once; more are closed on accept.
    pub max_per_peer: usize,
    /// Connections past `max_connections` that may only ask for `/healthz`.
    pub health_slots: usize,
    /// Connections (of all peers) that have not sent a request's headers yet; more are closed
    /// on accept.
    pub max_pending: usize,
    /// ... of one peer; past it, the peer's oldest silent connection is closed for the new one.
    pub max_pending_per_peer: usize,
    /// Bytes buffered per connection (hyper's minimum is 8 KiB).
    pub max_buf: usize,
    /// First pause after a failed accept, doubled up to 1 s while accepts keep failing.
    pub accept_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(5),
            connection: Duration::from_secs(30),
            max_connections: 32,
            max_per_peer: 8,
            health_slots: 4,
            max_pending: 16,
            max_pending_per_peer: 2,
            max_buf: 16 * 1024,
            accept_backoff: Duration::from_millis(50),
        }
    }
}

/// Whose share a connection from `ip` takes: the loopback range is one peer, an IPv6 address
/// its /64, an IPv4-mapped IPv6 address its IPv4 one.
pub fn peer_key(ip: IpAddr) -> IpAddr {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        _ if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// Serves `handler` on `listener` until `stop` changes.
pub async fn serve<F>(
    listener: TcpListener,
    limits: Limits,
    web: Option<WebConfig>,
    handler: F,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()>
where
    F: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let tls = web.as_ref().and_then(|w| w.tls.clone()).map(tokio_rustls::TlsAcceptor::from);
    let auth = web.and_then(|w| w.auth);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let health = Arc::new(Semaphore::new(limits.health_slots));
    let peers: Peers = Arc::default();
    let pending = Arc::new(Semaphore::new(limits.max_pending));
    let checks = Checks::default();
    let mut backoff = limits.accept_backoff;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return Ok(()),
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => {
                backoff = limits.accept_backoff;
                (stream, peer_key(peer.ip()))
            }
            Err(e) => {
                tracing::debug!("accept: {e}; retrying in {backoff:?}");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // Over a cap: closed now (dropped), costing nothing more.
        let Some(peer) = PeerSlot::take(&peers, peer, &limits) else { continue };
        let Ok(waiting) = pending.clone().try_acquire_owned() else { continue };
        // Both given back with the first request's headers (or when the connection ends).
        let peer = Arc::new(peer);
        let waiting = Arc::new(Mutex::new(Some(waiting)));
        let (slot, health_only) = match slots.clone().try_acquire_owned() {
            Ok(s) => (s, false),
            Err(_) => match health.clone().try_acquire_owned() {
                Ok(s) => (s, true),
                Err(_) => continue,
            },
        };
        let (handler, tls, auth, checks) = (handler.clone(), tls.clone(), auth.clone(), checks.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let (_peer, ip, evicted) = (peer.clone(), peer.ip, peer.evicted.clone());
            let svc = service_fn(move |req: Request<Incoming>| {
                drop(waiting.lock().unwrap_or_else(|e| e.into_inner()).take());
                peer.headers_in();
                let health = req.uri().path() == "/healthz";
                // Credentials not seen before cost a bcrypt check: this peer's next turn.
                let checked = !health && !health_only;
                let wait = match &auth {
                    Some(a)
                        if checked && authorization(&req).is_some() && !a.remembered(authorization(&req)) =>
                    {
                        checks.turn(ip)
                    }
                    _ => Duration::ZERO,
                };
                let (handler, auth) = (handler.clone(), auth.clone());
                async move {
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    let r = if health_only && !health {
                        busy()
                    } else if !health && auth.as_ref().is_some_and(|a| !a.allows(authorization(&req))) {
                        unauthorized()
                    } else {
                        handler(&req)
                    };
                    Ok::<_, Infallible>(r)
                }
            });
            let served = async move {
                match tls {
                    None => connection(stream, svc, limits).await,
                    Some(tls) => match tokio::time::timeout(limits.header_read, tls.accept(stream)).await {
                        Ok(Ok(stream)) => connection(stream, svc, limits).await,
                        Ok(Err(e)) => tracing::debug!("TLS handshake with {ip}: {e}"),
                        Err(_) => tracing::debug!("TLS handshake with {ip}: timed out"),
                    },
                }
            };
            // A newer connection of its peer took its place while it was still silent.
            tokio::select! {
                _ = served => {}
                _ = evicted.notified() => tracing::debug!("{ip}: a silent connection closed for a newer one"),
            }
        });
    }
}

/// One HTTP/1.1 connection within the limits, over TCP or TLS.
async fn connection<IO, S>(io: IO, svc: S, limits: Limits)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
{
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read).max_buf_size(limits.max_buf);
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    if tokio::time::timeout(limits.connection, conn.as_mut()).await.is_err() {
        // Past its deadline: finish a response in flight (briefly), then close.
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
    }
}

fn authorization(req: &Request<Incoming>) -> Option<&[u8]> {
    req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes())
}

/// When each peer may cause its next bcrypt check: one a second, so new (wrong) passwords cost
/// a peer at most one check's time (tens of ms) per second however many it sends; the others
/// wait their turn (a right one too: it is answered, a little later).
#[derive(Clone, Default)]
struct Checks(Arc<Mutex<HashMap<IpAddr, std::time::Instant>>>);

/// Bcrypt checks one peer may cause: one per this long.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Checks {
    /// How long `ip`'s next check waits for its turn (and takes the turn).
    fn turn(&self, ip: IpAddr) -> Duration {
        let now = std::time::Instant::now();
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, next| *next > now);
        let at = m.get(&ip).copied().unwrap_or(now);
        m.insert(ip, at + CHECK_EVERY);
        at - now
    }
}

/// A request without valid credentials where basic auth is on.
fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"unauthorized\n")));
    *r.status_mut() = StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Basic realm=\"gdr-trace\""),
    );
    r
}

/// Each peer's connections, and of them those without a request yet (oldest first).
type Peers = Arc<Mutex<HashMap<IpAddr, PeerState>>>;

#[derive(Default)]
struct PeerState {
    conns: usize,
    waiting: std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>,
    next: u64,
}

/// A connection of a peer, counted while it lives (and as waiting until its first request).
struct PeerSlot {
    peers: Peers,
    ip: IpAddr,
    id: u64,
    /// Told when a newer connection of the peer takes its place while it is still silent.
    evicted: Arc<tokio::sync::Notify>,
    waiting: std::sync::atomic::AtomicBool,
}

impl PeerSlot {
    /// A slot of `ip`'s, unless it holds its share of connections. Past its share of silent
    /// ones, its oldest silent one is closed for this one: a client that sends its request at
    /// once (a scraper, a probe) is served beside any number of slow ones of the same peer.
    fn take(peers: &Peers, ip: IpAddr, limits: &Limits) -> Option<Self> {
        let mut m = peers.lock().unwrap_or_else(|e| e.into_inner());
        let p = m.entry(ip).or_default();
        if p.conns >= limits.max_per_peer {
            return None;
        }
        while p.waiting.len() >= limits.max_pending_per_peer.max(1) {
            if let Some((_, older)) = p.waiting.pop_front() {
                older.notify_one();
            }
        }
        let evicted = Arc::new(tokio::sync::Notify::new());
        (p.next, p.conns) = (p.next + 1, p.conns + 1);
        p.waiting.push_back((p.next, evicted.clone()));
        Some(Self { peers: peers.clone(), ip, id: p.next, evicted, waiting: true.into() })
    }

    /// Its first request's headers are in: no longer waiting.
    fn headers_in(&self) {
        if self.waiting.swap(false, std::sync::atomic::Ordering::Relaxed) {
            let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = m.get_mut(&self.ip) {
                p.waiting.retain(|(id, _)| *id != self.id);
            }
        }
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        self.headers_in();
        let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = m.get_mut(&self.ip) {
            p.conns -= 1;
            if p.conns == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A request other than `/healthz` on a connection of the health slots.
fn busy() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"busy: only /healthz now\n")));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    // The slot is the probes': not kept for this client's next request.
    r.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests;
