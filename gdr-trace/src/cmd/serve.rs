//! `gdr-trace serve`: traces the whole node until SIGTERM/Ctrl-C and serves Prometheus metrics
//! (`/metrics`, from `sink::metrics`) and `/healthz` over HTTP/1.1 (hyper, on its own thread).
//! On SIGTERM the trace ends like any other (links dropped with the tracer), then the server.

use std::{
    net::{SocketAddr, TcpListener},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, header, Method, Request, Response, StatusCode};

use crate::{
    exit::{self, Fatal},
    options::{HostArgs, TraceArgs},
    sink::{
        json::JsonSink,
        metrics::{Format, Health, MetricsSink, Shared},
        FanOut,
    },
    webconfig::WebConfig,
};

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to serve /metrics and /healthz on (port 0: any free port, printed on stderr).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9477")]
    pub listen: SocketAddr,
    /// Per-process series for this many processes (by registered bytes, ranked within each
    /// uid first); the rest are summed under comm="other".
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = crate::options::at_least_one)]
    pub top: usize,
    /// Export the storage path (bytes by verdict: gds-nvfs, gds-compat, page-cache, direct;
    /// cuFile calls in compatibility mode; page-cache hit ratio) also where the kernel refuses
    /// fentry. The storage hooks are on by default where their system call hooks can be fentry
    /// (cheap); where only the system call tracepoints exist they would slow every system call
    /// of every process on the node a little, so they wait for this flag (`--no-storage`: never,
    /// even with this flag).
    #[arg(long)]
    pub storage: bool,
    /// TLS and basic auth from a web configuration file, the YAML Prometheus exporters read
    /// (`tls_server_config`: cert_file, key_file, min_version; `basic_auth_users`: user: bcrypt
    /// hash). /healthz answers without credentials, so a kubelet probe needs none.
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<std::path::PathBuf>,
    /// Trace options; `--interval` is how often metrics are refreshed, `--json` also streams
    /// the events as NDJSON on stdout.
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub host: HostArgs,
}

impl ServeArgs {
    /// The trace loop's options: the whole node; the storage hooks where fentry makes them cheap,
    /// everywhere with `--storage`, never with `--no-storage`.
    pub fn storage_options(&self) -> crate::trace::TraceOptions {
        let mut o = self.trace.trace_options(None);
        o.load.storage_if_fentry = !self.storage;
        o
    }
}

/// Whether the exporter is healthy: tracing with at least one hook, metrics fresh.
pub fn healthy(h: &Health, stale_after: Duration) -> Result<String, String> {
    if h.stopped {
        return Err("tracing stopped".into());
    }
    let Some(t) = h.last_update else { return Err("starting: hooks not attached yet".into()) };
    if h.attached == 0 {
        return Err(format!("no hook attached (0/{})", h.hooks));
    }
    let age = t.elapsed();
    if age > stale_after {
        return Err(format!("metrics not refreshed for {:.0} s", age.as_secs_f64()));
    }
    if !h.untold.is_empty() {
        // Serving, but a fact the verdicts need cannot be told here: said on every probe.
        return Ok(format!(
            "warn: {}; see gdr-trace probes. {}/{} hooks attached, metrics {:.1} s old",
            h.untold.join("; "),
            h.attached,
            h.hooks,
            age.as_secs_f64()
        ));
    }
    Ok(format!("ok: {}/{} hooks attached, metrics {:.1} s old", h.attached, h.hooks, age.as_secs_f64()))
}

fn respond(req: &Request<Incoming>, shared: &Shared, stale_after: Duration) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, ctype: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_str(ctype).expect("ascii"));
        r
    };
    let text = "text/plain; charset=utf-8";
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return reply(StatusCode::METHOD_NOT_ALLOWED, text, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            let body = format.body(&shared.body.lock().expect("metrics lock"));
            reply(StatusCode::OK, format.content_type(), body)
        }
        "/healthz" => match healthy(&shared.health.lock().expect("health lock"), stale_after) {
            Ok(s) => reply(StatusCode::OK, text, s + "\n"),
            Err(s) => reply(StatusCode::SERVICE_UNAVAILABLE, text, s + "\n"),
        },
        "/" => reply(StatusCode::OK, text, "gdr-trace: /metrics (Prometheus), /healthz\n".into()),
        _ => reply(StatusCode::NOT_FOUND, text, "not found: try /metrics or /healthz\n".into()),
    }
}

/// Serves until `stop` turns true, within `crate::http`'s limits.
fn http_server(
    listener: TcpListener,
    shared: Arc<Shared>,
    stale_after: Duration,
    web: Option<WebConfig>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    // The thread any pod may talk to holds no capability (it starts before the attach).
    crate::privilege::drop_all_in_this_thread();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let handler = move |req: &Request<Incoming>| respond(req, &shared, stale_after);
        Ok(crate::http::serve(listener, crate::http::Limits::default(), web, handler, stop).await?)
    })
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Nothing is announced that cannot follow: without privilege serve fails before it listens.
    crate::privilege::require_tracing()?;
    // A SIGTERM while the programs load ends serve cleanly: main installed `stop` first.
    let web = match &args.web_config {
        Some(path) => {
            Some(WebConfig::load(path).map_err(|e| Fatal::cannot_run(format!("--web-config {e}")))?)
        }
        None => None,
    };
    let scheme = if web.as_ref().is_some_and(|w| w.tls.is_some()) { "https" } else { "http" };
    let auth = if web.as_ref().is_some_and(|w| w.auth.is_some()) { ", basic auth" } else { "" };
    let listener = TcpListener::bind(args.listen)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| Fatal::cannot_run(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared::default());
    let stale_after = Duration::from_secs_f64(args.trace.interval.max(1.0) * 3.0 + 5.0);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = {
        let shared = shared.clone();
        std::thread::spawn(move || http_server(listener, shared, stale_after, web, stop_rx))
    };
    eprintln!("gdr-trace serve: listening on {scheme}://{addr} (/metrics, /healthz{auth})");
    let mut metrics = MetricsSink::new(
        shared.clone(),
        args.top,
        args.host.posture(),
        args.host.container_host_markers(),
        args.host.resolver(),
    );
    let opts = args.storage_options();
    let traced = if args.trace.json {
        let mut events = JsonSink::new(std::io::stdout());
        crate::trace::run(&opts, &mut FanOut(vec![&mut metrics, &mut events]))
    } else {
        crate::trace::run(&opts, &mut metrics)
    };
    shared.health.lock().expect("health lock").stopped = true;
    let _ = stop_tx.send(true);
    match server.join() {
        Ok(Err(e)) => tracing::warn!("metrics server: {e:#}"),
        Err(_) => tracing::warn!("metrics server thread panicked"),
        Ok(Ok(())) => {}
    }
    traced?;
    eprintln!("gdr-trace serve: stopped, probes detached");
    Ok(ExitCode::from(exit::OK))
}
