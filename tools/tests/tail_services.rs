//! `segmirror ship` and `segmirror tail-apply` as processes: a source log dir streamed into a mirror over a real
//! TCP link (plaintext and mutual TLS, push and pull), appends arriving while both run, a clean exit 0 on SIGTERM,
//! a plaintext shipper refused by a TLS applier without either crashing, and the flag rules (exit 2).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::service::{log_files, same_files, wait_until, Service, PATIENCE};
use common::{data_batches, segmirror, write_log_dir, PartitionSpec, SegmentSpec};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// Kafka's default `index.interval.bytes`: the mirror rebuilds a sealed segment's indexes with it and the seal
/// compares them with the source's, so the fixture's indexes are built as a default broker builds them.
const KAFKA_INDEX_INTERVAL: u64 = 4096;

/// A source log dir: two partitions, each with a sealed segment and an active one.
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

/// Every `.log` of the source, relative to the log dir.
fn logs(log_dir: &Path) -> Vec<PathBuf> {
    log_files(log_dir, log_dir)
}

/// Waits until every source `.log` is in the mirror with the same bytes.
fn wait_mirrored(source: &Path, mirror: &Path, services: &mut [&mut Service]) {
    let files = logs(source);
    assert!(files.len() >= 4);
    wait_until("the mirror caught up", services, || same_files(source, mirror, &files));
}

/// Appends `bytes` in place, as a broker does (`common::append` rewrites the file, which a tailing shipper rightly
/// sees as a truncation).
fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// Appends two batches to each partition's active segment.
fn append_more(source: &Path) {
    for (topic, next) in [("orders-0", 90), ("payments-1", 90)] {
        let log = source.join(topic).join("00000000000000000060.log");
        for batch in data_batches(next, 2, 4, 0) {
            append(&log, &batch);
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

struct Certs {
    shipper: Vec<String>,
    applier: Vec<String>,
}

/// A CA and one leaf per side (both for `localhost`), as `--tls-*` flags.
fn certs(dir: &Path) -> Certs {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "segmirror test CA");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, issuer.pem()).unwrap();
    let leaf = |name: &str| {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        vec![
            "--tls-cert".to_string(),
            c.display().to_string(),
            "--tls-key".to_string(),
            k.display().to_string(),
            "--tls-ca".to_string(),
            ca.display().to_string(),
        ]
    };
    Certs {
        shipper: leaf("shipper"),
        applier: leaf("applier"),
    }
}

fn ship_args(source: &Path, direction: &[&str], security: &[String]) -> Vec<String> {
    let mut args = strings(&[
        "ship",
        "--log-dir",
        &source.display().to_string(),
        "--link",
        "dr",
        "--upto",
        "log-end",
    ]);
    args.extend(strings(direction));
    args.extend(security.iter().cloned());
    args
}

/// The catalog a test's `tail-apply` records in: beside the mirror, never in the user's data directory.
fn catalog_of(mirror: &Path) -> PathBuf {
    mirror.with_extension("catalog.sqlite")
}

fn apply_args(mirror: &Path, direction: &[&str], security: &[String]) -> Vec<String> {
    let catalog = catalog_of(mirror).display().to_string();
    let mut args = strings(&[
        "tail-apply",
        "--mirror",
        &mirror.display().to_string(),
        "--link",
        "dr",
        "--catalog",
        &catalog,
    ]);
    args.extend(strings(direction));
    args.extend(security.iter().cloned());
    args
}

fn assert_clean_exit(service: Service) {
    let name = service.name;
    let (code, log) = service.stop();
    assert_eq!(code, Some(0), "{name} did not exit 0 on SIGTERM:\n{log}");
    assert!(log.contains("link stopped cleanly"), "{name}:\n{log}");
}

/// Push (tail-apply listens, ship dials) or pull (ship listens, tail-apply dials); mirrors, appends, stops.
fn mirror_round_trip(push: bool, tls: bool) {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let (ship_sec, apply_sec, server_name) = if tls {
        let c = certs(root.path());
        (
            c.shipper,
            c.applier,
            vec!["--tls-server-name".to_string(), "localhost".to_string()],
        )
    } else {
        (strings(&["--plaintext"]), strings(&["--plaintext"]), Vec::new())
    };
    let (mut applier, mut shipper);
    if push {
        applier = Service::start(
            "tail-apply",
            &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &apply_sec),
        );
        let addr = applier.bound();
        let sec: Vec<String> = ship_sec.iter().chain(&server_name).cloned().collect();
        shipper = Service::start("ship", &ship_args(&source, &["--connect", &addr], &sec));
    } else {
        shipper = Service::start("ship", &ship_args(&source, &["--listen", "127.0.0.1:0"], &ship_sec));
        let addr = shipper.bound();
        let sec: Vec<String> = apply_sec.iter().chain(&server_name).cloned().collect();
        applier = Service::start("tail-apply", &apply_args(&mirror, &["--connect", &addr], &sec));
    }
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);
    shipper.wait_for("connected: session started");
    applier.wait_for("connected: session started");

    append_more(&source);
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);

    // The shipper first: in push mode it is the dialler (its session ends on the signal), in pull mode the listener
    // with a session running; the applier then stops with no session (push) or from its reconnect loop (pull).
    assert_clean_exit(shipper);
    assert_clean_exit(applier);
}

