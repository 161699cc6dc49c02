//! Source truncation by a real unclean leader election, in `--upto log-end` mode.
//!
//! A 3-broker KRaft cluster (`unclean.leader.election.enable=true`); the topic's one partition is replicated on
//! brokers A=1 and B=2 only, with `min.insync.replicas=1` (broker 3 is a bystander; the cluster's controller is a
//! node of its own, so it elects leaders while A and B are both down). ONE plain `segmirror ship --upto log-end`
//! runs on A's log dir (it ships A's replica whatever A's role) and one `segmirror apply --listen` writes the
//! mirror.
//!
//! Segments are small ([`SEGMENT_BYTES`]): P fills most of the first one and X crosses A's first roll, so the
//! truncation reaches *below the last roll*: Kafka's `truncateTo` deletes A's second segment and makes the first one
//! active again, and the mirror must do the same with a segment it had sealed (a cut below the last roll).
//!
//! 1. `P` records with `acks=all`: A and B hold them.
//! 2. B is killed; the ISR shrinks to {A}; `X` records with `acks=1` go to A only (its first segment rolls among
//!    them), and the mirror gets them (log-end mode ships what is not committed). A's segments are copied.
//! 3. A is killed. B restarts: not in the ISR, it becomes leader only by an unclean election. `Y` records go to B,
//!    from offset `P` on (the X offsets are reused by other records).
//! 4. A restarts and follows B: it truncates X away (`OffsetsForLeaderEpoch` / the fetch's diverging epoch) and
//!    fetches Y. The shipper keeps running across A's kill and restart (the path a shipper beside a crashing broker
//!    takes): it sees A's log shrink or change, ends the session, and the next Resume's epoch comparison sends a
//!    Truncate to `P`.
//!
//! Then: the mirror's segments equal A's byte for byte (A's batches equal B's), `verify --strict` finds it sound, the
//! archive holds exactly the X batches A held (parsed, with their offsets and epoch: the first segment's tail, then
//! its second segment whole), the catalog and `segmirror status` show the range `[P, P+X)`, and promotion into a
//! stopped target broker gives consumers exactly the P+Y records at the source's offsets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segmirror_applier::direct::{archive_path, ArchivedRange, RemovedSegment};
use segmirror_catalog::{Catalog, TruncationKind};
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::{run_segmirror, segmirror_verify};
use segmirror_tests::service::Service;
use segmirror_tests::unclean::{create_topic_on, wait_partition};
use segmirror_tests::*;

const TOPIC: &str = "unclean";
const LINK: &str = "dr";
/// The replicas: A leads first (the preferred leader), B takes over uncleanly.
const A: i32 = 1;
const B: i32 = 2;
/// Records committed on both replicas, written to A alone, and written to B after the unclean election. Tiny: a
/// few batches each, one segment.
const P: usize = 30;
const X: usize = 20;
const Y: usize = 35;
const VALUE_BYTES: usize = 120;
/// The topic's segment size (`internal.segment.bytes`): P takes about 4.3 KiB, X about 2.9 KiB in batches of at
/// most ~1.1 KiB, so the first segment takes P and X's first batch or two, and rolls among X.
const SEGMENT_BYTES: u64 = 6000;
/// Failure guard for anything waited for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

fn send(cluster: &mut KafkaCluster, tag: &str, n: usize, acks: &str) -> Vec<Record> {
    let records = (0..n)
        .map(|i| OutRecord {
            partition: Some(0),
            key: Some(format!("{tag}-{i}").into_bytes()),
            value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
            ..OutRecord::default()
        })
        .collect();
    // Several small batches per step: the archive and the cut are about batches, not one big one.
    let plan = ProducePlan::new(TOPIC)
        .config("acks", acks)
        .config("enable.idempotence", "false")
        .config("linger.ms", 1)
        .config("batch.size", 1024)
        .step(ProduceStep::Send(records));
    python_produce(&cluster.bootstrap(), &plan).unwrap()
}

