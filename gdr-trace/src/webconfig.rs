//! `serve --web-config FILE`: TLS and basic authentication for /metrics, from the same YAML file
//! Prometheus exporters read (prometheus/exporter-toolkit's web configuration):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt      # PEM, the chain; relative paths are read beside this file
//!   key_file: server.key       # PEM, PKCS#8, PKCS#1 or SEC1
//!   min_version: TLS12         # or TLS13 (default TLS12)
//! basic_auth_users:
//!   prometheus: $2y$10$...     # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Unknown keys are an error, as in the exporter toolkit. Client certificates are not offered:
//! `client_auth_type` other than `NoClientCert` is refused rather than ignored.

use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use base64::Engine;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    min_version: Option<String>,
    client_auth_type: Option<String>,
}

/// What `serve` enforces: TLS when configured, credentials when users are listed.
#[derive(Clone)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Option<Arc<BasicAuth>>,
}

impl WebConfig {
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| WebConfigError::Read { path: path.into(), source })?;
        let invalid = |message: String| WebConfigError::Invalid { path: path.into(), message };
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| invalid(e.to_string()))?
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = file.tls_server_config.map(|t| tls_config(dir, &t).map_err(invalid)).transpose()?;
        let auth = if file.basic_auth_users.is_empty() {
            None
        } else {
            for (user, hash) in &file.basic_auth_users {
                hash.parse::<bcrypt::HashParts>()
                    .map_err(|e| invalid(format!("basic_auth_users.{user}: not a bcrypt hash ({e})")))?;
            }
            Some(Arc::new(BasicAuth { users: file.basic_auth_users, good: Mutex::default() }))
        };
        Ok(Self { tls: tls.map(Arc::new), auth })
    }
}

fn tls_config(dir: &Path, t: &TlsFile) -> Result<rustls::ServerConfig, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    if let Some(kind) = t.client_auth_type.as_deref().filter(|k| *k != "NoClientCert") {
        return Err(format!("tls_server_config.client_auth_type {kind:?}: only NoClientCert is supported"));
    }
    let versions: &[&rustls::SupportedProtocolVersion] = match t.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(v) => return Err(format!("tls_server_config.min_version {v:?}: TLS12 or TLS13")),
    };
    let (cert, key) = (dir.join(&t.cert_file), dir.join(&t.key_file));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("cert_file {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("cert_file {}: no certificate in it", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("key_file {}: {e}", key.display()))?;
    // ring, not aws-lc-rs: it builds for the static musl binary with the host's C compiler
    // (aws-lc-rs needs cmake and a musl toolchain). Its provider lacks the post-quantum key
    // exchange, hence the deprecation; the classical groups are what scrapers offer today.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Users and their bcrypt hashes. A bcrypt check is slow on purpose (tens of ms), so the
/// `Authorization` values that passed are remembered (a few, exact bytes) and a scraper pays
/// once; an unknown user costs the same check as a known one.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    good: Mutex<HashSet<Vec<u8>>>,
}

/// A bcrypt hash of nothing anyone knows, checked for unknown users so they take as long.
const DUMMY: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
const REMEMBERED: usize = 64;

impl BasicAuth {
    /// Whether this `Authorization` value passed before (no bcrypt check needed).
    pub fn remembered(&self, header: Option<&[u8]>) -> bool {
        header.is_some_and(|v| self.good.lock().unwrap_or_else(|e| e.into_inner()).contains(v))
    }

    /// Whether an `Authorization` header value names a user with the right password.
    pub fn allows(&self, header: Option<&[u8]>) -> bool {
        let Some(value) = header else { return false };
        if self.good.lock().unwrap_or_else(|e| e.into_inner()).contains(value) {
            return true;
        }
        let Some((user, password)) = decode(value) else { return false };
        let ok = match self.users.get(&user) {
            Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(&password, DUMMY);
                false
            }
        };
        if ok {
            let mut good = self.good.lock().unwrap_or_else(|e| e.into_inner());
            if good.len() >= REMEMBERED {
                good.clear();
            }
            good.insert(value.to_vec());
        }
        ok
    }
}

/// `Basic base64(user:password)` → (user, password).
fn decode(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, b64) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()?;
    let (user, password) = std::str::from_utf8(&raw).ok()?.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests;
