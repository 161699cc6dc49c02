//! Mutual TLS for the direct protocol over real loopback TCP, with certificates
//! generated here: a session over TLS works, and the TLS side refuses a client
//! without a certificate, a client certificate from another CA and a plaintext
//! client, with errors rather than hangs. Bad PEM files are named in the error.

use std::sync::Arc;
use std::time::Duration;

use segmirror_transport::direct::tls::{self, TlsFiles};
use segmirror_transport::direct::{handshake, DirectError, FrameError, HandshakeConfig, Role};
use support::certs::Ca;
use tokio::net::{TcpListener, TcpStream};

mod support;

/// Generous: only reached when something hangs; the refusals below must come from TLS itself.
const TIMEOUT: Duration = Duration::from_secs(20);

struct Setup {
    _dir: tempfile::TempDir,
    server: TlsFiles,
    client: TlsFiles,
    stranger: TlsFiles,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("link CA");
    let other = Ca::new("some other CA");
    Setup {
        server: ca.leaf(dir.path(), "applier", &["localhost", "127.0.0.1"]),
        client: ca.leaf(dir.path(), "shipper", &["shipper.example"]),
        // Signed by another CA, but trusting the link's CA so that only the server's check can refuse it.
        stranger: {
            let mut files = other.leaf(dir.path(), "stranger", &["stranger.example"]);
            files.ca = dir.path().join("applier-ca.crt");
            files
        },
        _dir: dir,
    }
}

fn shipper() -> HandshakeConfig {
    HandshakeConfig::new(Role::Shipper, "dr", Some("cluster-A".into()))
}

fn applier() -> HandshakeConfig {
    HandshakeConfig::new(Role::Applier, "dr", None)
}

/// A TLS listener that accepts one connection and runs the applier's handshake on it.
async fn tls_applier(files: &TlsFiles) -> (std::net::SocketAddr, tokio::task::JoinHandle<Result<(), DirectError>>) {
    let config = tls::server_config(files).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let stream = tls::accept(config, tcp, TIMEOUT).await?;
        handshake(stream, &applier()).await.map(|_| ())
    });
    (addr, task)
}

/// Dials with `config`, then runs the shipper's handshake.
async fn tls_shipper(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<(), DirectError> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let stream = tls::connect(config, "127.0.0.1", tcp, TIMEOUT).await?;
    handshake(stream, &shipper()).await.map(|_| ())
}

fn is_tls_refusal(err: &DirectError) -> bool {
    matches!(err, DirectError::TlsHandshake { .. })
}

#[tokio::test]
async fn mutual_tls_carries_the_handshake() {
    let s = setup();
    let (addr, applier) = tls_applier(&s.server).await;
    let client = tls::client_config(&s.client).expect("client config");
    tls_shipper(addr, client).await.expect("shipper over TLS");
    applier.await.expect("join").expect("applier over TLS");
}

