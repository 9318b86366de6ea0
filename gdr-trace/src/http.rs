//! The HTTP/1.1 server behind `serve`'s /metrics and /healthz, written for a port that every
//! pod on the node may reach: each connection has a header-read timeout and an overall
//! deadline, the request buffer is small, connections over the cap are closed at once, and a
//! failing accept (out of descriptors) backs off instead of spinning.

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};

/// What one client may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's headers must be in within this.
    pub header_read: Duration,
    /// A connection is closed after this, whatever it is doing (a scraper reconnects).
    pub connection: Duration,
    /// Connections served at once; more are closed on accept.
    pub max_connections: usize,
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
            max_buf: 16 * 1024,
            accept_backoff: Duration::from_millis(50),
        }
    }
}

/// Serves `handler` on `listener` until `stop` changes.
pub async fn serve<F>(
    listener: TcpListener,
    limits: Limits,
    handler: F,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()>
where
    F: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = limits.accept_backoff;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return Ok(()),
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = limits.accept_backoff;
                stream
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
        // Over the cap: closed now (dropped), costing nothing more.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let handler = handler.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = service_fn(move |req| {
                let r = handler(&req);
                async move { Ok::<_, Infallible>(r) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .max_buf_size(limits.max_buf);
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            if tokio::time::timeout(limits.connection, conn.as_mut()).await.is_err() {
                // Past its deadline: finish a response in flight (briefly), then close.
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
            }
        });
    }
}
