//! `segmirror demo`: the shortest way to see segmirror work on embedded
//! defaults. It runs the whole batch pipeline in a fresh folder:
//! generate the sample set of Kafka partitions (every codec, transactions,
//! compaction gaps, legacy messages, ...) as a source log dir -> `seed` into a
//! local-folder store -> `apply` into a mirror with a SQLite catalog -> verify
//! the mirror deeply and audit the store, then compare mirror and source byte
//! for byte.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use segment_format::checkpoint::MetaProperties;
use segment_format::dir::META_PROPERTIES_FILE;
use segment_format::verify::{verify_paths_owned_by, Depth, NoProgress, VerifyOptions};
use segment_format::writer::sample::{sample_identity, write_sample, SampleOptions, DEFAULT_NODE_ID};
use segmirror_applier::{apply, ApplyConfig, Verdict};
use segmirror_catalog::Catalog;
use segmirror_shipper::bucket::seed::{seed, SeedConfig};
use segmirror_transport::bucket::audit::{audit_store, AuditOptions};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{Store, StoreUrl};

use crate::cli::report::{print_sample_summary, print_verify_report, verify_exit_code};
use crate::cli::runtime::Runtime;
use crate::cli::EXIT_CORRUPT;

/// Seed of the demo data.
pub const DEMO_SEED: u64 = 0;

#[derive(clap::Args)]
pub struct Args {
    /// Folder for the demo: `source/` (a generated log dir), `store/` (the local bucket folder), `mirror/`
    /// (the mirror partitions) and `catalog.sqlite`. Recreated on every run; an existing non-empty folder is only
    /// replaced if an earlier demo wrote it.
    #[arg(long, value_name = "DIR", default_value = "target/segmirror-demo")]
    dir: PathBuf,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    prepare(&args.dir)?;
    let source = args.dir.join(SOURCE_DIR);
    let store_dir = args.dir.join("store");
    let mirror = args.dir.join("mirror");
    let started = Instant::now();
    let options = SampleOptions {
        seed: DEMO_SEED,
        ..SampleOptions::default()
    };
    let manifest = write_sample(&source, &options).context("generating the sample partitions")?;
    print_sample_summary(&manifest, started.elapsed().as_secs_f64());

    let store_url = store_dir.display().to_string();
    let store = Store::open(&StoreUrl::parse(&store_url)?, &Default::default())?;
    println!();
    println!("seeding {} -> {}", source.display(), store_dir.display());
    let seed_config = SeedConfig::new(vec![source.clone()], DEMO_LINK)?;
    let seeded = runtime.block_on(seed(&store, &seed_config, &segmirror_shipper::bucket::seed::NoProgress))??;
    println!(
        "  {} segment(s) of {} partition(s), {} bytes uploaded",
        seeded.segments_shipped(),
        seeded.partitions.len(),
        seeded.bytes_uploaded()
    );
    if !seeded.is_complete() {
        bail!("seeding did not complete: {seeded:?}");
    }

    println!("applying {} -> {}", store_dir.display(), mirror.display());
    let catalog = Catalog::open(args.dir.join("catalog.sqlite"))?;
    let apply_config = ApplyConfig::new(store.clone(), store_url, &mirror).with_link(DEMO_LINK);
    let applied = runtime.block_on(apply(&apply_config, catalog, &segmirror_applier::NoProgress))??;
    println!(
        "  {} segment(s) installed, {} bytes fetched",
        applied.segments_installed(),
        applied.bytes_fetched()
    );
    if applied.verdict() != Verdict::Ok {
        bail!("applying did not complete: {applied:?}");
    }

    println!();
    println!(
        "verifying the mirror {} (deep: every record of every batch)",
        mirror.display()
    );
    // A mirror root: segmirror's own entries in it (the apply lock, state directories) are set aside as
    // `segmirror verify MIRROR` sets them aside.
    let report = verify_paths_owned_by(
        std::slice::from_ref(&mirror),
        &VerifyOptions {
            depth: Depth::Deep,
            ..VerifyOptions::default()
        },
        &NoProgress,
        segmirror_applier::MIRROR_ROOT_ENTRIES,
    );
    print_verify_report(&report);
    let audit = runtime.block_on(audit_store(&store, &KeyPrefix::root(), &AuditOptions::default()))??;
    println!(
        "store audit: {} object(s), {} bytes, {} error(s), {} warning(s)",
        audit.objects,
        audit.bytes,
        audit.errors(),
        audit.warnings()
    );
    let different = compare_trees(&source, &mirror)?;
    for d in &different {
        println!("differs from the source: {d}");
    }
    println!(
        "mirror vs source: {} segment file(s) compared, {}",
        count_segment_files(&mirror)?,
        if different.is_empty() {
            "byte-identical"
        } else {
            "DIFFERENT"
        }
    );
    if !audit.is_sound() || !different.is_empty() {
        return Ok(ExitCode::from(EXIT_CORRUPT));
    }
    Ok(verify_exit_code(&report))
}

/// Segment files (`.log`, indexes, snapshots shipped with a segment) of every mirror partition that differ
/// from the same file in the source log dir.
fn compare_trees(source: &Path, mirror: &Path) -> anyhow::Result<Vec<String>> {
    let mut different = Vec::new();
    for partition in std::fs::read_dir(mirror)? {
        let partition = partition?.path();
        if !partition.is_dir()
            || partition
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        for file in std::fs::read_dir(&partition)? {
            let file = file?.path();
            let name = file.file_name().unwrap_or_default().to_owned();
            let Some(partition_name) = partition.file_name() else {
                continue;
            };
            let twin = source.join(partition_name).join(&name);
            if std::fs::read(&file)? != std::fs::read(&twin).unwrap_or_default() {
                different.push(file.display().to_string());
            }
        }
    }
    Ok(different)
}

fn count_segment_files(mirror: &Path) -> anyhow::Result<usize> {
    let mut n = 0;
    for partition in std::fs::read_dir(mirror)? {
        let partition = partition?.path();
        if partition.is_dir()
            && !partition
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            n += std::fs::read_dir(&partition)?.count();
        }
    }
    Ok(n)
}

/// The source log dir inside the demo folder.
const SOURCE_DIR: &str = "source";
/// The link name of the demo.
const DEMO_LINK: &str = "demo";

/// Make `dir` an empty folder, refusing to delete anything a demo did not write:
/// a non-empty folder is removed only if its `meta.properties` carries the
/// demo's cluster id.
fn prepare(dir: &Path) -> anyhow::Result<()> {
    let non_empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if non_empty {
        let demo_cluster = sample_identity(DEMO_SEED, DEFAULT_NODE_ID).cluster_id;
        let ours = MetaProperties::read(&dir.join(SOURCE_DIR).join(META_PROPERTIES_FILE))
            .ok()
            .and_then(|m| m.cluster_id)
            .is_some_and(|c| c == demo_cluster);
        if !ours {
            bail!(
                "{} is not empty and was not written by `segmirror demo`; choose another --dir",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("removing the previous demo in {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_replaces_its_own_output_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("demo");
        prepare(&dir).unwrap();
        write_sample(
            &dir.join(SOURCE_DIR),
            &SampleOptions {
                seed: DEMO_SEED,
                fsync: false,
                ..SampleOptions::default()
            },
        )
        .unwrap();
        prepare(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

        std::fs::write(dir.join("precious"), b"x").unwrap();
        assert!(prepare(&dir).is_err());
        assert!(dir.join("precious").exists());
    }
}
