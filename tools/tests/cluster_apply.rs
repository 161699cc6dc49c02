//! `segmirror apply --listen ADDR --cluster` as a process: one session per shipper node id at the same time, claims
//! granted by leader epoch (the displaced shipper gets a Revoke), a shipper that cannot claim refused, a second
//! session of the same node refused `Busy`, the claims in `segmirror status`, and the flag rules (exit 2): the
//! cluster applier only listens, and a cluster shipper only dials.
//!
//! The shippers here are the protocol's own client (`transport::direct::handshake` + frames), not `segmirror ship
//! --cluster`, which needs a real broker's Metadata (that pairing is `tests/tests/e2e_tail_cluster.rs`).

mod common;

use std::path::{Path, PathBuf};

use common::segmirror;
use common::service::{Service, PATIENCE};
use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::handshake::{handshake, HandshakeConfig};
use segmirror_transport::direct::payload::{Claim, ClaimResult, ClaimVerdict, PartitionRef, Revoke};
use segmirror_transport::direct::{Frame, FrameCodec, Role};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

const LINK: &str = "dr";
const CLUSTER_ID: &str = "src-cluster-0001";

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn catalog_of(mirror: &Path) -> PathBuf {
    mirror.with_extension("catalog.sqlite")
}

fn cluster_apply_args(mirror: &Path) -> Vec<String> {
    let (m, c) = (mirror.display().to_string(), catalog_of(mirror).display().to_string());
    strings(&[
        "apply",
        "--mirror",
        &m,
        "--catalog",
        &c,
        "--link",
        LINK,
        "--listen",
        "127.0.0.1:0",
        "--plaintext",
        "--cluster",
    ])
}

type Conn = Framed<TcpStream, FrameCodec>;

/// A shipper of node `node` (`None`: one that names no node, as `ship` without `--cluster`), after the handshake.
async fn shipper(addr: &str, node: Option<i32>) -> Result<Conn, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let config = match node {
        Some(n) => HandshakeConfig::cluster_shipper(LINK, CLUSTER_ID.to_string(), n),
        None => HandshakeConfig::new(Role::Shipper, LINK, Some(CLUSTER_ID.to_string())),
    };
    let (framed, _session) = handshake(tcp, &config).await.map_err(|e| e.to_string())?;
    Ok(framed)
}

/// The next frame that is not a Resume, Credit or Heartbeat (what every session starts with or sends meanwhile).
async fn next_frame(conn: &mut Conn) -> Frame {
    loop {
        let frame = tokio::time::timeout(PATIENCE, conn.next())
            .await
            .expect("the applier answered in time")
            .expect("the connection is open")
            .expect("a valid frame");
        match frame {
            Frame::Resume(_)
            | Frame::ResumeWithEnds { .. }
            | Frame::MirrorLayout(_)
            | Frame::Credit { .. }
            | Frame::Heartbeat { .. } => {}
            other => return other,
        }
    }
}

async fn claim(conn: &mut Conn, partition: &PartitionRef, epoch: i32) -> ClaimVerdict {
    conn.send(Frame::Claim(Claim {
        partition: partition.clone(),
        leader_epoch: epoch,
    }))
    .await
    .unwrap();
    match next_frame(conn).await {
        Frame::ClaimResult(ClaimResult { partition: p, verdict }) => {
            assert_eq!(&p, partition);
            verdict
        }
        other => panic!("expected a ClaimResult, got {other:?}"),
    }
}

fn status_rows(mirror: &Path) -> serde_json::Value {
    let catalog = catalog_of(mirror).display().to_string();
    let run = segmirror(["status", "--json", "--catalog", &catalog]);
    run.expect_code(0);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    doc["tail"].clone()
}

#[test]
fn a_cluster_applier_serves_one_session_per_node_grants_by_epoch_and_status_shows_the_claim() {
    let root = tempfile::tempdir().unwrap();
    let mirror = root.path().join("mirror");
    let mut applier = Service::start("apply --cluster", &cluster_apply_args(&mirror));
    let addr = applier.bound();
    applier.wait_for("serving the shippers of a source cluster");
    let orders = PartitionRef {
        topic: "orders".into(),
        partition: 0,
        topic_id: [7; 16],
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Two brokers' shippers at once: a single-peer applier would refuse the second `Busy`.
        let mut one = shipper(&addr, Some(1)).await.expect("node 1 is served");
        let mut two = shipper(&addr, Some(2)).await.expect("node 2 is served beside node 1");
        assert_eq!(
            claim(&mut one, &orders, 3).await,
            ClaimVerdict::Granted { durable: None },
            "nothing of the partition is in the mirror"
        );
        assert_eq!(
            claim(&mut two, &orders, 3).await,
            ClaimVerdict::Refused {
                holder_node: 1,
                holder_epoch: 3
            },
            "an equal epoch goes to the holder"
        );
        assert_eq!(
            claim(&mut two, &orders, 4).await,
            ClaimVerdict::Granted { durable: None }
        );
        match next_frame(&mut one).await {
            Frame::Revoke(Revoke {
                partition,
                holder_node,
                holder_epoch,
            }) => assert_eq!((partition, holder_node, holder_epoch), (orders.clone(), 2, 4)),
            other => panic!("node 1 expected a Revoke, got {other:?}"),
        }
        // A second session of node 2 while its first runs: Busy (the first frame after the handshake).
        let mut again = shipper(&addr, Some(2)).await.expect("the handshake itself completes");
        match next_frame(&mut again).await {
            Frame::Refuse(r) => assert!(r.message.contains("node 2"), "{r:?}"),
            other => panic!("expected Refuse(Busy), got {other:?}"),
        }
        // A shipper that names no node would ship without claims: refused at the handshake.
        let err = shipper(&addr, None)
            .await
            .expect_err("a shipper without a node id is refused");
        assert!(err.to_lowercase().contains("feature"), "{err}");
    });
    let rows = status_rows(&mirror);
    let row = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["topic"] == "orders" && r["partition"] == 0))
        .unwrap_or_else(|| panic!("no tail row of orders-0: {rows}"));
    assert_eq!(
        (row["claim_node"].clone(), row["claim_epoch"].clone()),
        (2.into(), 4.into()),
        "{row}"
    );
    let catalog = catalog_of(&mirror).display().to_string();
    let table = segmirror(["status", "--catalog", &catalog]);
    table.expect_code(0).expect_stdout("node 2 @4");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("link stopped cleanly"), "{log}");
}

