//! Mirrors and promotion from the test side: recording a writer-made mirror in a catalog (so `segmirror promote`
//! accepts it without a bucket), running `segmirror promote`, comparing directories file by file, and reading the
//! leader epoch a broker reports for a partition.
//!
//! Why: the promotion tests need mirrors whose every byte and leader epoch they choose (`segment_format::writer`),
//! and end-to-end tests need to say "byte-identical" about whole directory trees with a useful message when they
//! are not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use segment_format::writer::WrittenPartition;
use segmirror_catalog::{Catalog, LinkSpec, PartitionKey, SegmentVersion, Upsert};

use crate::broker::KafkaBroker;
use crate::segmirror_cli::CliRun;

/// Records `partitions` (written by `segment_format::writer` into a mirror root) as installed mirror partitions of
/// `link` in the catalog at `catalog_path`, each with its source log start offset, the way `segmirror apply` would
/// have recorded them: every segment installed, all sealed but the last.
pub fn record_writer_mirror(
    catalog_path: &Path,
    link: &str,
    source_topic_id: &str,
    partitions: &[(&WrittenPartition, i64)],
) -> Result<()> {
    let mut catalog = Catalog::open(catalog_path)?;
    if catalog.link(link).is_err() {
        catalog.create_link(&LinkSpec {
            name: link.to_string(),
            store_url: "file:///unused-by-promote".to_string(),
            topics_regex: ".*".to_string(),
            groups_regex: None,
        })?;
    }
    for (w, log_start) in partitions {
        let key = PartitionKey::new(link, w.topic.clone(), w.partition);
        let id = match catalog.upsert_partition(&key, source_topic_id, *log_start)? {
            Upsert::Created(p) | Upsert::Existing(p) => p.id,
            Upsert::LineageBreak { .. } => bail!("{key}: recorded with another source topic id"),
        };
        let n = w.segments.len();
        for (i, s) in w.segments.iter().enumerate() {
            let Some(last) = s.last_offset else { continue };
            let next = w.segments.get(i + 1).map_or(w.log_end_offset, |n| n.base_offset);
            let version = SegmentVersion {
                base_offset: s.base_offset,
                next_offset: next,
                last_offset: last,
                size: s.size,
                sha256: [0; 32],
                manifest_key: format!("{link}/{}/{}/writer/{:020}.json", w.topic, w.partition, s.base_offset),
                sealed: i + 1 < n,
            };
            catalog
                .mark_installed(id, source_topic_id, &version)
                .with_context(|| format!("{key}: recording segment {}", s.base_offset))?;
        }
    }
    Ok(())
}

/// `segmirror promote --mirror <mirror> --log-dir <log_dir> --catalog <catalog> <extra...>`.
pub fn segmirror_promote(mirror: &Path, log_dir: &Path, catalog: &Path, extra: &[&str]) -> Result<CliRun> {
    segmirror_promote_env(mirror, log_dir, catalog, extra, &[])
}

/// [`segmirror_promote`] with extra environment variables (e.g. `SEGMIRROR_LOG` for its debug lines).
pub fn segmirror_promote_env(
    mirror: &Path,
    log_dir: &Path,
    catalog: &Path,
    extra: &[&str],
    env: &[(&str, String)],
) -> Result<CliRun> {
    let mut args: Vec<std::ffi::OsString> = vec![
        "promote".into(),
        "--mirror".into(),
        mirror.into(),
        "--log-dir".into(),
        log_dir.into(),
        "--catalog".into(),
        catalog.into(),
    ];
    args.extend(extra.iter().map(Into::into));
    run_segmirror_env(args, env)
}

/// A copy of the SQLite catalog `from` (with its `-wal` and `-shm` files) at `to`; what `to` had of them goes first,
/// so a stale journal of its own is not replayed into the copy.
pub fn copy_catalog(from: &Path, to: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let (src, dst) = (
            PathBuf::from(format!("{}{suffix}", from.display())),
            PathBuf::from(format!("{}{suffix}", to.display())),
        );
        let _ = std::fs::remove_file(&dst);
        if src.exists() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Every regular file under `dir`, by path relative to it.
pub fn files_under(dir: &Path) -> Result<BTreeMap<PathBuf, PathBuf>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                out.insert(path.strip_prefix(root)?.to_path_buf(), path);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// Fails with the first difference unless `a` and `b` hold the same files with the same bytes, considering only
/// relative paths for which `keep` is true.
pub fn assert_same_files(a: &Path, b: &Path, keep: impl Fn(&Path) -> bool) -> Result<usize> {
    let left: BTreeMap<_, _> = files_under(a)?.into_iter().filter(|(rel, _)| keep(rel)).collect();
    let right: BTreeMap<_, _> = files_under(b)?.into_iter().filter(|(rel, _)| keep(rel)).collect();
    let only_left: Vec<_> = left.keys().filter(|k| !right.contains_key(*k)).collect();
    let only_right: Vec<_> = right.keys().filter(|k| !left.contains_key(*k)).collect();
    if !only_left.is_empty() || !only_right.is_empty() {
        bail!(
            "{} vs {}: only in the first: {only_left:?}; only in the second: {only_right:?}",
            a.display(),
            b.display()
        );
    }
    for (rel, path) in &left {
        let x = std::fs::read(path)?;
        let y = std::fs::read(&right[rel])?;
        if x != y {
            let at = x
                .iter()
                .zip(&y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            bail!(
                "{} differs: {} vs {} bytes, first difference at byte {at}",
                rel.display(),
                x.len(),
                y.len()
            );
        }
    }
    Ok(left.len())
}

/// How long [`leader_epoch_from_log`] waits for the current start's leadership line: the broker serves clients
/// ("Kafka Server started") a little before it logs taking leadership of every partition, more so on a loaded
/// machine.
const LEADERSHIP_LOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The leader epoch the broker started leading `topic-partition` in since its latest start, from its state-change
/// log line (`Leader <tp> with topic id ... starts at leader epoch N`); waits for that line (a line of an earlier
/// start would be a stale epoch). `None` if it does not come.
pub fn leader_epoch_from_log(broker: &KafkaBroker, topic: &str, partition: i32) -> Option<i32> {
    let needle = format!("Leader {topic}-{partition} with topic id");
    let deadline = std::time::Instant::now() + LEADERSHIP_LOG_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(broker.log_file()).ok()?;
        let since_start = text
            .rfind(crate::broker::START_MARKER)
            .map_or(text.as_str(), |at| &text[at..]);
        let epoch = since_start
            .lines()
            .rev()
            .find(|l| l.contains(&needle))
            .and_then(|l| l.split("starts at leader epoch ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        if epoch.is_some() || std::time::Instant::now() > deadline {
            return epoch;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs `segmirror <args>` with extra environment variables (e.g. [`crate::s3::MotoServer::env`]).
pub fn run_segmirror_env<I, S>(args: I, env: &[(&str, String)]) -> Result<CliRun>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let exe = crate::segmirror_cli::segmirror_binary()?;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let out = crate::segmirror_cli::segmirror_command()?
        .args(&args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    Ok(CliRun {
        args: args.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
