//! `segmirror serve` over a mirror that `seed` + `apply` filled, read by kcat (librdkafka): every record at its
//! offset with key and headers, aborted transactions hidden under read_committed only, a producer refused with the
//! read-only message, and TLS with client certificates (a client without one is refused).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use segment_format::batch::ControlType;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// `txn-0`: plain records 0-3, an aborted transaction (pid 7) at 4-5 with its marker at 6, plain 7-8, a committed
/// transaction (pid 8) at 9-10 with its marker at 11, plain 12-13, in two segments.
fn mirror_with_transactions(tmp: &Path) -> (PathBuf, PathBuf) {
    let source = tmp.join("source");
    let seg0 = vec![
        data_batch(0, 2, 1),
        data_batch(2, 2, 1),
        txn_batch(4, 2, 1, 7),
        marker(6, 1, 7, ControlType::Abort),
    ];
    let seg1 = vec![
        data_batch(7, 2, 2),
        txn_batch(9, 2, 2, 8),
        marker(11, 2, 8, ControlType::Commit),
        data_batch(12, 2, 2),
    ];
    write_log_dir(
        &source,
        &[PartitionSpec::new(
            "txn",
            0,
            vec![SegmentSpec::new(seg0), SegmentSpec::new(seg1)],
        )],
    );
    let store = tmp.join("store");
    let mirror = tmp.join("mirror");
    let catalog = tmp.join("catalog.sqlite");
    segmirror(["seed", "--log-dir", s(&source), "--store", s(&store), "--link", "east"]).expect_code(0);
    segmirror([
        "apply",
        "--store",
        s(&store),
        "--mirror",
        s(&mirror),
        "--link",
        "east",
        "--catalog",
        s(&catalog),
    ])
    .expect_code(0);
    (mirror, catalog)
}

/// A running `segmirror serve`, killed on drop.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    fn start(mirror: &Path, catalog: &Path, security: &[String]) -> Serve {
        Serve::start_link(mirror, catalog, "east", security)
    }

    fn start_link(mirror: &Path, catalog: &Path, link: &str, security: &[String]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_segmirror"))
            .env("SEGMIRROR_HOME", service::test_home())
            .args(["serve", "--mirror", s(mirror), "--catalog", s(catalog), "--link", link])
            .args(["--listen", "127.0.0.1:0"])
            .args(security)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let addr = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("serve ended before printing its address: {seen:#?}"))
                .unwrap();
            seen.push(line.clone());
            if let Some(addr) = line.strip_prefix(&format!("segmirror serve: link {link} on ")) {
                break addr.to_string();
            }
        };
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Serve { child, addr }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kcat(args: &[&str]) -> std::process::Output {
    Command::new("kcat")
        .args(args)
        .output()
        .expect("kcat is installed (scripts/install-test-deps.sh)")
}

/// `offset key` of every record kcat reads from `txn`-0 with `isolation`.
fn consume(addr: &str, isolation: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "-b",
        addr,
        "-C",
        "-t",
        "txn",
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o %k %h\\n",
        "-X",
    ];
    let iso = format!("isolation.level={isolation}");
    args.push(&iso);
    args.extend_from_slice(extra);
    let out = kcat(&args);
    assert!(
        out.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn expected(offsets: impl IntoIterator<Item = i64>) -> Vec<String> {
    offsets
        .into_iter()
        .map(|o| format!("{o} key-{o} h=\u{1}\u{2}"))
        .collect()
}

#[test]
fn kcat_reads_every_record_and_read_committed_hides_the_aborted_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let (mirror, catalog) = mirror_with_transactions(tmp.path());
    let serve = Serve::start(&mirror, &catalog, &["--plaintext".to_string()]);
    let all: Vec<i64> = (0..14).filter(|o| *o != 6 && *o != 11).collect();
    assert_eq!(consume(&serve.addr, "read_uncommitted", &[]), expected(all.clone()));
    let committed: Vec<i64> = all.into_iter().filter(|o| *o != 4 && *o != 5).collect();
    assert_eq!(consume(&serve.addr, "read_committed", &[]), expected(committed));
}

#[test]
fn a_kcat_producer_is_refused_with_the_read_only_message() {
    let tmp = tempfile::tempdir().unwrap();
    let (mirror, catalog) = mirror_with_transactions(tmp.path());
    let serve = Serve::start(&mirror, &catalog, &["--plaintext".to_string()]);
    let mut producer = Command::new("kcat")
        .args([
            "-b",
            &serve.addr,
            "-P",
            "-t",
            "txn",
            "-p",
            "0",
            "-X",
            "message.timeout.ms=20000",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = producer.stdin.take().unwrap();
        stdin.write_all(b"hello\n").unwrap();
    }
    let started = std::time::Instant::now();
    let out = producer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the producer retried instead of failing fast"
    );
    assert!(
        stderr.contains("read-only mirror of link east") || stderr.contains("Policy violation"),
        "kcat's producer was not told the topic is read-only: {stderr}"
    );
    // Nothing was written: the partition still ends at 14.
    assert_eq!(consume(&serve.addr, "read_uncommitted", &[]).len(), 12);
}