#[test]
fn cluster_mode_refuses_pull_on_both_sides_with_exit_2() {
    let root = tempfile::tempdir().unwrap();
    let mirror = root.path().join("m").display().to_string();
    let pull = segmirror([
        "apply",
        "--mirror",
        &mirror,
        "--link",
        LINK,
        "--connect",
        "127.0.0.1:1",
        "--plaintext",
        "--cluster",
    ]);
    pull.expect_code(2);
    assert!(
        pull.stderr.contains("--cluster") && pull.stderr.contains("--connect"),
        "{pull}"
    );
    assert!(!root.path().join("m").exists(), "refused before the mirror is touched");
    // The same from a config file: `cluster` is a key of the tail applier.
    let config = root.path().join("apply.toml");
    std::fs::write(
        &config,
        format!("mirror = \"m\"\nlink = \"{LINK}\"\nconnect = \"127.0.0.1:1\"\nplaintext = true\ncluster = true\n"),
    )
    .unwrap();
    let from_file = segmirror(["apply", "--config", &config.display().to_string()]);
    from_file.expect_code(2);
    assert!(from_file.stderr.contains("--cluster"), "{from_file}");
    // A cluster shipper listening could only be dialled by an applier that serves one shipper: refused too.
    let ship = segmirror([
        "ship",
        "--log-dir",
        &root.path().display().to_string(),
        "--link",
        LINK,
        "--listen",
        "127.0.0.1:0",
        "--plaintext",
        "--cluster",
        "--source-bootstrap",
        "127.0.0.1:1",
    ]);
    ship.expect_code(2);
    assert!(
        ship.stderr.contains("--cluster") && ship.stderr.contains("--listen"),
        "{ship}"
    );
}

/// `segmirror link ARGS --catalog` for the mirror's catalog, expected to exit 0.
fn link_cli(mirror: &Path, args: &[&str]) {
    let catalog = catalog_of(mirror).display().to_string();
    let mut all = vec!["link", "--catalog", catalog.as_str()];
    all.extend_from_slice(args);
    segmirror(all).expect_code(0);
}

#[test]
fn a_cluster_applier_follows_its_link_record_while_running() {
    let root = tempfile::tempdir().unwrap();
    let mirror = root.path().join("mirror");
    let mut applier = Service::start("apply --cluster", &cluster_apply_args(&mirror));
    let addr = applier.bound();
    applier.wait_for("serving the shippers of a source cluster");
    let orders = PartitionRef {
        topic: "orders".into(),
        partition: 0,
        topic_id: [7; 16],
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut one = shipper(&addr, Some(1)).await.expect("node 1 is served");
        assert_eq!(
            claim(&mut one, &orders, 3).await,
            ClaimVerdict::Granted { durable: None }
        );
        // Paused while running: every session ends with a Goodbye.
        link_cli(&mirror, &["pause", LINK]);
        match next_frame(&mut one).await {
            Frame::Goodbye(_) => {}
            other => panic!("a paused link's session ends with Goodbye, got {other:?}"),
        }
    });
    applier.wait_for("link \"dr\" is paused");
    // Resumed: served again on the same port, the claim recorded before the pause still holds.
    link_cli(&mirror, &["resume", LINK]);
    applier.wait_for("link \"dr\" resumed");
    rt.block_on(async {
        let mut two = shipper(&addr, Some(2)).await.expect("served again after resume");
        assert_eq!(
            claim(&mut two, &orders, 3).await,
            ClaimVerdict::Refused {
                holder_node: 1,
                holder_epoch: 3
            },
            "the grant made before the pause is the mirror's record"
        );
    });
    // Deleted while running: the expected end of a link, said in one line naming the state (exit 0).
    link_cli(&mirror, &["delete", LINK]);
    let started = std::time::Instant::now();
    while applier.running() {
        assert!(
            started.elapsed() < PATIENCE,
            "still running after delete:\n{}",
            applier.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let code = applier.child.wait().unwrap().code();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let log = applier.log();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("is deleted"), "{log}");
}
