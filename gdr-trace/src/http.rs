//! The HTTP/1.1 server behind `serve`'s /metrics and /healthz, written for a port that every
//! pod on the node may reach: each connection has a header-read timeout and an overall
//! deadline, the request buffer is small, connections over the cap are closed at once, and a
//! failing accept (out of descriptors) backs off instead of spinning. One peer (address) holds
//! at most `max_per_peer` connections, so one client cannot take them all; and a few slots past
//! the cap are kept for `/healthz`, so a liveness probe is answered even then.
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
            max_buf: 16 * 1024,
            accept_backoff: Duration::from_millis(50),
        }
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
    let peers: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let mut backoff = limits.accept_backoff;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return Ok(()),
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => {
                backoff = limits.accept_backoff;
                (stream, peer.ip())
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
        let Some(peer) = PeerSlot::take(&peers, peer, limits.max_per_peer) else { continue };
        let (slot, health_only) = match slots.clone().try_acquire_owned() {
            Ok(s) => (s, false),
            Err(_) => match health.clone().try_acquire_owned() {
                Ok(s) => (s, true),
                Err(_) => continue,
            },
        };
        let (handler, tls, auth) = (handler.clone(), tls.clone(), auth.clone());
        tokio::spawn(async move {
            let (_slot, _peer) = (slot, peer);
            let svc = service_fn(move |req: Request<Incoming>| {
                let health = req.uri().path() == "/healthz";
                let r = if health_only && !health {
                    busy()
                } else if !health && auth.as_ref().is_some_and(|a| !a.allows(authorization(&req))) {
                    unauthorized()
                } else {
                    handler(&req)
                };
                async move { Ok::<_, Infallible>(r) }
            });
            match tls {
                None => connection(stream, svc, limits).await,
                Some(tls) => match tokio::time::timeout(limits.header_read, tls.accept(stream)).await {
                    Ok(Ok(stream)) => connection(stream, svc, limits).await,
                    Ok(Err(e)) => tracing::debug!("TLS handshake with {}: {e}", _peer.ip),
                    Err(_) => tracing::debug!("TLS handshake with {}: timed out", _peer.ip),
                },
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

/// A connection of a peer, counted while it lives.
struct PeerSlot {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PeerSlot {
    fn take(peers: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut m = peers.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Self { peers: peers.clone(), ip })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut m = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A request other than `/healthz` on a connection of the health slots.
fn busy() -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(b"busy: only /healthz now\n")));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
}
