use super::*;

fn config(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

fn error(yaml: &str) -> String {
    let (_dir, path) = config(yaml);
    match WebConfig::load(&path) {
        Ok(_) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    }
}

fn header(user: &str, password: &str) -> Vec<u8> {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
        .into_bytes()
}

#[test]
fn an_empty_file_turns_nothing_on() {
    let (_dir, path) = config("");
    let w = WebConfig::load(&path).unwrap();
    assert!(w.tls.is_none() && w.auth.is_none());
}

#[test]
fn mistakes_are_named_not_ignored() {
    assert!(error("basic_auth_user:\n  a: b\n").contains("unknown field `basic_auth_user`"));
    assert!(error("basic_auth_users:\n  alice: plain-text\n")
        .contains("basic_auth_users.alice: not a bcrypt hash"));
    let e = error("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n");
    assert!(e.contains("cert_file") && e.contains("nope.crt"), "{e}");
    let e = error(
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
    );
    assert!(e.contains("only NoClientCert"), "{e}");
    let e = error("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n");
    assert!(e.contains("TLS12 or TLS13"), "{e}");
    let missing = WebConfig::load(Path::new("/nonexistent/web.yml")).err().unwrap().to_string();
    assert!(missing.starts_with("reading /nonexistent/web.yml"), "{missing}");
}

#[test]
fn basic_auth_takes_the_right_password_only() {
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let (_dir, path) = config(&format!("basic_auth_users:\n  prometheus: {hash}\n"));
    let auth = WebConfig::load(&path).unwrap().auth.expect("users listed");
    assert!(auth.allows(Some(&header("prometheus", "s3cret"))));
    // Remembered after the first check, and still exact.
    assert!(auth.allows(Some(&header("prometheus", "s3cret"))));
    assert!(!auth.allows(Some(&header("prometheus", "s3cret "))));
    assert!(!auth.allows(Some(&header("prometheus", "wrong"))));
    assert!(!auth.allows(Some(&header("nobody", "s3cret"))));
    assert!(!auth.allows(Some(b"Bearer abc")));
    assert!(!auth.allows(Some(b"Basic !!!")));
    assert!(!auth.allows(None));
}