/// Every `.log` of a partition directory: (base offset, bytes), in offset order.
fn segments(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut out: Vec<(i64, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let path = e.ok()?.path();
                let base = path.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok()?;
                Some((base, std::fs::read(&path).ok()?))
            })
            .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A replica's batches: its segments' bytes concatenated (replicas holding the same batches give the same bytes
/// wherever each rolled).
fn batches(dir: &Path) -> Vec<u8> {
    segments(dir).into_iter().flat_map(|(_, b)| b).collect()
}

/// Waits until the mirror's segments equal the source's byte for byte, both services still running.
fn wait_mirror(mirror: &Path, source: &Path, ship: &mut Service, apply: &mut Service) {
    let start = Instant::now();
    let sizes = |segs: Vec<(i64, Vec<u8>)>| segs.into_iter().map(|(b, v)| (b, v.len())).collect::<Vec<_>>();
    loop {
        ship.assert_running();
        apply.assert_running();
        let want = segments(source);
        if !want.is_empty() && segments(mirror) == want {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the mirror {:?} never equalled the source {:?}\n--- ship ---\n{}\n--- apply ---\n{}",
            sizes(segments(mirror)),
            sizes(want),
            ship.log(),
            apply.log()
        );
        std::thread::sleep(POLL);
    }
}

/// (offset, key, value) of a record: what must be identical on source and target.
type RecordIdentity = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Each record's [`RecordIdentity`], in offset order.
fn identity(records: &[Record]) -> Vec<RecordIdentity> {
    let mut out: Vec<_> = records
        .iter()
        .map(|r| (r.offset, r.key.clone(), r.value.clone()))
        .collect();
    out.sort();
    out
}

#[test]
fn an_unclean_election_truncates_the_source_and_the_mirror_follows_with_the_lost_batches_archived() {
    let started = Instant::now();
    let lap = |what: &str| eprintln!("e2e_tail_truncate: {what} at {:.1} s", started.elapsed().as_secs_f64());
    let mut cluster = KafkaCluster::start(ClusterConfig::new("unclean").unclean_leader_election(true)).unwrap();
    lap("cluster started");
    let segment_bytes = cluster.node(A).unwrap().install().segment_bytes_config();
    create_topic_on(
        &mut cluster,
        TOPIC,
        &[vec![A, B]],
        &[
            ("min.insync.replicas", "1".to_string()),
            (segment_bytes, SEGMENT_BYTES.to_string()),
        ],
    )
    .unwrap();
    wait_partition(&mut cluster, TOPIC, 0, "led by A with B in sync", |s| {
        s.leader == A && s.isr.contains(&B)
    })
    .unwrap();
    let a_dir = cluster.node(A).unwrap().partition_dir(TOPIC, 0);
    let b_dir = cluster.node(B).unwrap().partition_dir(TOPIC, 0);
    let a_log_dir = cluster.node(A).unwrap().log_dir().to_path_buf();

    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));
    let mirror_dir = mirror.join(format!("{TOPIC}-0"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut apply = Service::start(
        "apply --listen",
        [
            "apply",
            "--mirror",
            &s(&mirror),
            "--catalog",
            &s(&catalog),
            "--link",
            LINK,
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    let addr = apply.wait_for("listening on ").trim().to_string();
    // Plain mode, not --cluster: it ships A's replica whatever A's role, and keeps running across A's restart.
    let mut ship = Service::start(
        "ship",
        [
            "ship",
            "--log-dir",
            &s(&a_log_dir),
            "--topics",
            TOPIC,
            "--link",
            LINK,
            "--upto",
            "log-end",
            "--connect",
            &addr,
            "--plaintext",
        ],
    )
    .patience(PATIENCE);

    lap("topic and services up");
    // 1. P records on both replicas.
    let committed = send(&mut cluster, "p", P, "all");
    assert_eq!(committed.last().map(|r| r.offset), Some(P as i64 - 1));
    wait_mirror(&mirror_dir, &a_dir, &mut ship, &mut apply);
    assert_eq!(batches(&b_dir), batches(&a_dir), "B holds what A holds");

    lap("phase 1 (P)");
    // 2. B dies; the ISR shrinks to {A}; X records reach A alone, and the mirror.
    cluster.kill(B).unwrap();
    wait_partition(&mut cluster, TOPIC, 0, "ISR {A}", |s| s.leader == A && s.isr == [A]).unwrap();
    let lost = send(&mut cluster, "x", X, "1");
    assert_eq!(
        (lost.first().map(|r| r.offset), lost.last().map(|r| r.offset)),
        (Some(P as i64), Some((P + X) as i64 - 1))
    );
    wait_mirror(&mirror_dir, &a_dir, &mut ship, &mut apply);
    let a_segments = segments(&a_dir);
    assert_eq!(
        a_segments.len(),
        2,
        "X crosses A's first roll: {:?}",
        a_segments.iter().map(|(b, v)| (*b, v.len())).collect::<Vec<_>>()
    );
    let a_before = batches(&a_dir);

    lap("phase 2 (X)");
    // 3. A dies; B comes back outside the ISR and is elected uncleanly; Y records go to B from offset P.
    cluster.kill(A).unwrap();
    cluster.restart(B).unwrap();
    wait_partition(&mut cluster, TOPIC, 0, "led by B (unclean election)", |s| s.leader == B).unwrap();
    let survived = send(&mut cluster, "y", Y, "1");
    assert_eq!(
        survived.first().map(|r| r.offset),
        Some(P as i64),
        "B continues at P: the X offsets are reused"
    );

    lap("phase 3 (unclean election, Y)");
    // 4. A comes back as B's follower and truncates X away; the shipper (still running) makes the mirror follow.
    cluster.restart(A).unwrap();
    let start = Instant::now();
    while batches(&a_dir) != batches(&b_dir) {
        assert!(start.elapsed() < PATIENCE, "A never caught up with B");
        std::thread::sleep(POLL);
    }
    let a_after = batches(&a_dir);
    wait_mirror(&mirror_dir, &a_dir, &mut ship, &mut apply);
    let (code, ship_log) = ship.stop();
    assert_eq!(code, Some(0), "ship:\n{ship_log}");
    let (code, apply_log) = apply.stop();
    assert_eq!(code, Some(0), "apply:\n{apply_log}");
    assert_eq!(
        segments(&mirror_dir),
        segments(&a_dir),
        "the mirror is A's log byte for byte"
    );
    for line in ship_log.lines().chain(apply_log.lines()) {
        if ["diverg", "truncat", "Truncate"].iter().any(|w| line.contains(w)) {
            eprintln!("e2e_tail_truncate: {line}");
        }
    }
    assert!(
        apply_log.contains("mirror truncated; the removed batches are in the archive"),
        "apply:\n{apply_log}"
    );

    lap("phase 4 (A truncated, mirror followed)");
    // The archive: exactly the X batches A held, at their offsets, in the epoch A wrote them.
    let frames: Vec<_> = scan_frames(&a_before, 0).map(|f| f.unwrap().info).collect();
    let cut = frames
        .iter()
        .find(|f| f.base_offset == P as i64)
        .expect("a batch starts at P");
    let x_epoch = cut.partition_leader_epoch;
    assert!(
        cut.position < a_segments[0].1.len() as u64,
        "X's first batch is in A's first segment: the cut lies in a segment the mirror had sealed"
    );
    let rel = archive_path(TOPIC, 0, P as i64, (P + X) as i64);
    let archived = std::fs::read(mirror.join(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}\napply:\n{apply_log}"));
    assert_eq!(
        archived,
        &a_before[cut.position as usize..],
        "the archive holds A's X bytes"
    );
    let archived_frames: Vec<_> = scan_frames(&archived, 0).map(|f| f.unwrap().info).collect();
    assert_eq!(archived_frames.first().map(|f| f.base_offset), Some(P as i64));
    assert_eq!(archived_frames.last().map(|f| f.last_offset + 1), Some((P + X) as i64));
    assert!(archived_frames.len() >= 2, "several batches: {}", archived_frames.len());
    assert!(archived_frames.iter().all(|f| f.partition_leader_epoch == x_epoch));
    let sidecar: ArchivedRange =
        serde_json::from_slice(&std::fs::read(mirror.join(&rel).with_extension("json")).unwrap()).unwrap();
    assert_eq!(
        sidecar.removed_segments,
        vec![RemovedSegment {
            base: a_segments[1].0,
            size: a_segments[1].1.len() as u64
        }],
        "A's second segment archived whole"
    );
    let y_epoch = scan_frames(&a_after, 0)
        .map(|f| f.unwrap().info)
        .find(|f| f.base_offset == P as i64)
        .map(|f| f.partition_leader_epoch);
    assert!(
        y_epoch > Some(x_epoch),
        "Y is in a later epoch: {y_epoch:?} after {x_epoch}"
    );

    // The catalog and `segmirror status` name the range.
    let rows = Catalog::open(&catalog).unwrap().truncations(Some(LINK)).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].kind, TruncationKind::Truncated);
    assert_eq!((rows[0].from_offset, rows[0].to_offset), (P as i64, (P + X) as i64));
    assert_eq!(rows[0].mirror_epoch, x_epoch);
    assert_eq!(rows[0].source_end_offset, P as i64);
    assert_eq!(rows[0].archive_path.as_deref(), Some(rel.as_str()));
    assert_eq!(rows[0].size, Some(archived.len() as u64));
    let status = run_segmirror(["status", "--catalog", &s(&catalog)]).unwrap();
    assert_eq!(status.code, 0, "{status}");
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{TOPIC}-0")) && l.contains("truncated"))
        .unwrap_or_else(|| panic!("no truncation row:\n{status}"));
    assert!(
        line.contains(&format!(" {P} ")) && line.contains(&format!(" {} ", P + X)) && line.contains(&rel),
        "{line}"
    );

    // The stopped mirror is sound (the cut segment's companions rebuilt as an active one's, or sealed again).
    let verify = segmirror_verify(&[mirror_dir.as_path()], &["--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");

    // What the source's consumers read: P then Y, the X records nowhere.
    let source_records = consume_all(&cluster.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(source_records.len(), P + Y);
    let expected: Vec<_> = identity(&committed).into_iter().chain(identity(&survived)).collect();
    assert_eq!(identity(&source_records), expected);
    drop(cluster);

    lap("checks");
    // Promotion into a stopped target: exactly P+Y records at the source's offsets.
    let mut target = KafkaBroker::start(BrokerConfig::new("unclean-target")).unwrap();
    admin(
        &target.bootstrap(),
        &[TopicSpec::new(TOPIC, 1).config("retention.ms", -1)],
        &[],
    )
    .unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(&mirror, target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let promoted: PathBuf = target.partition_dir(TOPIC, 0);
    let verify = segmirror_verify(&[promoted.as_path()], &["--deep", "--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    target.restart().unwrap();
    let consumed = consume_all(&target.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(identity(&consumed), expected, "the target's records");
    target.stop().unwrap();
    lap("promoted and consumed (end)");
}
