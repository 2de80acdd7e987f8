//! TLS to PostgreSQL: libpq's `sslmode` and `sslrootcert` in the connection string, carried
//! out with rustls on aws-lc-rs (the TLS stack the `s3` feature's HTTP client links already).
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it, else plain | not checked |
//! | `require` | always | not checked; checked as by `verify-ca` when `sslrootcert` is given (as libpq does) |
//! | `verify-ca` | always | signed by a trusted root; any name |
//! | `verify-full` | always | signed by a trusted root, and naming the host (a DNS name or an IP address) |
//!
//! `sslrootcert=PATH` names a PEM file of trusted roots; `sslrootcert=system` (and the default of
//! the verifying modes) is the platform's trust store. Both keys are taken out of the string
//! before the driver parses it ([`split_tls`]); the driver is told `disable`, `prefer` or
//! `require`, and the connector ([`connector`]) checks what the mode asks for. Nothing here ever
//! echoes the connection string (it may hold a password). See docs/operations.md, "TLS".

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::Error;

/// libpq's `sslmode`: whether the connection is encrypted and what is checked of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked.
    #[default]
    Prefer,
    /// Always TLS; the certificate is not checked unless `sslrootcert` names roots.
    Require,
    /// Always TLS; the certificate must be signed by a trusted root (any name).
    VerifyCa,
    /// Always TLS; the certificate must be signed by a trusted root and name the host.
    VerifyFull,
}

impl SslMode {
    /// The mode of an `sslmode` value.
    fn parse(value: &str) -> Result<Self, Error> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            other => Err(Error::InvalidOption {
                name: "sslmode",
                reason: format!(
                    "{other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                ),
            }),
        }
    }

    /// What the driver is told: it negotiates TLS, the connector checks the rest.
    fn for_driver(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    /// The platform's trust store (`sslrootcert=system`).
    System,
    /// A PEM file of root certificates.
    File(PathBuf),
}

/// The TLS settings of a connection string.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// `sslmode`; `prefer` when absent.
    pub mode: SslMode,
    /// `sslrootcert`; `None` when absent.
    pub roots: Option<RootCerts>,
}

impl TlsSettings {
    /// Applies one of libpq's TLS keys.
    fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match key {
            "sslmode" => self.mode = SslMode::parse(value)?,
            _ => {
                self.roots = Some(match value {
                    "system" => RootCerts::System,
                    "" => {
                        return Err(Error::InvalidOption {
                            name: "sslrootcert",
                            reason: "is empty".into(),
                        });
                    }
                    path => RootCerts::File(PathBuf::from(path)),
                })
            }
        }
        Ok(())
    }
}

/// Whether `key` is one of the keys this module takes out of the string.
fn is_tls_key(key: &str) -> bool {
    matches!(key, "sslmode" | "sslrootcert")
}

/// Takes libpq's TLS keys out of a connection string (a `postgres://` URL or `key=value` pairs):
/// the string the driver parses (with `sslmode` set to what the driver understands) and the
/// settings. A key=value string this cannot split is passed on as it is (the driver then names
/// what it cannot parse).
pub fn split_tls(conn: &str) -> Result<(String, TlsSettings), Error> {
    if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        split_url(conn)
    } else {
        split_pairs(conn)
    }
}

/// [`split_tls`] of a URL: the keys are query parameters.
fn split_url(url: &str) -> Result<(String, TlsSettings), Error> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut settings = TlsSettings::default();
    let mut kept: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if is_tls_key(key) {
            settings.set(key, &percent_decode(key, value)?)?;
        } else {
            kept.push(pair);
        }
    }
    let sslmode = format!("sslmode={}", settings.mode.for_driver());
    kept.push(&sslmode);
    Ok((format!("{base}?{}", kept.join("&")), settings))
}

/// [`split_tls`] of `key=value` pairs (values optionally in single quotes, with `\` escapes).
fn split_pairs(conn: &str) -> Result<(String, TlsSettings), Error> {
    let Some(pairs) = pairs_of(conn) else {
        return Ok((conn.to_string(), TlsSettings::default()));
    };
    let mut settings = TlsSettings::default();
    let mut kept: Vec<&str> = Vec::new();
    for (key, value, raw) in &pairs {
        if is_tls_key(key) {
            settings.set(key, value)?;
        } else {
            kept.push(raw);
        }
    }
    let sslmode = format!("sslmode={}", settings.mode.for_driver());
    kept.push(&sslmode);
    Ok((kept.join(" "), settings))
}

/// The `(key, value, raw text)` of each pair; `None` when the string does not split cleanly.
fn pairs_of(conn: &str) -> Option<Vec<(String, String, &str)>> {
    let bytes = conn.as_bytes();
    let mut pairs = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            return Some(pairs);
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = conn[start..i].to_string();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if key.is_empty() || bytes.get(i) != Some(&b'=') {
            return None;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let (value, end) = value_at(conn, i)?;
        pairs.push((key, value, &conn[start..end]));
        i = end;
    }
}

/// The value starting at byte `i` and the byte after it: quoted (`'…'`, `\` escapes) or up to
/// the next whitespace.
fn value_at(conn: &str, mut i: usize) -> Option<(String, usize)> {
    let mut chars = conn[i..].char_indices().peekable();
    let quoted = conn[i..].starts_with('\'');
    if quoted {
        chars.next();
    }
    let mut value = String::new();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '\'' if quoted => return Some((value, i + at + 1)),
            c if !quoted && c.is_whitespace() => return Some((value, i + at)),
            c => value.push(c),
        }
    }
    i = conn.len();
    (!quoted).then_some((value, i))
}

