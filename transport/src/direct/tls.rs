//! TLS for the direct transport: rustls with mutual authentication.
//!
//! Why mutual: a replication link writes into the mirror's log directory, so
//! the applier must know the shipper as much as the shipper must know the
//! applier; both present a certificate signed by the link's CA (`--tls-ca`).
//! TLS roles follow the TCP connection (the side that dialled is the TLS
//! client), not the replication roles, so push and pull both work. The crypto
//! provider is aws-lc-rs, the one object_store already builds into the
//! workspace; it is passed explicitly, so no process-wide default is needed.
//!
//! The configuration builders read PEM files: call them at startup, or through
//! `spawn_blocking`, not on the async runtime's threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::error::{DirectError, Result};

/// Time allowed for the TLS handshake. 10 s, as for the protocol handshake:
/// a peer that has not completed it by then is wrong (plaintext, another
/// service on the port) rather than slow, and the caller reconnects with backoff.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The three PEM files of one side (`--tls-cert`, `--tls-key`, `--tls-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This side's certificate chain, leaf first.
    pub cert: PathBuf,
    /// This side's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA (one or more certificates) that signs the peer's certificate.
    pub ca: PathBuf,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn pem_error(what: &'static str, path: &Path, e: rustls_pki_types::pem::Error) -> DirectError {
    use rustls_pki_types::pem::Error as Pem;
    let reason = match e {
        Pem::Io(io) => format!("cannot read: {io}"),
        Pem::NoItemsFound => match what {
            "key" => "no PRIVATE KEY block in the file".to_string(),
            _ => "no CERTIFICATE block in the file".to_string(),
        },
        other => format!("not valid PEM: {other}"),
    };
    DirectError::TlsFile {
        what,
        path: path.to_path_buf(),
        reason,
    }
}

fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(what, path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_error(what, path, rustls_pki_types::pem::Error::NoItemsFound));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error("key", path, e))
}

fn load_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs("CA", path)? {
        roots.add(cert).map_err(|e| DirectError::TlsFile {
            what: "CA",
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn key_error(files: &TlsFiles, e: rustls::Error) -> DirectError {
    DirectError::TlsFile {
        what: "key",
        path: files.key.clone(),
        reason: format!("does not fit the certificate {}: {e}", files.cert.display()),
    }
}

/// The listening side's configuration: presents `cert`, requires a client
/// certificate signed by `ca`.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>> {
    let certs = load_certs("certificate", &files.cert)?;
    let key = load_key(&files.key)?;
    let roots = Arc::new(load_roots(&files.ca)?);
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| DirectError::TlsConfig {
            reason: format!("client verifier from {}: {e}", files.ca.display()),
        })?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| DirectError::TlsConfig { reason: e.to_string() })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| key_error(files, e))?;
    Ok(Arc::new(config))
}

/// The dialling side's configuration: verifies the server against `ca`,
/// presents `cert` as its client certificate.
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>> {
    let certs = load_certs("certificate", &files.cert)?;
    let key = load_key(&files.key)?;
    let roots = load_roots(&files.ca)?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| DirectError::TlsConfig { reason: e.to_string() })?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| key_error(files, e))?;
    Ok(Arc::new(config))
}

/// TLS server side of an accepted connection, within `timeout`.
pub async fn accept<S>(
    config: Arc<ServerConfig>,
    stream: S,
    timeout: Duration,
) -> Result<tokio_rustls::server::TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(timeout, TlsAcceptor::from(config).accept(stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(source)) => Err(DirectError::TlsHandshake { source }),
        Err(_) => Err(DirectError::Timeout {
            stage: "TLS handshake (accepting)",
            after: timeout,
        }),
    }
}

/// TLS client side of a dialled connection to `server_name` (the DNS name or
/// IP address the server's certificate must carry), within `timeout`.
pub async fn connect<S>(
    config: Arc<ClientConfig>,
    server_name: &str,
    stream: S,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| DirectError::TlsConfig {
        reason: format!("server name {server_name:?}: {e}"),
    })?;
    match tokio::time::timeout(timeout, TlsConnector::from(config).connect(name, stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(source)) => Err(DirectError::TlsHandshake { source }),
        Err(_) => Err(DirectError::Timeout {
            stage: "TLS handshake (connecting)",
            after: timeout,
        }),
    }
}