/// A CA, a server leaf for 127.0.0.1/localhost, a client leaf; (server flags, kcat client flags, CA path).
fn certs(dir: &Path) -> (Vec<String>, Vec<String>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "segmirror test CA");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, issuer.pem()).unwrap();
    let leaf = |name: &str| {
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    };
    let (server_cert, server_key) = leaf("endpoint");
    let (client_cert, client_key) = leaf("client");
    let ca = ca.display().to_string();
    let server = vec![
        "--tls-cert".into(),
        server_cert,
        "--tls-key".into(),
        server_key,
        "--tls-ca".into(),
        ca.clone(),
    ];
    let client = vec![
        "-X".into(),
        "security.protocol=ssl".into(),
        "-X".into(),
        format!("ssl.ca.location={ca}"),
        "-X".into(),
        format!("ssl.certificate.location={client_cert}"),
        "-X".into(),
        format!("ssl.key.location={client_key}"),
    ];
    (server, client, ca)
}

#[test]
fn tls_serves_a_client_with_a_certificate_and_refuses_one_without() {
    let tmp = tempfile::tempdir().unwrap();
    let (mirror, catalog) = mirror_with_transactions(tmp.path());
    let (server, client, ca) = certs(tmp.path());
    let serve = Serve::start(&mirror, &catalog, &server);
    let client: Vec<&str> = client.iter().map(String::as_str).collect();
    let got = consume(&serve.addr, "read_committed", &client);
    assert_eq!(got.len(), 10, "{got:?}");
    // Without a client certificate: the handshake is refused and nothing is read.
    let anonymous = kcat(&[
        "-b",
        &serve.addr,
        "-L",
        "-m",
        "5",
        "-X",
        "security.protocol=ssl",
        "-X",
        &format!("ssl.ca.location={ca}"),
    ]);
    assert!(!anonymous.status.success(), "a client without a certificate was served");
}

/// Every record of kcat's reading of `topic` (all partitions) with `isolation`, sorted: partition, offset,
/// timestamp, key, headers, value size.
fn read_topic(addr: &str, topic: &str, isolation: &str) -> Vec<String> {
    let iso = format!("isolation.level={isolation}");
    let out = kcat(&[
        "-b",
        addr,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-X",
        &iso,
        "-f",
        "%p %o %T %k %h %S\\n",
    ]);
    assert!(
        out.status.success(),
        "kcat failed on {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The generated sample (every codec, legacy formats, compaction gaps, transactions with aborts, log-append time)
/// served from the mirror `demo` installed and straight from its bucket: a client reads the same records from both,
/// at both isolation levels.
#[test]
fn the_bucket_replica_serves_what_the_mirror_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = tmp.path().join("demo");
    segmirror(["demo", "--dir", s(&demo)]).expect_code(0);
    let mirror = Serve::start_link(
        &demo.join("mirror"),
        &demo.join("catalog.sqlite"),
        "demo",
        &["--plaintext".to_string()],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", service::test_home())
        .args([
            "serve",
            "--store",
            s(&demo.join("store")),
            "--link",
            "demo",
            "--listen",
            "127.0.0.1:0",
        ])
        .args([
            "--cache-dir",
            s(&tmp.path().join("cache")),
            "--cache-size",
            "1",
            "--plaintext",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let bucket_addr = loop {
        let line = lines.next().expect("serve --store printed its address").unwrap();
        if let Some(addr) = line.strip_prefix("segmirror serve: link demo on ") {
            break addr.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let bucket = Serve {
        child,
        addr: bucket_addr,
    };
    let mut total = 0;
    for topic in [
        "sample-codecs",
        "sample-compacted",
        "sample-transactions",
        "sample-legacy",
        "sample-idempotent",
    ] {
        for isolation in ["read_uncommitted", "read_committed"] {
            let from_mirror = read_topic(&mirror.addr, topic, isolation);
            let from_bucket = read_topic(&bucket.addr, topic, isolation);
            assert!(
                !from_mirror.is_empty(),
                "{topic} {isolation}: nothing read from the mirror"
            );
            assert_eq!(
                from_bucket, from_mirror,
                "{topic} {isolation}: the bucket replica differs from the mirror"
            );
            total += from_mirror.len();
        }
    }
    assert!(total > 1000, "{total} records compared");
}
