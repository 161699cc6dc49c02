//! Crash safety of `segmirror seed` and `segmirror apply`, end to end: whatever point a kill hits, a rerun
//! finishes the work.
//!
//! Both commands run as child processes of the test and are killed with SIGKILL — no cleanup of any kind runs —
//! at several points: when the first data object appears in the store, after some manifests were committed, when
//! the applier has a file in staging, after it renamed segments into the mirror, and after fixed delays. Each
//! killed run is followed by others (killed again or not), the way an operator (or a supervisor) would restart
//! them, until both complete. The mirror must then be byte-identical to the source partitions (every `.log`, the
//! `.index` of sealed segments, every `.timeindex`, `.txnindex` and segment-base producer snapshot), sound under
//! `segmirror verify --deep --strict`, free of staging leftovers, and the catalog must record every partition
//! installed up to the source's log end offset. A local-folder store keeps it fast; the S3 path is covered by
//! `e2e_promote.rs`.
//!
//! `segmirror promote` gets the same treatment against a broker-shaped target log dir: killed while it stages,
//! builds and swaps partitions, then rerun, it must end exactly where an uninterrupted promotion of the same
//! mirror ends.
//!
//! The source is written by `segment_format::writer` (no broker needed): the sample of every shape (codecs,
//! transactions with aborts and `.txnindex`, idempotent producers, compaction gaps, a raised log start offset,
//! LogAppendTime, legacy messages) in one log dir, and bulk data (tens of MiB, several segments per partition, so
//! that the kills land in the middle of work) in a second.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use segment_format::checkpoint::OffsetCheckpoint;
use segment_format::dir::{LogDir, PartitionDir};
use segment_format::metadata_log;
use segment_format::now_ms;
use segment_format::partition_metadata::Uuid;
use segment_format::writer::sample::{write_bulk, write_sample, BulkOptions, SampleOptions};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_catalog::{Catalog, PartitionState};
use segmirror_tests::mirror::{assert_same_files, copy_catalog, files_under};
use segmirror_tests::segmirror_cli::{segmirror_command, segmirror_verify};

/// When to kill a run.
enum Kill {
    /// Run to completion (a completed run must exit 0).
    Never,
    /// After this long.
    After(Duration),
    /// As soon as the named condition holds.
    When(&'static str, Box<dyn Fn() -> bool>),
}

/// The signal `Child::kill` sends on Linux.
const SIGKILL: i32 = 9;

/// What a run ended as.
#[derive(Debug)]
struct Outcome {
    what: String,
    /// Killed while still running (`false`: it finished before the kill point).
    killed: bool,
    /// Exit code; `None` when the signal ended it.
    code: Option<i32>,
}

fn spawn(args: &[String], log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    segmirror_command()
        .unwrap()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap()
}

/// Runs `segmirror <args>` and kills it (SIGKILL) at `kill`. A run that ends on its own must succeed.
fn run(args: &[String], kill: Kill, work: &Path, n: usize) -> Outcome {
    let log = work.join(format!("run-{n}.log"));
    let mut child = spawn(args, &log);
    let started = Instant::now();
    let limit = Duration::from_secs(300);
    let what = match &kill {
        Kill::Never => "to completion".to_string(),
        Kill::After(d) => format!("killed after {d:?}"),
        Kill::When(name, _) => format!("killed {name}"),
    };
    let killed = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        let fire = match &kill {
            Kill::Never => false,
            Kill::After(d) => started.elapsed() >= *d,
            Kill::When(_, condition) => condition(),
        };
        if fire {
            child.kill().unwrap();
            break true;
        }
        assert!(
            started.elapsed() < limit,
            "segmirror {} ran for {limit:?}",
            args.join(" ")
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    let status = child.wait().unwrap();
    // The run may have ended on its own between the last look and the signal: then it was not killed, and it
    // must have succeeded like any completed run.
    let killed = killed && status.signal() == Some(SIGKILL);
    if !killed {
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            status.success(),
            "segmirror {} ({what}) failed: {status}\n{stderr}",
            args.join(" ")
        );
    }
    Outcome {
        what: format!("{} {what}", args.first().map_or("", String::as_str)),
        killed,
        code: status.code(),
    }
}

/// Files under `dir` whose relative path satisfies `keep` (0 if `dir` does not exist). The command under test
/// creates and removes directories while this walks: one that vanishes between its listing and its reading
/// counts as empty, so the rest is still counted (a failed walk counting nothing made kill points miss).
fn count_files(dir: &Path, keep: impl Fn(&Path) -> bool) -> usize {
    fn walk(root: &Path, dir: &Path, keep: &dyn Fn(&Path) -> bool) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|entry| {
                let path = entry.path();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => walk(root, &path, keep),
                    Ok(_) => usize::from(path.strip_prefix(root).is_ok_and(keep)),
                    Err(_) => 0,
                }
            })
            .sum()
    }
    walk(dir, dir, &keep)
}