/// Most bytes [`Sniffed`] keeps of what a TLS client read first: a listener's "no free handshake slot" Refuse
/// (a link name and a sentence) fits many times over.
const SNIFF_BYTES: usize = 4096;

/// A stream that keeps a copy of the first bytes read from it while they may be a frame (the first byte is a
/// Refuse frame's type, 0x03, which no TLS record starts with), so that a TLS client whose handshake failed can
/// tell a listener's refusal in the clear from a TLS failure ([`connect_to_listener`]). Once the first byte says
/// TLS, it copies nothing more.
pub struct Sniffed<S> {
    inner: S,
    first: Vec<u8>,
    copying: bool,
}

impl<S> Sniffed<S> {
    fn new(inner: S) -> Sniffed<S> {
        Sniffed {
            inner,
            first: Vec::new(),
            copying: true,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniffed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.copying {
            let new = &buf.filled()[before..];
            let room = SNIFF_BYTES - self.first.len();
            let copy = new.len().min(room);
            let head = new[..copy].to_vec();
            self.first.extend_from_slice(&head);
            self.copying = self.first.first().is_none_or(|&b| b == REFUSE_TYPE) && self.first.len() < SNIFF_BYTES;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sniffed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The Refuse frame's type byte.
const REFUSE_TYPE: u8 = 3;

/// [`connect`] to a segmirror listener, as `role`: a listener with no free handshake slot answers a Refuse(`Busy`)
/// frame in the clear instead of TLS (`docs/direct-protocol.md` §4.6), which this reports as the refusal it is
/// ([`DirectError::RefusedByPeer`], transient: retried with backoff) instead of a TLS failure that blames
/// certificates.
pub async fn connect_to_listener<S>(
    config: Arc<ClientConfig>,
    server_name: &str,
    stream: S,
    timeout: Duration,
    role: super::Role,
) -> Result<tokio_rustls::client::TlsStream<Sniffed<S>>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| DirectError::TlsConfig {
        reason: format!("server name {server_name:?}: {e}"),
    })?;
    let deadline = tokio::time::Instant::now() + timeout;
    let connecting = TlsConnector::from(config)
        .connect(name, Sniffed::new(stream))
        .into_fallible();
    match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err((source, sniffed))) => match sniffed.first.first() {
            Some(&REFUSE_TYPE) => Err(read_refusal(sniffed, deadline, role)
                .await
                .unwrap_or(DirectError::TlsHandshake { source })),
            _ => Err(DirectError::TlsHandshake { source }),
        },
        Err(_) => Err(DirectError::Timeout {
            stage: "TLS handshake (connecting)",
            after: timeout,
        }),
    }
}

/// The Refuse frame a listener sent in the clear: from the bytes rustls read and refused, then the rest of the
/// frame from the stream (by the handshake's deadline). `None` when the bytes are no Refuse frame.
async fn read_refusal<S>(sniffed: Sniffed<S>, deadline: tokio::time::Instant, role: super::Role) -> Option<DirectError>
where
    S: AsyncRead + Unpin,
{
    use futures::StreamExt;
    let Sniffed { inner, first, .. } = sniffed;
    let bytes = tokio::io::AsyncReadExt::chain(std::io::Cursor::new(first), inner);
    let mut frames = tokio_util::codec::FramedRead::new(bytes, super::frame::FrameCodec::new(SNIFF_BYTES as u32));
    match tokio::time::timeout_at(deadline, frames.next()).await {
        Ok(Some(Ok(super::frame::Frame::Refuse(r)))) => Some(DirectError::RefusedByPeer {
            reason: r.reason,
            local_role: role,
            peer_role: role.peer(),
            message: r.message,
        }),
        _ => None,
    }
}
