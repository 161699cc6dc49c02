//! `segmirror demo`: the shortest way to see segmirror work on embedded
//! defaults — generate the sample set of Kafka partitions (every codec,
//! transactions, compaction gaps, legacy messages, ...) into a fresh folder and
//! verify it deeply, printing the report `segmirror verify` prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use segment_format::checkpoint::MetaProperties;
use segment_format::dir::META_PROPERTIES_FILE;
use segment_format::verify::{verify_paths, NoProgress, VerifyOptions};
use segment_format::writer::sample::{sample_identity, write_sample, SampleOptions, DEFAULT_NODE_ID};

use super::generate::print_summary;
use super::verify::{exit_code, print_text};

/// Seed of the demo data.
pub const DEMO_SEED: u64 = 0;

#[derive(clap::Args)]
pub struct Args {
    /// Folder for the demo log dir. Recreated on every run; an existing non-empty folder is only replaced if an
    /// earlier demo wrote it.
    #[arg(long, value_name = "DIR", default_value = "target/segmirror-demo")]
    dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    prepare(&args.dir)?;
    let started = Instant::now();
    let options = SampleOptions {
        seed: DEMO_SEED,
        ..SampleOptions::default()
    };
    let manifest = write_sample(&args.dir, &options).context("generating the sample partitions")?;
    print_summary(&manifest, started.elapsed().as_secs_f64());
    println!();
    println!("verifying {} (deep: every record of every batch)", args.dir.display());
    let report = verify_paths(
        std::slice::from_ref(&args.dir),
        &VerifyOptions {
            deep: true,
            ..VerifyOptions::default()
        },
        &NoProgress,
    );
    print_text(&report);
    Ok(exit_code(&report))
}

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
        let ours = MetaProperties::read(&dir.join(META_PROPERTIES_FILE))
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
            &dir,
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