fn has_component(rel: &Path, name: &str) -> bool {
    rel.components().any(|c| c.as_os_str() == name)
}

/// A store file the local object store finished writing (it stages puts as `<name>#<n>`).
fn is_object(rel: &Path) -> bool {
    !rel.to_string_lossy().contains('#')
}

/// Files the source holds for a partition that the mirror must hold byte for byte.
fn mirrored_file(rel: &Path, newest_base: i64, segment_bases: &[i64]) -> bool {
    let name = rel.to_string_lossy();
    let base: Option<i64> = name.split('.').next().and_then(|b| b.parse().ok());
    let Some(base) = base else { return false };
    match rel.extension().and_then(|e| e.to_str()) {
        Some("log" | "timeindex" | "txnindex") => true,
        // The active segment's offset index is rebuilt for the shipped prefix; sealed ones are copied.
        Some("index") => base != newest_base,
        // Snapshots travel with the segment whose base offset they carry.
        Some("snapshot") => segment_bases.contains(&base),
        _ => false,
    }
}

#[test]
fn seed_and_apply_killed_at_many_points_leave_a_byte_identical_mirror() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path();
    let (sample_dir, bulk_dir) = (root.join("source-sample"), root.join("source-bulk"));
    let (store, mirror, catalog) = (root.join("store"), root.join("mirror"), root.join("catalog.sqlite"));
    let base_timestamp = now_ms() - 3_600_000;
    write_sample(
        &sample_dir,
        &SampleOptions {
            base_timestamp,
            fsync: false,
            ..SampleOptions::default()
        },
    )
    .unwrap();
    write_bulk(
        &bulk_dir,
        &BulkOptions {
            total_bytes: 192 << 20,
            partitions: 3,
            segment_bytes: 4 << 20,
            fsync: false,
            base_timestamp,
            ..BulkOptions::default()
        },
        &|_| {},
    )
    .unwrap();

    let s = |x: &Path| x.to_string_lossy().into_owned();
    let seed: Vec<String> = [
        "seed",
        "--log-dir",
        &s(&sample_dir),
        "--log-dir",
        &s(&bulk_dir),
        "--store",
        &s(&store),
    ]
    .iter()
    .chain(&["--link", "crash"])
    .map(|a| a.to_string())
    .collect();
    let apply: Vec<String> = [
        "apply",
        "--store",
        &s(&store),
        "--mirror",
        &s(&mirror),
        "--catalog",
        &s(&catalog),
    ]
    .iter()
    .chain(&["--link", "crash"])
    .map(|a| a.to_string())
    .collect();

    let data_objects = {
        let store = store.clone();
        move || count_files(&store, |rel| is_object(rel) && has_component(rel, "data"))
    };
    let manifests = {
        let store = store.clone();
        move || count_files(&store, |rel| is_object(rel) && has_component(rel, "manifests"))
    };
    let staged = {
        let mirror = mirror.clone();
        move || count_files(&mirror.join(".staging"), |_| true)
    };
    let installed_logs = {
        let mirror = mirror.clone();
        move || {
            count_files(&mirror, |rel| {
                !has_component(rel, ".staging") && rel.extension().is_some_and(|e| e == "log")
            })
        }
    };

    let staged_once = {
        let staged = staged.clone();
        move || staged() > 0
    };
    let m = manifests.clone();
    let m2 = manifests.clone();
    let i = installed_logs.clone();
    let i2 = installed_logs.clone();
    let i3 = installed_logs.clone();
    let plan: Vec<(&Vec<String>, Kill)> = vec![
        (
            &seed,
            Kill::When(
                "at the first data object in the store",
                Box::new(move || data_objects() > 0),
            ),
        ),
        (&seed, Kill::When("after 5 manifests", Box::new(move || m() >= 5))),
        // With something to install: right after the first kill the store may hold no manifest yet.
        (&apply, Kill::When("with a file in staging", Box::new(staged_once))),
        (&seed, Kill::After(Duration::from_millis(400))),
        (
            &apply,
            Kill::When("after 3 segments were installed", Box::new(move || i() >= 3)),
        ),
        (&seed, Kill::When("after 40 manifests", Box::new(move || m2() >= 40))),
        (&seed, Kill::Never),
        (
            &apply,
            Kill::When("with a file in staging", Box::new(move || staged() > 0)),
        ),
        (&apply, Kill::After(Duration::from_millis(300))),
        (
            &apply,
            Kill::When("after 25 segments were installed", Box::new(move || i2() >= 25)),
        ),
        // Past the middle of the work: since the applier grew faster, a fixed delay here outlasted the run.
        (
            &apply,
            Kill::When("after 40 segments were installed", Box::new(move || i3() >= 40)),
        ),
        (&apply, Kill::Never),
        // Nothing is left to do: both are no-ops now.
        (&seed, Kill::Never),
        (&apply, Kill::Never),
    ];
    let mut outcomes = Vec::new();
    for (n, (args, kill)) in plan.into_iter().enumerate() {
        outcomes.push(run(args, kill, root, n));
    }
    let interrupted = outcomes.iter().filter(|o| o.killed).count();
    let summary: Vec<String> = outcomes
        .iter()
        .map(|o| {
            format!(
                "{}: {} (exit {:?})",
                o.what,
                if o.killed { "killed" } else { "completed" },
                o.code
            )
        })
        .collect();
    eprintln!("{}", summary.join("\n"));
    assert!(
        interrupted >= 8,
        "most kill points must land while the command runs: {summary:#?}"
    );

    // The mirror: byte-identical to every source partition.
    let mut compared = 0;
    let mut ends = BTreeMap::new();
    for source in [&sample_dir, &bulk_dir] {
        for entry in LogDir::open(source).unwrap().partitions {
            let listing = PartitionDir::open(&entry.path).unwrap();
            let bases: Vec<i64> = listing.segments.iter().map(|s| s.base_offset).collect();
            let newest = *bases.last().unwrap();
            let name = entry.path.file_name().unwrap();
            compared += assert_same_files(&entry.path, &mirror.join(name), |rel| {
                mirrored_file(rel, newest, &bases)
            })
            .unwrap_or_else(|e| panic!("{}: {e:#}", entry.path.display()));
            let last = listing.segments.last().unwrap();
            let batches = segmirror_tests::ondisk::scan_log(&last.log).unwrap();
            let end = batches.last().map_or(last.base_offset, |b| b.info.last_offset + 1);
            ends.insert((entry.name.topic.clone(), entry.name.partition), end);
        }
    }
    assert!(compared > 100, "compared {compared} files");

    // Sound, deep and strict; no leftovers of the interrupted runs.
    let partition_dirs: Vec<PathBuf> = std::fs::read_dir(&mirror)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.ends_with(".staging"))
        .collect();
    let paths: Vec<&Path> = partition_dirs.iter().map(PathBuf::as_path).collect();
    let verify = segmirror_verify(&paths, &["--deep", "--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    assert_eq!(count_files(&mirror.join(".staging"), |_| true), 0, "staging leftovers");
    let stray = count_files(&mirror, |rel| {
        let name = rel.to_string_lossy();
        name.ends_with(".tmp") || name.contains(".staging/")
    });
    assert_eq!(stray, 0, "temporary files left in the mirror");
    // A put killed mid-way leaves the local object store's staging file (`<key>#<n>`): listings skip it and a
    // later put of the same key does not reuse it, so it stays behind as garbage (reported, not fatal).
    let unfinished: Vec<PathBuf> = files_under(&store)
        .unwrap()
        .into_keys()
        .filter(|rel| !is_object(rel))
        .collect();
    for rel in &unfinished {
        let name = rel.to_string_lossy();
        let (_, suffix) = name.rsplit_once('#').unwrap();
        assert!(suffix.parse::<u64>().is_ok(), "unexpected file in the store: {name}");
    }
    eprintln!("unfinished puts left in the store by the kills: {unfinished:?}");

    // The catalog records exactly the source's log end offsets.
    let catalog = Catalog::open(&catalog).unwrap();
    let recorded: BTreeMap<(String, i32), i64> = catalog
        .partitions("crash")
        .unwrap()
        .into_iter()
        .map(|p| ((p.key.topic, p.key.partition), p.installed_end_offset.unwrap_or(-1)))
        .collect();
    assert_eq!(recorded, ends);
}

/// A stopped target broker's log dir, as the broker leaves it after creating every topic of `sources` (same
/// partition counts, topic ids of its own) and leading each partition in epoch 1; no broker needed.
fn write_target_log_dir(dir: &Path, sources: &[&Path]) {
    let mut written = Vec::new();
    let mut ids = BTreeMap::new();
    for source in sources {
        for entry in LogDir::open(source).unwrap().partitions {
            let n = ids.len() as u8 + 1;
            let id = *ids.entry(entry.name.topic.clone()).or_insert(Uuid([n; 16]));
            let config = WriterConfig {
                fsync: false,
                topic_id: Some(id),
                ..WriterConfig::default()
            };
            let mut w = PartitionWriter::create(dir, &entry.name.topic, entry.name.partition, 0, config).unwrap();
            w.become_leader(1);
            written.push(w.close().unwrap());
        }
    }
    let identity = LogDirIdentity {
        cluster_id: Uuid([0xAB; 16]).to_string(),
        node_id: 1,
        directory_id: Uuid([0xCD; 16]),
    };
    write_log_dir_files(dir, &identity, &written, LogDirState::CleanShutdown { broker_epoch: 3 }).unwrap();
    // The broker's metadata log names the same topics (promotion reads their retention there).
    let topics: Vec<metadata_log::encode::TopicSpec<'_>> = ids
        .iter()
        .map(|(name, id)| metadata_log::encode::TopicSpec {
            name,
            id: *id,
            partitions: written.iter().filter(|w| &w.topic == name).count() as i32,
            configs: &[],
        })
        .collect();
    metadata_log::encode::write_metadata_log(dir, &topics).unwrap();
}

/// A file's relative path inside a promotion's staging directory (`.segmirror-promote/<name>`) ends with `suffix`.
fn staged_with_suffix(log_dir: &Path, suffix: &str) -> bool {
    std::fs::read_dir(log_dir.join(".segmirror-promote"))
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(suffix))
        })
        .unwrap_or(false)
}

