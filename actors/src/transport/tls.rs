//! TLS for the transport (feature `tls`, rustls): the server presents a certificate chain and
//! key; the client trusts only the certificates given (the fleet's CA, or each replica's
//! self-signed certificate), never the system's roots. TLS keeps forwarded messages private and
//! the server's identity checked; the fleet key's MAC still decides who may send.

use leasehold::Error;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// PEM bytes of the server's certificate and key, and of what the client trusts.
#[derive(Clone)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM), leaf first. Its names must cover the host of the
    /// endpoint other replicas use (`advertise`).
    pub cert_chain_pem: Vec<u8>,
    /// The server's private key (PEM, PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Vec<u8>,
    /// The certificates the client trusts (PEM bundle): the fleet's CA.
    pub trust_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidOption {
        name: "tls",
        reason,
    }
}

impl TlsConfig {
    /// The server's rustls configuration.
    pub(crate) fn server_config(&self) -> Result<rustls::ServerConfig, Error> {
        let chain = CertificateDer::pem_slice_iter(&self.cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("the certificate chain does not parse: {e}")))?;
        if chain.is_empty() {
            return Err(invalid("the certificate chain is empty".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| invalid(format!("the private key does not parse: {e}")))?;
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| invalid(format!("the certificate and key do not serve: {e}")))
    }

    /// `builder`, trusting only [`TlsConfig::trust_pem`].
    pub(crate) fn client(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, Error> {
        let trusted = reqwest::Certificate::from_pem_bundle(&self.trust_pem)
            .map_err(|e| invalid(format!("the trusted certificates do not parse: {e}")))?;
        if trusted.is_empty() {
            return Err(invalid("no trusted certificate".into()));
        }
        Ok(builder.tls_certs_only(trusted))
    }
}
