//! The listener's handshake slots against idle peers, with the real processes: a Kafka 4.4 broker, `segmirror
//! apply --listen` and `segmirror ship --connect` over mutual TLS. Before the shipper starts, eight silent TCP
//! connections (one from each of eight loopback addresses, so the per-address share does not stop them) take every
//! handshake slot of the applier and stay open. The shipper is told "the applier had no free handshake slot" (not
//! "a plaintext peer, a certificate the CA did not sign, or no client certificate"), the applier closes the silent
//! connections at its accept deadline (5 s), and the shipper's session starts then: the mirror becomes the
//! source's partition byte for byte, and neither process exited.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use segmirror_tests::service::{wait_until, Service};
use segmirror_tests::*;

/// Guard for what the test waits for; nothing is asserted about speed but the deadline's order of magnitude.
const PATIENCE: Duration = Duration::from_secs(90);
const RECORDS: usize = 300;

/// PEM files of a CA and two leaves it signed (server and client), as e2e_tail_processes makes them.
fn certs(dir: &Path) -> ([String; 3], [String; 3]) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "e2e-slots-ca");
    let issuer = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, issuer.pem()).unwrap();
    let leaf = |name: &str| -> [String; 3] {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        [c, k, ca.clone()].map(|p| p.to_str().unwrap().to_string())
    };
    (leaf("server"), leaf("client"))
}

fn tls_args(files: &[String; 3]) -> Vec<String> {
    vec![
        "--tls-cert".to_string(),
        files[0].clone(),
        "--tls-key".into(),
        files[1].clone(),
        "--tls-ca".into(),
        files[2].clone(),
    ]
}

/// A partition directory's `.log` files: name → bytes.
fn log_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// A TCP connection to `addr` from the loopback address `from` that never sends a byte (every 127.0.0.0/8 address
/// is loopback on Linux, so each `from` is another source address to the listener).
fn silent_connection(runtime: &tokio::runtime::Runtime, from: &str, addr: std::net::SocketAddr) -> std::net::TcpStream {
    let tcp = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        socket.connect(addr).await.unwrap()
    });
    let tcp = tcp.into_std().unwrap();
    tcp.set_nonblocking(false).unwrap();
    tcp
}

#[test]
fn silent_connections_do_not_keep_the_real_shipper_out_and_it_is_told_why() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-slots")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(
        &bootstrap,
        &[TopicSpec::new("orders", 1).config("retention.ms", -1)],
        &[],
    )
    .unwrap();
    let records = (0..RECORDS)
        .map(|i| OutRecord {
            partition: Some(0),
            key: Some(format!("k-{i}").into_bytes()),
            value: Some(vec![b'a' + (i % 26) as u8; 200]),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect();
    python_produce(&bootstrap, &ProducePlan::new("orders").step(ProduceStep::Send(records))).unwrap();

    let work = tempfile::tempdir().unwrap();
    let (server, client) = certs(work.path());
    let mirror = work.path().join("mirror");
    let mut apply_args: Vec<String> = ["apply", "--listen", "127.0.0.1:0", "--link", "dr", "--mirror"]
        .map(String::from)
        .to_vec();
    apply_args.push(mirror.to_str().unwrap().to_string());
    apply_args.extend([
        "--catalog".to_string(),
        work.path().join("mirror.sqlite").to_str().unwrap().into(),
    ]);
    apply_args.extend(tls_args(&server));
    let mut applier = Service::start("apply", apply_args).patience(PATIENCE);
    let addr: std::net::SocketAddr = applier.wait_for("listening on ").trim().parse().unwrap();

    // Eight silent connections from eight addresses: every handshake slot is taken.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connected = Instant::now();
    let silent: Vec<_> = (0..8)
        .map(|i| silent_connection(&runtime, &format!("127.0.0.{}", 10 + i), addr))
        .collect();

    let mut ship_args: Vec<String> = [
        "ship",
        "--connect",
        &addr.to_string(),
        "--link",
        "dr",
        "--upto",
        "log-end",
    ]
    .map(String::from)
    .to_vec();
    ship_args.extend(["--log-dir".to_string(), broker.log_dir().to_str().unwrap().into()]);
    ship_args.extend(tls_args(&client));
    ship_args.extend(["--tls-server-name".to_string(), "localhost".into()]);
    let mut shipper = Service::start("ship", ship_args).patience(PATIENCE);

    let source = broker.partition_dir("orders", 0);
    let mirrored = mirror.join("orders-0");
    wait_until(
        "orders-0 byte-identical on the mirror",
        PATIENCE,
        &mut [&mut applier, &mut shipper],
        || {
            let (want, got) = (log_files(&source), log_files(&mirrored));
            (!want.is_empty() && got == want, (want.len(), got.len()))
        },
    );

    // The applier closed every silent connection at its accept deadline (5 s after its accept), not later.
    for (i, mut tcp) in silent.into_iter().enumerate() {
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 256];
        loop {
            match tcp.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let after = connected.elapsed();
        assert!(
            after >= Duration::from_secs(5),
            "connection {i} closed after {after:?}, before the deadline"
        );
    }
    assert!(
        connected.elapsed() < Duration::from_secs(5) + PATIENCE,
        "the silent connections outlived the deadline"
    );
    applier.assert_running();
    shipper.assert_running();
    let ship_log = shipper.log();
    assert!(
        ship_log.contains("the applier had no free handshake slot"),
        "{ship_log}"
    );
    assert!(!ship_log.contains("certificate the CA did not sign"), "{ship_log}");
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
}