/// Copies a catalog (with its WAL, if any) so that two promotions can start from the same state.
#[test]
fn promote_killed_at_many_points_ends_like_an_uninterrupted_promotion() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path();
    let (source, store, mirror) = (root.join("source"), root.join("store"), root.join("mirror"));
    let catalog = root.join("catalog.sqlite");
    let base_timestamp = now_ms() - 3_600_000;
    write_bulk(
        &source,
        &BulkOptions {
            total_bytes: 48 << 20,
            // Promotion hands the mirror's files over by rename and makes its staging durable with one syncfs, so a
            // rerun after a kill is quick: many partitions keep each kill point's window (`.ready` partitions waiting
            // for the swap, `.old` ones waiting for removal) wide enough for a poll every 2 ms to land in it.
            partitions: 48,
            segment_bytes: 512 << 10,
            fsync: false,
            base_timestamp,
            ..BulkOptions::default()
        },
        &|_| {},
    )
    .unwrap();
    let s = |x: &Path| x.to_string_lossy().into_owned();
    let seed: Vec<String> = ["seed", "--log-dir", &s(&source), "--store", &s(&store), "--link", "p"]
        .map(String::from)
        .to_vec();
    let apply: Vec<String> = [
        "apply",
        "--store",
        &s(&store),
        "--mirror",
        &s(&mirror),
        "--catalog",
        &s(&catalog),
    ]
    .map(String::from)
    .to_vec();
    run(&seed, Kill::Never, root, 0);
    run(&apply, Kill::Never, root, 1);

    // The reference: an uninterrupted promotion of the same mirror into an identical target.
    let (reference, target) = (root.join("reference"), root.join("target"));
    write_target_log_dir(&reference, &[&source]);
    write_target_log_dir(&target, &[&source]);
    let reference_catalog = root.join("reference.sqlite");
    copy_catalog(&catalog, &reference_catalog);
    let promote = |log_dir: &Path, catalog: &Path| -> Vec<String> {
        [
            "promote",
            "--mirror",
            &s(&mirror),
            "--log-dir",
            &s(log_dir),
            "--catalog",
            &s(catalog),
        ]
        .map(String::from)
        .to_vec()
    };
    run(&promote(&reference, &reference_catalog), Kill::Never, root, 2);

    let args = promote(&target, &catalog);
    let staging = {
        let target = target.clone();
        move || target.join(".segmirror-promote").exists()
    };
    let built = {
        let target = target.clone();
        move || target.join(".segmirror-promote").join("builds-durable").exists()
    };
    let old = {
        let target = target.clone();
        move || staged_with_suffix(&target, ".old")
    };
    let plan = vec![
        Kill::When("when the staging directory appears", Box::new(staging)),
        Kill::When("when every build is durable", Box::new(built)),
        Kill::When("when a partition was swapped", Box::new(old)),
        Kill::After(Duration::from_millis(150)),
        Kill::Never,
        Kill::Never,
    ];
    let mut killed = 0;
    for (n, kill) in plan.into_iter().enumerate() {
        let outcome = run(&args, kill, root, 10 + n);
        eprintln!(
            "{}: {}",
            outcome.what,
            if outcome.killed { "killed" } else { "completed" }
        );
        killed += usize::from(outcome.killed);
    }
    assert!(killed >= 2, "the kills must land while promote runs");

    // Byte for byte what the uninterrupted promotion produced; the root checkpoints by content.
    let checkpoints = [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
    ];
    assert_same_files(&reference, &target, |rel| {
        rel != Path::new(".lock") && !checkpoints.iter().any(|c| rel == Path::new(c))
    })
    .unwrap();
    for name in checkpoints {
        let read = |dir: &Path| {
            let mut entries = OffsetCheckpoint::read(&dir.join(name)).unwrap().entries;
            entries.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            entries
        };
        assert_eq!(read(&target), read(&reference), "{name}");
    }
    let verify = segmirror_verify(&[&target], &["--deep", "--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");

    // The applier leaves promoted partitions alone from now on.
    let contents = |dir: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(dir)
            .unwrap()
            .into_iter()
            .map(|(rel, path)| (rel, std::fs::read(path).unwrap()))
            .collect()
    };
    let mirror_before = contents(&mirror);
    run(&apply, Kill::Never, root, 30);
    assert_eq!(
        contents(&mirror),
        mirror_before,
        "apply must not touch promoted partitions"
    );
    let catalog = Catalog::open(&catalog).unwrap();
    assert!(catalog
        .partitions("p")
        .unwrap()
        .iter()
        .all(|p| p.state == PartitionState::Promoted));
}