#[tokio::test]
async fn pull_mode_tls_roles_follow_the_connection_not_the_replication_role() {
    // The applier dials (TLS client), the shipper listens (TLS server).
    let s = setup();
    let server = tls::server_config(&s.client).expect("server config");
    let client = tls::client_config(&s.server).expect("client config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shipper_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let stream = tls::accept(server, tcp, TIMEOUT).await?;
        handshake(stream, &shipper()).await.map(|(_, session)| session)
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let stream = tls::connect(client, "shipper.example", tcp, TIMEOUT)
        .await
        .expect("tls");
    let (_, a_session) = handshake(stream, &applier()).await.expect("applier");
    let s_session = shipper_side.await.expect("join").expect("shipper");
    assert_eq!(a_session.source_cluster_id, "cluster-A");
    assert_eq!(s_session.version, a_session.version);
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let s = setup();
    let (addr, applier) = tls_applier(&s.server).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::pem::PemObject::pem_file_iter(&s.server.ca).expect("ca") {
        roots.add(cert.expect("cert")).expect("add");
    }
    let no_cert = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client_err = tls_shipper(addr, Arc::new(no_cert))
        .await
        .expect_err("client must fail");
    let server_err = applier.await.expect("join").expect_err("server must refuse");
    assert!(is_tls_refusal(&server_err), "{server_err:?}");
    assert!(server_err.to_string().contains("certificate"), "{server_err}");
    // TLS 1.3: the client learns of the refusal on its first read, inside the handshake.
    assert!(!matches!(client_err, DirectError::Timeout { .. }), "{client_err:?}");
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused() {
    let s = setup();
    let (addr, applier) = tls_applier(&s.server).await;
    let stranger = tls::client_config(&s.stranger).expect("client config");
    let client_err = tls_shipper(addr, stranger).await.expect_err("client must fail");
    let server_err = applier.await.expect("join").expect_err("server must refuse");
    assert!(is_tls_refusal(&server_err), "{server_err:?}");
    assert!(!matches!(client_err, DirectError::Timeout { .. }), "{client_err:?}");
}

#[tokio::test]
async fn a_plaintext_client_is_refused_by_the_tls_side_without_a_hang() {
    let s = setup();
    let (addr, applier) = tls_applier(&s.server).await;
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let client_err = handshake(tcp, &shipper())
        .await
        .map(|_| ())
        .expect_err("plaintext client");
    let server_err = applier.await.expect("join").expect_err("server must refuse");
    // The TLS side rejects the Hello frame as a TLS record at once; it does not wait for its timeout.
    assert!(is_tls_refusal(&server_err), "{server_err:?}");
    // The plaintext side reads the TLS alert sent back and says what it is.
    assert!(
        matches!(
            client_err,
            DirectError::Frame(FrameError::PeerSpeaksTls { record: 0x15 })
        ),
        "{client_err:?}"
    );
}

#[tokio::test]
async fn a_tls_client_at_a_plaintext_listener_is_named_as_such() {
    let s = setup();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let plain = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        handshake(tcp, &applier()).await.map(|_| ())
    });
    let client = tls::client_config(&s.client).expect("client config");
    let client_err = tls_shipper(addr, client).await.expect_err("client must fail");
    let server_err = plain.await.expect("join").expect_err("plaintext side must refuse");
    assert!(
        matches!(
            server_err,
            DirectError::Frame(FrameError::PeerSpeaksTls { record: 0x16 })
        ),
        "{server_err:?}"
    );
    assert!(!matches!(client_err, DirectError::Timeout { .. }), "{client_err:?}");
}

#[test]
fn bad_pem_files_are_named() {
    let s = setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = TlsFiles {
        cert: dir.path().join("nope.crt"),
        ..s.client.clone()
    };
    let err = tls::client_config(&missing).expect_err("missing");
    assert!(
        matches!(&err, DirectError::TlsFile { what: "certificate", path, .. } if path == &missing.cert),
        "{err:?}"
    );
    assert!(err.to_string().contains("nope.crt"), "{err}");

    // A key file that holds a certificate only.
    let wrong_key = TlsFiles {
        key: s.client.cert.clone(),
        ..s.client.clone()
    };
    let err = tls::server_config(&wrong_key).expect_err("no key");
    assert!(matches!(&err, DirectError::TlsFile { what: "key", .. }), "{err:?}");
    assert!(err.to_string().contains("no PRIVATE KEY block"), "{err}");

    // A CA file of garbage.
    let garbage = dir.path().join("garbage-ca.crt");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let err = tls::client_config(&TlsFiles {
        ca: garbage.clone(),
        ..s.client.clone()
    })
    .expect_err("garbage");
    assert!(
        matches!(&err, DirectError::TlsFile { what: "CA", path, .. } if path == &garbage),
        "{err:?}"
    );

    // A key that belongs to another certificate.
    let mismatched = TlsFiles {
        key: s.server.key.clone(),
        ..s.client.clone()
    };
    let err = tls::server_config(&mismatched).expect_err("mismatch");
    assert!(matches!(&err, DirectError::TlsFile { what: "key", .. }), "{err:?}");
    assert!(err.to_string().contains("shipper.crt"), "{err}");
}

#[tokio::test]
async fn a_silent_client_at_the_tls_listener_times_out() {
    let s = setup();
    let config = tls::server_config(&s.server).expect("server config");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        tls::accept(config, tcp, Duration::from_millis(300)).await.map(|_| ())
    });
    // Connected, never a byte: the accept gives up instead of holding the connection forever.
    let _silent = TcpStream::connect(addr).await.expect("connect");
    let err = server.await.expect("join").expect_err("timeout");
    assert!(
        matches!(
            err,
            DirectError::Timeout {
                stage: "TLS handshake (accepting)",
                ..
            }
        ),
        "{err:?}"
    );
}