#[test]
fn plaintext_push_mirrors_the_source_and_its_appends_then_stops_cleanly() {
    mirror_round_trip(true, false);
}

#[test]
fn mutual_tls_push_mirrors_the_source_and_its_appends_then_stops_cleanly() {
    mirror_round_trip(true, true);
}

#[test]
fn mutual_tls_pull_mirrors_the_source_and_its_appends_then_stops_cleanly() {
    mirror_round_trip(false, true);
}

#[test]
fn plaintext_pull_mirrors_the_source_and_its_appends_then_stops_cleanly() {
    mirror_round_trip(false, false);
}

#[test]
fn a_plaintext_shipper_is_refused_by_a_tls_applier_and_neither_crashes() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let c = certs(root.path());
    let mut applier = Service::start(
        "tail-apply",
        &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &c.applier),
    );
    let addr = applier.bound();
    let mut shipper = Service::start(
        "ship",
        &ship_args(&source, &["--connect", &addr], &strings(&["--plaintext"])),
    );
    // The shipper sees a TLS peer and pauses (no reconnect storm); the applier logs the failed handshake.
    let refusal = shipper.wait_for("refused: ");
    assert!(refusal.contains("TLS") && refusal.contains("paused for"), "{refusal}");
    applier.wait_for("connect failed");
    // Still paused, not retrying: exactly one refusal line.
    assert_eq!(shipper.log().matches("refused: ").count(), 1, "{}", shipper.log());
    assert!(shipper.running(), "ship exited:\n{}", shipper.log());
    assert!(applier.running(), "tail-apply exited:\n{}", applier.log());
    assert!(!shipper.log().contains("session started"), "{}", shipper.log());
    assert!(logs(&mirror).is_empty() || !mirror.exists());
    assert_clean_exit(shipper);
    assert_clean_exit(applier);
}

#[test]
fn security_flags_are_exactly_one_of_plaintext_and_tls() {
    let root = tempfile::tempdir().unwrap();
    let mirror = root.path().join("m").display().to_string();
    let base = [
        "tail-apply",
        "--mirror",
        &mirror,
        "--link",
        "dr",
        "--listen",
        "127.0.0.1:0",
    ];
    let both =
        segmirror(
            base.iter()
                .copied()
                .chain(["--plaintext", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "a"]),
        );
    both.expect_code(2);
    assert!(
        both.stderr.contains("--plaintext") && both.stderr.contains("--tls-cert"),
        "{both:?}"
    );
    let neither = segmirror(base);
    neither.expect_code(2);
    assert!(neither.stderr.contains("--plaintext|--tls-cert"), "{neither:?}");
    let cert_only = segmirror(base.iter().copied().chain(["--tls-cert", "c"]));
    cert_only.expect_code(2);
    assert!(cert_only.stderr.contains("--tls-key"), "{cert_only:?}");
    let source = source(root.path()).display().to_string();
    let ship = segmirror(["ship", "--log-dir", &source, "--link", "dr", "--plaintext"]);
    ship.expect_code(2);
    assert!(ship.stderr.contains("--connect"), "{ship:?}");
}

