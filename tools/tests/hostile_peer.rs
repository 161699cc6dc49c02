//! A hostile or broken peer against a running `segmirror apply --listen`: after a valid handshake it sends frames
//! a real shipper never would (a batch whose CRC fails, a chunk starting in the middle of nothing, a topic name
//! Kafka refuses, bytes that are no frame at all). Each ends only that peer's session, with a Goodbye naming the
//! cause; the applier process never exits, writes nothing of it, keeps its open files bounded, and the honest
//! `segmirror ship` that connects next mirrors the source byte for byte, which `segmirror verify --strict` finds
//! sound.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::service::{log_files, same_files, wait_until, Service};
use common::{data_batches, write_log_dir, PartitionSpec, SegmentSpec};
use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::frame::Frame;
use segmirror_transport::direct::handshake::{handshake, HandshakeConfig};
use segmirror_transport::direct::payload::{Chunk, ChunkCrcs, PartitionRef, Role};
use tokio::io::AsyncWriteExt;

/// The cluster id `common::write_log_dir` writes into `meta.properties`: the hostile peer claims the source's own
/// cluster, as a peer on the path between the two would.
const CLUSTER_ID: &str = "MkU3OEVBNTcwNTJENDM2Qg";
const KAFKA_INDEX_INTERVAL: u64 = 4096;
const GIVE_UP: Duration = Duration::from_secs(30);

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn source(root: &Path) -> PathBuf {
    let dir = root.join("source");
    let partition = |topic: &str, n: i32| {
        PartitionSpec::new(
            topic,
            n,
            vec![
                SegmentSpec::new(data_batches(0, 20, 3, 0)),
                SegmentSpec::new(data_batches(60, 10, 3, 0)),
            ],
        )
        .index_interval(KAFKA_INDEX_INTERVAL)
    };
    write_log_dir(&dir, &[partition("orders", 0), partition("payments", 1)]);
    dir
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// What a hostile peer sends after the handshake and the applier's first credit.
enum Attack {
    Chunk(Chunk),
    Raw(Vec<u8>),
}

/// Dials `addr`, completes the handshake as a shipper, sends `attack`, and returns the Goodbye message the
/// applier answers with (or, for bytes that are no frame, what the connection's end looked like).
async fn attack(addr: &str, attack: Attack) -> String {
    tokio::time::timeout(GIVE_UP, async {
        // The applier serves one session at a time: until it has noticed the previous attack's end, a new peer
        // is refused Busy after its handshake. Dial again until a session is served.
        let mut framed = loop {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let config = HandshakeConfig::new(Role::Shipper, "dr", Some(CLUSTER_ID.to_string()));
            let (mut framed, _session) = handshake(tcp, &config).await.unwrap();
            let served = loop {
                match framed.next().await {
                    Some(Ok(Frame::Credit { .. })) => break true,
                    Some(Ok(Frame::Refuse(r))) => {
                        assert!(r.message.contains("already serves a session"), "refused: {}", r.message);
                        break false;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None => break false,
                }
            };
            if served {
                break framed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match attack {
            Attack::Chunk(c) => framed.send(Frame::Chunk(c)).await.unwrap(),
            Attack::Raw(bytes) => {
                framed.get_mut().write_all(&bytes).await.unwrap();
                framed.get_mut().flush().await.unwrap();
            }
        }
        loop {
            match framed.next().await {
                Some(Ok(Frame::Goodbye(g))) => return g.message,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return format!("connection error: {e}"),
                None => return "closed".to_string(),
            }
        }
    })
    .await
    .expect("the applier never answered")
}

/// The first batches of `orders-0`'s first segment, as the chunk a shipper would send first.
fn first_chunk(source: &Path) -> Chunk {
    let log = source.join("orders-0").join("00000000000000000000.log");
    let bytes = std::fs::read(log).unwrap();
    let frames: Vec<_> = segment_format::log::scan_frames(&bytes, 0)
        .map(|f| f.unwrap())
        .collect();
    let end = (frames[0].info.position + frames[0].info.size) as usize;
    let topic_id = segment_format::partition_metadata::PartitionMetadata::read(
        &source.join("orders-0").join("partition.metadata"),
    )
    .unwrap()
    .topic_id
    .0;
    Chunk {
        partition: PartitionRef {
            topic: "orders".into(),
            partition: 0,
            topic_id,
        },
        segment_base: 0,
        position: 0,
        bytes: Bytes::copy_from_slice(&bytes[..end]),
        crcs: ChunkCrcs::default(),
    }
}

#[test]
fn hostile_frames_end_only_their_session_and_the_honest_shipper_mirrors_the_source() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let catalog = root.path().join("catalog.sqlite");
    let mut applier = Service::start(
        "apply",
        &strings(&[
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            mirror.to_str().unwrap(),
            "--catalog",
            catalog.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
        ]),
    );
    let addr = applier.bound();
    let pid = applier.child.id();
    let files_before = open_files(pid);

    let good = first_chunk(&source);
    let mut corrupt = good.clone();
    let mut v = corrupt.bytes.to_vec();
    let last = v.len() - 1;
    v[last] ^= 0x55;
    corrupt.bytes = Bytes::from(v);
    let mut gap = good.clone();
    gap.position = 61;
    // A name Kafka refuses, which this side's encoder never writes: a placeholder of the same length replaced in
    // the encoded frame (the topic's bytes follow the 6-byte header and their u16 length), the CRC sealed again.
    let mut placeholder = good.clone();
    placeholder.partition.topic = "x".repeat("../../etc".len());
    let mut bad_name = bytes::BytesMut::new();
    segmirror_transport::direct::frame::encode(
        &Frame::Chunk(placeholder),
        segmirror_transport::direct::frame::MAX_PAYLOAD_LEN,
        &mut bad_name,
    )
    .unwrap();
    bad_name[8..8 + 9].copy_from_slice(b"../../etc");
    let n = bad_name.len();
    let crc = crc32c::crc32c(&bad_name[..n - 4]);
    bad_name[n - 4..].copy_from_slice(&crc.to_be_bytes());
    // A frame header announcing a payload over the protocol's maximum, then nothing.
    let oversized = vec![4u8, 0, 0xff, 0xff, 0xff, 0xff];
    let attacks = [
        ("CRC stored", Attack::Chunk(corrupt)),
        ("must start at 0", Attack::Chunk(gap)),
        // Refused by the frame decoder: the connection closes at that frame, without a Goodbye.
        ("", Attack::Raw(bad_name.to_vec())),
        ("", Attack::Raw(oversized)),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..3 {
        for (cause, a) in &attacks {
            let a = match a {
                Attack::Chunk(c) => Attack::Chunk(c.clone()),
                Attack::Raw(b) => Attack::Raw(b.clone()),
            };
            let told = rt.block_on(attack(&addr, a));
            assert!(told.contains(cause), "round {round}: expected {cause:?}, told {told:?}");
            assert!(applier.running(), "the applier exited:\n{}", applier.log());
        }
    }
    assert!(
        log_files(&mirror, &mirror).is_empty(),
        "something of the attacks was written"
    );

    // The honest shipper, next.
    let mut shipper = Service::start(
        "ship",
        &strings(&[
            "ship",
            "--log-dir",
            source.to_str().unwrap(),
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--connect",
            &addr,
            "--plaintext",
        ]),
    );
    let files = log_files(&source, &source);
    assert!(files.len() >= 4);
    wait_until("the mirror caught up", &mut [&mut applier, &mut shipper], || {
        same_files(&source, &mirror, &files)
    });
    // Bounded: a dozen sessions came and went, the descriptors they used were released.
    let files_after = open_files(pid);
    assert!(
        files_after <= files_before + 16,
        "open files grew from {files_before} to {files_after}"
    );
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{log}");
    let verify = std::process::Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .args(["verify", "--strict", mirror.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "verify --strict of the mirror:\n{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
