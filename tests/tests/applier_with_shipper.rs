//! The real shipper (`segmirror_shipper::bucket::seed`) and the applier agree on the bucket: whatever the shipper commits,
//! the applier installs, byte for byte, and the result verifies sound — for a cleanly shut down source and for a
//! running one (whose active segments the shipper ships with rebuilt, trimmed indexes).

#[path = "../../applier/tests/common/mod.rs"]
mod common;

use common::*;
use segment_format::verify::{verify_paths, Depth, NoProgress as NoVerifyProgress, Strictness, VerifyOptions};
use segment_format::writer::sample::{write_sample, SampleOptions};
use segmirror_applier::{PartitionOutcome, Verdict};
use segmirror_shipper::bucket::seed::{self, SeedConfig};

async fn seed_and_apply(running: bool) {
    let w = World::new();
    let source = w.path("source");
    let sample = write_sample(
        &source,
        &SampleOptions {
            fsync: false,
            running,
            ..SampleOptions::default()
        },
    )
    .unwrap();
    let config = SeedConfig::new(vec![source.clone()], LINK).unwrap();
    let shipped = seed::seed(&w.store, &config, &seed::NoProgress).await.unwrap();
    assert!(!shipped.has_failures() && !shipped.has_refusals(), "{shipped:#?}");

    let report = w.apply_with(w.config().with_deep_validation(true)).await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    assert_eq!(report.segments_installed(), shipped.segments_shipped() as usize);
    for p in &sample.partitions {
        let name = p.written.dir.file_name().unwrap().to_string_lossy().into_owned();
        let r = report.partitions.iter().find(|r| r.name() == name).unwrap();
        assert_eq!(r.outcome, PartitionOutcome::Complete, "{name}");
        let mirror = w.mirror().join(&name);
        let expected = expected_mirror_files(&p.written.dir);
        let actual = tree(&mirror);
        let active = p.written.segments.last().map(|s| s.base_offset).unwrap_or(0);
        for (file, bytes) in &expected {
            // A running broker's active segment has preallocated indexes; the shipper rebuilds them trimmed.
            let rebuilt = running && file.starts_with(&format!("{active:020}.")) && file.ends_with("index");
            if rebuilt {
                assert!(actual.contains_key(file), "{name}/{file} missing");
            } else {
                assert!(actual.get(file) == Some(bytes), "{name}/{file} differs or is missing");
            }
        }
    }
    let dirs: Vec<_> = sample
        .partitions
        .iter()
        .map(|p| w.mirror().join(p.written.dir.file_name().unwrap()))
        .collect();
    let verified = verify_paths(
        &dirs,
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoVerifyProgress,
    );
    assert!(
        verified.is_sound() && verified.io_errors.is_empty(),
        "{:#?}",
        verified.findings
    );

    // A second seed ships nothing new and a second apply installs nothing.
    seed::seed(&w.store, &config, &seed::NoProgress).await.unwrap();
    w.counting.reset();
    let again = w.apply().await;
    assert_eq!(again.segments_installed(), 0, "{again:#?}");
    assert!(w.counting.data_gets().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanly_shut_down_source_is_mirrored_byte_for_byte() {
    seed_and_apply(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_source_is_mirrored_with_rebuilt_active_indexes() {
    seed_and_apply(true).await;
}