#[test]
fn a_missing_pem_file_exits_2_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let c = certs(root.path());
    let mirror = root.path().join("m");
    let missing = root.path().join("nope.key").display().to_string();
    let mut sec = c.applier.clone();
    sec[3] = missing.clone();
    let run = segmirror(apply_args(&mirror, &["--listen", "127.0.0.1:0"], &sec));
    run.expect_code(2);
    assert!(run.stderr.contains(&missing), "{run:?}");
    let garbage = root.path().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let mut sec = c.shipper.clone();
    sec[5] = garbage.display().to_string();
    let source = source(root.path());
    let run = segmirror(ship_args(&source, &["--connect", "127.0.0.1:1"], &sec));
    run.expect_code(2);
    assert!(run.stderr.contains(&garbage.display().to_string()), "{run:?}");
}

#[test]
fn a_running_tail_apply_holds_the_mirror_against_a_second_one_and_promote() {
    let root = tempfile::tempdir().unwrap();
    let mirror = root.path().join("m");
    let plain = strings(&["--plaintext"]);
    let mut applier = Service::start("tail-apply", &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain));
    applier.bound();
    let holder = format!("pid {}", applier.child.id());
    let second = segmirror(apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain));
    second.expect_code(2);
    assert!(second.stderr.contains(&holder), "{second:?}");
    let target = root.path().join("target");
    std::fs::create_dir_all(&target).unwrap();
    let promote = segmirror([
        "promote".as_ref(),
        "--mirror".as_ref(),
        mirror.as_os_str(),
        "--log-dir".as_ref(),
        target.as_os_str(),
        "--catalog".as_ref(),
        catalog_of(&mirror).as_os_str(),
    ] as [&std::ffi::OsStr; 7]);
    promote.expect_code(2);
    assert!(
        promote.stderr.contains("held by another applier") && promote.stderr.contains(&holder),
        "{promote:?}"
    );
    assert_clean_exit(applier);
    // Released at exit: the next one starts.
    let mut again = Service::start("tail-apply", &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain));
    again.bound();
    assert_clean_exit(again);
}

/// Rewrites the source's replication-offset-checkpoint (the high watermarks `ship` bounds itself by).
fn set_high_watermarks(source: &Path, hws: &[(&str, i32, i64)]) {
    use segment_format::checkpoint::{OffsetCheckpoint, OffsetCheckpointEntry};
    let tmp = source.join("replication-offset-checkpoint.tmp");
    OffsetCheckpoint {
        entries: hws
            .iter()
            .map(|&(topic, partition, offset)| OffsetCheckpointEntry {
                topic: topic.to_string(),
                partition,
                offset,
            })
            .collect(),
    }
    .write(&tmp)
    .unwrap();
    // By rename, as the broker does: the shipper never reads half a file.
    std::fs::rename(
        &tmp,
        source.join(segment_format::dir::REPLICATION_OFFSET_CHECKPOINT_FILE),
    )
    .unwrap();
}

/// Waits until the mirror's `rel` holds exactly `len` bytes, equal to the source's first `len`.
fn wait_prefix(source: &Path, mirror: &Path, rel: &str, len: usize, services: &mut [&mut Service]) {
    let want = std::fs::read(source.join(rel)).unwrap()[..len].to_vec();
    let what = format!("the mirror's {rel} as the source's {len}-byte prefix");
    wait_until(&what, services, || {
        std::fs::read(mirror.join(rel)).ok().as_deref() == Some(&want[..])
    });
}

#[test]
fn by_default_only_records_below_the_high_watermark_are_shipped() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let plain = strings(&["--plaintext"]);
    let mut applier = Service::start("tail-apply", &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain));
    let addr = applier.bound();
    let mut args = ship_args(&source, &["--connect", &addr], &plain);
    let upto = args.iter().position(|a| a == "--upto").unwrap();
    args.drain(upto..upto + 2); // the default: --upto high-watermark
    let mut shipper = Service::start("ship", &args);
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);

    // Two batches appended, the high watermark moved past the first only: the mirror stops at the first.
    let rel = "orders-0/00000000000000000060.log";
    let before = std::fs::metadata(source.join(rel)).unwrap().len() as usize;
    let first = data_batches(90, 1, 4, 0).concat();
    append(&source.join(rel), &first);
    append(&source.join(rel), &data_batches(94, 1, 4, 0).concat());
    set_high_watermarks(&source, &[("orders", 0, 94), ("payments", 1, 90)]);
    wait_prefix(
        &source,
        &mirror,
        rel,
        before + first.len(),
        &mut [&mut applier, &mut shipper],
    );
    // Committed: the rest arrives.
    set_high_watermarks(&source, &[("orders", 0, 98), ("payments", 1, 90)]);
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);
    assert_clean_exit(shipper);
    assert_clean_exit(applier);
}