/// `%XX`-decodes a query value.
fn percent_decode(key: &str, value: &str) -> Result<String, Error> {
    let bad = || Error::InvalidOption {
        name: if key == "sslmode" {
            "sslmode"
        } else {
            "sslrootcert"
        },
        reason: "is not a properly %-encoded query value".into(),
    };
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The connector the settings ask for: `None` for `disable` (the driver's `NoTls`).
pub fn connector(settings: &TlsSettings) -> Result<Option<MakeRustlsConnect>, Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("cannot set up TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (settings.mode, &settings.roots) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer | SslMode::Require, None) => Arc::new(AnyCertificate(provider)),
        (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, roots) => {
            Arc::new(AnyName(webpki(roots.as_ref(), &provider)?))
        }
        (SslMode::VerifyFull, roots) => webpki(roots.as_ref(), &provider)?,
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

fn tls_error(reason: String) -> Error {
    Error::InvalidOption {
        name: "sslrootcert",
        reason,
    }
}

/// rustls's verifier of a certificate chain and name against `roots` (the platform's when
/// `None`).
fn webpki(
    roots: Option<&RootCerts>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, Error> {
    let store = Arc::new(root_store(roots.unwrap_or(&RootCerts::System))?);
    WebPkiServerVerifier::builder_with_provider(store, Arc::clone(provider))
        .build()
        .map_err(|e| tls_error(format!("cannot build the certificate verifier: {e}")))
}

/// The trusted roots: a PEM file's certificates, or the platform's.
fn root_store(roots: &RootCerts) -> Result<RootCertStore, Error> {
    let mut store = RootCertStore::empty();
    match roots {
        RootCerts::File(path) => {
            let shown = path.display();
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
                .map_err(|e| tls_error(format!("{shown}: cannot read PEM certificates: {e}")))?;
            let (added, _ignored) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(tls_error(format!("{shown} holds no usable certificate")));
            }
        }
        RootCerts::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(tls_error(
                    "the platform's trust store holds no certificate; name one with sslrootcert=PATH"
                        .into(),
                ));
            }
        }
    }
    Ok(store)
}

/// `prefer` and `require` without roots: any certificate, but the handshake's signatures are
/// still checked (the connection is encrypted to whoever answered, as with libpq).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not compared.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // rustls checks the chain first and the name last: a name error means the chain held.
        let checked =
            self.0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match checked {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Option<RootCerts> {
        Some(RootCerts::File(PathBuf::from(path)))
    }

    #[test]
    fn a_url_loses_its_tls_keys_and_tells_the_driver_what_it_negotiates() {
        let (url, s) = split_tls(
            "postgres://u:p@h:5432/db?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u:p@h:5432/db?application_name=x&sslmode=require"
        );
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.roots, file("/etc/ca.pem"));
        let (url, s) = split_tls("postgresql://h/db").unwrap();
        assert_eq!(url, "postgresql://h/db?sslmode=prefer");
        assert_eq!(s, TlsSettings::default());
        let (url, s) = split_tls("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(
            (url.as_str(), s.mode),
            ("postgres://h/db?sslmode=disable", SslMode::Disable)
        );
    }

    #[test]
    fn key_value_pairs_lose_their_tls_keys_quoted_or_not() {
        let (conn, s) = split_tls(
            "host=h user=u sslmode = verify-ca sslrootcert='/my certs/ca.pem' password='a\\'b'",
        )
        .unwrap();
        assert_eq!(conn, "host=h user=u password='a\\'b' sslmode=require");
        assert_eq!(s.mode, SslMode::VerifyCa);
        assert_eq!(s.roots, file("/my certs/ca.pem"));
        let (conn, s) = split_tls("host=h sslrootcert=system").unwrap();
        assert_eq!(conn, "host=h sslmode=prefer");
        assert_eq!(s.roots, Some(RootCerts::System));
    }

    #[test]
    fn a_bad_mode_or_root_is_refused_without_echoing_the_string() {
        for conn in [
            "postgres://u:secret@h/db?sslmode=allow",
            "postgres://u:secret@h/db?sslrootcert=",
            "postgres://u:secret@h/db?sslrootcert=%zz",
            "host=h password=secret sslmode=maybe",
        ] {
            let e = split_tls(conn).unwrap_err();
            assert_eq!(e.code(), "LEASEHOLD_INVALID_OPTION", "{conn}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }

    #[test]
    fn a_string_that_does_not_split_is_left_to_the_driver() {
        let (conn, s) = split_tls("host=h 'unbalanced").unwrap();
        assert_eq!(conn, "host=h 'unbalanced");
        assert_eq!(s, TlsSettings::default());
    }

    #[test]
    fn each_mode_gets_its_connector_and_a_missing_root_file_is_named() {
        let mode = |mode, roots| TlsSettings { mode, roots };
        assert!(connector(&mode(SslMode::Disable, None)).unwrap().is_none());
        assert!(connector(&mode(SslMode::Prefer, None)).unwrap().is_some());
        assert!(connector(&mode(SslMode::Require, None)).unwrap().is_some());
        let missing = connector(&mode(SslMode::VerifyFull, file("/nonexistent/ca.pem")));
        let e = missing.err().unwrap();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
