//! A real Prometheus server for the exporter tests (Debian's `prometheus`, installed by
//! `cargo xtask setup`), on loopback with a scrape config pointing at `gdr-trace serve`, and a
//! minimal HTTP/1.0 client for its API and for the exporter itself.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// A port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind :0").local_addr().unwrap().port()
}

/// GET `path` from `addr` (HTTP/1.0: no chunking, the server closes): status, headers, body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    http_get_accept(addr, path, None)
}

/// [`http_get`] with an Accept header when given.
pub fn http_get_accept(
    addr: &str,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub struct Prometheus {
    child: Child,
    dir: PathBuf,
    pub addr: String,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (host:port) every 2 s, each scrape allowed 2 s: an
    /// emulated CPU under load can take more than a second to answer, and a scrape that times
    /// out marks every series stale (a query between two scrapes then finds nothing).
    pub fn start(target: &str) -> Self {
        Self::start_jobs(&[("gdr-trace", target, "")])
    }

    /// Prometheus scraping each (job name, host:port, extra YAML of the scrape config, each
    /// line indented four spaces: `scheme`, `tls_config`, `basic_auth`...) every 2 s.
    pub fn start_jobs(jobs: &[(&str, &str, &str)]) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("gdr-prom-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut config =
            "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\nscrape_configs:\n".to_string();
        for (job, target, extra) in jobs {
            config += &format!(
                "  - job_name: {job}\n    scrape_interval: 2s\n    scrape_timeout: 2s\n{extra}    \
                 static_configs:\n      - targets: ['{target}']\n"
            );
        }
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (cargo xtask setup installs Debian's prometheus)");
        let p = Self { child, dir, addr };
        let until = Instant::now() + Duration::from_secs(90);
        while http_get(&p.addr, "/-/ready").map(|r| r.0).ok() != Some(200) {
            assert!(Instant::now() < until, "prometheus not ready in 90 s: {}", p.log());
            std::thread::sleep(Duration::from_millis(250));
        }
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query through the HTTP API: `data.result`.
    pub fn query(&self, q: &str) -> Vec<Value> {
        let (status, _, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", encode(q))).unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!((status, &v["status"]), (200, &Value::from("success")), "{q}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Polls `q` until `done` holds for its result (bounded); returns it.
    pub fn wait_for(&self, q: &str, timeout: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let until = Instant::now() + timeout;
        loop {
            let r = self.query(q);
            if done(&r) {
                return r;
            }
            assert!(Instant::now() < until, "{q}: still {r:?} after {timeout:?}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// `promtool check metrics` (Prometheus text format 0.0.4 and its lint) on `text`.
pub fn promtool_check(text: &str) -> Result<(), String> {
    checked(Command::new("promtool").args(["check", "metrics"]), text)
}

/// OpenMetrics 1.0 text through a strict parser: client_python's (Debian's
/// python3-prometheus-client; promtool has none: prometheus/prometheus#8932).
pub fn openmetrics_check(text: &str) -> Result<(), String> {
    let parse =
        "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
                 print(len(list(p(sys.stdin.read()))), 'families')";
    checked(Command::new("/usr/bin/python3").args(["-c", parse]), text)
}

fn checked(cmd: &mut Command, input: &str) -> Result<(), String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} (cargo xtask setup installs it): {e}"));
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {}: {said}", out.status))
    }
}

/// The metric names of the samples in an exposition (text 0.0.4 or OpenMetrics).
pub fn sample_names(exposition: &str) -> std::collections::BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

/// `name{labels} value` samples of one metric in a text exposition (label values unescaped
/// quotes only: what gdr-trace's labels hold).
pub fn samples(text: &str, name: &str) -> Vec<(std::collections::BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once("} ").expect("labels end"),
            None if rest.starts_with(' ') => ("", rest.trim_start()),
            None => continue,
        };
        let mut map = std::collections::BTreeMap::new();
        let mut it = labels;
        while let Some((k, v)) = it.split_once("=\"") {
            let end = v.find('"').expect("label value ends");
            map.insert(k.trim_start_matches(',').to_string(), v[..end].to_string());
            it = &v[end + 1..];
        }
        out.push((map, value.parse().expect("sample value")));
    }
    out
}

/// Every metric name the Grafana dashboard (deploy/grafana) queries: in its panels' `expr`s
/// and its template variables' queries.
pub fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/gdr-trace-dashboard.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let dash: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    fn queries<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "definition" | "query", Value::String(q)) => out.push(q),
                        _ => queries(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
            _ => {}
        }
    }
    let mut qs = Vec::new();
    queries(&dash, &mut qs);
    assert!(qs.len() >= 10, "{path}: its queries: {qs:?}");
    let mut names = std::collections::BTreeSet::new();
    for q in qs {
        let mut rest = q;
        while let Some(at) = rest.find("gdr_trace_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            names.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names
}

/// The value of one instant-vector sample (`["<ts>", "<value>"]`).
pub fn sample_value(s: &Value) -> f64 {
    s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