#[test]
fn a_shipper_of_another_cluster_is_refused_and_its_link_pauses() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let plain = strings(&["--plaintext"]);
    let mut args = apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain);
    args.extend(strings(&["--source-cluster-id", "another-cluster"]));
    let mut applier = Service::start("tail-apply", &args);
    let addr = applier.bound();
    let mut shipper = Service::start("ship", &ship_args(&source, &["--connect", &addr], &plain));
    let refusal = shipper.wait_for("refused: ");
    assert!(refusal.contains("another-cluster"), "{refusal}");
    assert!(shipper.running() && applier.running());
    assert!(logs(&mirror).is_empty());
    assert_clean_exit(shipper);
    assert_clean_exit(applier);
}

/// Without `--source-cluster-id`, the link follows the cluster its first shipper names (recorded in the catalog): a
/// shipper of another cluster that dials later is refused naming both ids, and nothing of it is installed.
#[test]
fn the_link_follows_its_first_shippers_cluster_and_refuses_another() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let intruder = root.path().join("intruder");
    write_log_dir(
        &intruder,
        &[
            PartitionSpec::new("intruder", 0, vec![SegmentSpec::new(data_batches(0, 20, 3, 0))])
                .index_interval(KAFKA_INDEX_INTERVAL),
        ],
    );
    let other_cluster = "T3RoZXJDbHVzdGVySWQwMA";
    segment_format::checkpoint::MetaProperties {
        version: segment_format::checkpoint::MetaPropertiesVersion::V1,
        cluster_id: Some(other_cluster.into()),
        node_id: Some(1),
        directory_id: None,
    }
    .write(&intruder.join(segment_format::dir::META_PROPERTIES_FILE))
    .unwrap();
    let mirror = root.path().join("mirror");
    let plain = strings(&["--plaintext"]);
    let mut applier = Service::start("tail-apply", &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &plain));
    let addr = applier.bound();
    let mut shipper = Service::start("ship", &ship_args(&source, &["--connect", &addr], &plain));
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);
    assert_clean_exit(shipper);

    let mut other = Service::start("ship", &ship_args(&intruder, &["--connect", &addr], &plain));
    let refusal = other.wait_for("refused: ");
    assert!(
        refusal.contains(other_cluster) && refusal.contains("MkU3OEVBNTcwNTJENDM2Qg"),
        "{refusal}"
    );
    assert!(other.running() && applier.running());
    assert!(!mirror.join("intruder-0").exists());
    assert_clean_exit(other);
    assert_clean_exit(applier);
}

/// `segmirror status --json` of a tailed mirror: its `tail` rows by partition name.
fn tail_status(mirror: &Path) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", common::service::test_home())
        .args(["status", "--json", "--catalog"])
        .arg(catalog_of(mirror))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let name = format!("{}-{}", row["topic"].as_str().unwrap(), row["partition"]);
            (name, row.clone())
        })
        .collect()
}

