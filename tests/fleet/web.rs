//! `serve --web-config`: TLS and basic auth as Prometheus exporters do them, scraped by a real
//! Prometheus (https with the server's certificate as CA, right and wrong credentials) and
//! asked by curl; a bad file is a clear error with exit 2.

use std::{path::Path, process::Command, time::Duration};

use gdr_trace_tests::{
    gdr_trace,
    prom::{free_port, http_get, sample_value, Prometheus},
    Tracer,
};

/// A self-signed certificate for 127.0.0.1 and its key (openssl), and a web config naming them
/// by relative path, with one user.
fn web_config(dir: &Path, password: &str) -> std::path::PathBuf {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-keyout", "key.pem", "-out", "cert.pem"])
        .current_dir(dir)
        .output()
        .expect("openssl (cargo xtask setup installs it)");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let hash = bcrypt::hash(password, 6).unwrap();
    let path = dir.join("web.yml");
    std::fs::write(
        &path,
        format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: {hash}\n"
        ),
    )
    .unwrap();
    path
}

/// curl over TLS (the server's certificate as CA): the HTTP status, or 0 when no response came.
fn curl(dir: &Path, url: &str, user: Option<&str>) -> u16 {
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--cacert"])
        .arg(dir.join("cert.pem"));
    if let Some(u) = user {
        c.args(["-u", u]);
    }
    let out = c.arg(url).output().expect("curl (cargo xtask setup installs it)");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

#[test]
fn serve_with_tls_and_basic_auth_is_scraped_only_with_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let config = web_config(dir.path(), "s3cret");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut t = Tracer::spawn(
        &["serve", "--json", "--listen", &addr, "--interval", "1", "--web-config", config.to_str().unwrap()]
            .map(String::from),
    );
    let url = |path: &str| format!("https://{addr}{path}");
    assert_eq!(curl(dir.path(), &url("/healthz"), None), 200, "the kubelet's probe needs no credentials");
    assert_eq!(curl(dir.path(), &url("/metrics"), None), 401);
    assert_eq!(curl(dir.path(), &url("/metrics"), Some("prometheus:wrong")), 401);
    assert_eq!(curl(dir.path(), &url("/metrics"), Some("someone:s3cret")), 401);
    assert_eq!(curl(dir.path(), &url("/metrics"), Some("prometheus:s3cret")), 200);
    let plain = http_get(&addr, "/metrics").map(|r| r.0).unwrap_or(0);
    assert_ne!(plain, 200, "plain HTTP gets nothing from a TLS port");

    let tls = format!(
        "    scheme: https\n    tls_config:\n      ca_file: {}\n",
        dir.path().join("cert.pem").display()
    );
    let right = format!("{tls}    basic_auth:\n      username: prometheus\n      password: s3cret\n");
    let wrong = format!("{tls}    basic_auth:\n      username: prometheus\n      password: guess\n");
    let prom = Prometheus::start_jobs(&[("gdr-trace", &addr, &right), ("intruder", &addr, &wrong)]);
    let up = prom.wait_for("up{job=\"gdr-trace\"}", Duration::from_secs(30), |r| {
        r.first().is_some_and(|s| sample_value(s) == 1.0)
    });
    assert_eq!(up[0]["metric"]["instance"], addr);
    let info = prom.wait_for("gdr_trace_build_info", Duration::from_secs(10), |r| !r.is_empty());
    assert_eq!(info[0]["metric"]["job"], "gdr-trace", "only the job with the password got series");
    let intruder = prom.wait_for("up{job=\"intruder\"}", Duration::from_secs(30), |r| !r.is_empty());
    assert_eq!(sample_value(&intruder[0]), 0.0, "a wrong password scrapes nothing");
    t.terminate();
}

#[test]
fn a_bad_web_config_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, "basic_auth_users:\n  prometheus: not-a-hash\n").unwrap();
    for (file, expect) in [
        (path.to_str().unwrap(), "basic_auth_users.prometheus: not a bcrypt hash"),
        ("/nonexistent/web.yml", "reading /nonexistent/web.yml"),
    ] {
        let out = Command::new(gdr_trace())
            .args(["serve", "--listen", "127.0.0.1:0", "--web-config", file])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(expect), "{expect}: {err}");
    }
}