/// Waits until `status` shows every partition as `want` says; returns the rows.
fn wait_status(
    mirror: &Path,
    services: &mut [&mut Service],
    want: impl Fn(&serde_json::Value) -> bool,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let start = Instant::now();
    loop {
        let rows = tail_status(mirror);
        if rows.len() == 2 && rows.values().all(&want) {
            return rows;
        }
        for s in services.iter_mut() {
            assert!(s.running(), "{} exited:\n{}", s.name, s.log());
        }
        assert!(
            start.elapsed() < PATIENCE,
            "status never showed what was expected: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The broker's `replication-offset-checkpoint` of the fixture's two partitions at `hw`, replaced atomically.
fn write_high_watermarks(source: &Path, hw: i64) {
    let tmp = source.join("replication-offset-checkpoint.tmp");
    std::fs::write(&tmp, format!("0\n2\norders 0 {hw}\npayments 1 {hw}\n")).unwrap();
    std::fs::rename(&tmp, source.join("replication-offset-checkpoint")).unwrap();
}

/// `status` shows the tail lag: 0 once caught up; while the source holds records the mirror may not have yet
/// (above the high watermark the shipper is bound to), the exact offsets and bytes behind; still readable with the
/// applier stopped; 0 again once the bound moves.
#[test]
fn status_shows_the_tail_lag_in_offsets_bytes_and_seconds() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    // The fixture's partitions end at offset 90 (sealed 0..60, active 60..90).
    write_high_watermarks(&source, 90);
    let mut applier = Service::start(
        "tail-apply",
        &apply_args(&mirror, &["--listen", "127.0.0.1:0"], &strings(&["--plaintext"])),
    );
    let addr = applier.bound();
    let mut args = ship_args(&source, &["--connect", &addr], &strings(&["--plaintext"]));
    let upto = args.iter().position(|a| a == "log-end").unwrap();
    args[upto] = "high-watermark".to_string();
    let mut shipper = Service::start("ship", &args);
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);

    let caught_up = wait_status(&mirror, &mut [&mut applier, &mut shipper], |r| {
        r["source_log_end_offset"] == 90 && r["installed_end_offset"] == 90
    });
    for (name, row) in &caught_up {
        assert_eq!(row["source_high_watermark"], 90, "{name}: {row}");
        assert_eq!(row["lag_offsets"], 0, "{name}: {row}");
        assert_eq!(row["lag_bytes"], 0, "{name}: {row}");
        assert_eq!(row["lag_seconds"], 0, "{name}: {row}");
        assert_eq!(row["shipped_end_offset"], 90, "{name}: {row}");
    }

    // The source grows beyond its high watermark: the shipper may not ship it, and says how far the source is.
    let active = |topic: &str| source.join(topic).join("00000000000000000060.log");
    let before = std::fs::metadata(active("orders-0")).unwrap().len();
    append_more(&source);
    let grown = std::fs::metadata(active("orders-0")).unwrap().len() - before;
    let behind = wait_status(&mirror, &mut [&mut applier, &mut shipper], |r| {
        r["source_log_end_offset"] == 98
    });
    for (name, row) in &behind {
        assert_eq!(row["installed_end_offset"], 90, "{name}: {row}");
        assert_eq!(row["source_high_watermark"], 90, "{name}: {row}");
        assert_eq!(row["lag_offsets"], 8, "{name}: {row}");
        assert_eq!(row["lag_bytes"], grown, "{name}: {row}");
        assert!(row["lag_seconds"].as_u64().is_some(), "{name}: {row}");
        // The shipper has the records above the bound in view but ships none of them.
        assert_eq!(row["shipped_end_offset"], 90, "{name}: {row}");
    }
    let table = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", common::service::test_home())
        .args(["status", "--catalog"])
        .arg(catalog_of(&mirror))
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("orders-0 "))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // partition, source end, seen ("Ns", "ago"), hw, installed, lag offsets, lag bytes, lag s
    assert_eq!(cells[1], "98", "{table}");
    assert_eq!(&cells[4..8], &["90", "90", "8", &grown.to_string()], "{table}");
    // lag s, then shipped.
    assert_eq!(cells[9], "90", "{table}");

    // With the applier stopped status still reads the last report, and the lag in seconds never goes back.
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
    let stopped = tail_status(&mirror);
    for (name, row) in &stopped {
        assert_eq!(row["lag_offsets"], 8, "{name}: {row}");
        assert!(
            row["lag_seconds"].as_u64() >= behind[name]["lag_seconds"].as_u64(),
            "{name}: {row}"
        );
    }

    // The applier back and the bound moved: everything ships and the lag is 0 again.
    write_high_watermarks(&source, 98);
    let mut applier = Service::start(
        "tail-apply",
        &apply_args(&mirror, &["--listen", &addr], &strings(&["--plaintext"])),
    );
    wait_mirrored(&source, &mirror, &mut [&mut applier, &mut shipper]);
    let again = wait_status(&mirror, &mut [&mut applier, &mut shipper], |r| {
        r["installed_end_offset"] == 98 && r["lag_offsets"] == 0
    });
    for (name, row) in &again {
        assert_eq!(row["source_log_end_offset"], 98, "{name}: {row}");
        assert_eq!(row["lag_bytes"], 0, "{name}: {row}");
        assert_eq!(row["lag_seconds"], 0, "{name}: {row}");
        assert_eq!(row["shipped_end_offset"], 98, "{name}: {row}");
    }
    assert_clean_exit(shipper);
    assert_clean_exit(applier);
}
