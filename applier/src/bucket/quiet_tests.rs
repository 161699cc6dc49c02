use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use segment_format::partition_metadata::Uuid;
use segmirror_transport::ObjectInfo;

use super::{QuietPartitions, Tp};
use crate::bucket::read::PartitionObjects;
use crate::report::{PartitionOutcome, PartitionReport, SkipReason};

fn objects(e_tag: &str) -> PartitionObjects {
    let mut p = PartitionObjects::default();
    p.lineages.entry(Uuid([7; 16])).or_default().manifests.insert(
        0,
        ObjectInfo {
            key: "l/orders/0/manifest".into(),
            size: 100,
            last_modified_ms: 1,
            e_tag: Some(e_tag.into()),
        },
    );
    p
}

fn listing(tags: &[(i32, &str)]) -> BTreeMap<Tp, PartitionObjects> {
    tags.iter()
        .map(|(p, tag)| (("orders".to_string(), *p), objects(tag)))
        .collect()
}

fn report(partition: i32, outcome: PartitionOutcome) -> PartitionReport {
    let mut r = PartitionReport::new("orders", partition);
    r.outcome = outcome;
    r
}

fn looked_at(split: &super::Split) -> Vec<i32> {
    split.changed.keys().map(|(_, p)| *p).collect()
}

#[test]
fn only_complete_partitions_listed_the_same_are_passed_over() {
    let mut quiet = QuietPartitions::with_interval(Duration::from_secs(3600));
    let t0 = Instant::now();
    let first = quiet.split(listing(&[(0, "a"), (1, "a"), (2, "a")]), t0);
    assert_eq!(looked_at(&first), [0, 1, 2]);
    assert_eq!(first.skipped, 0);
    quiet.remember(
        &[
            report(0, PartitionOutcome::Complete),
            report(1, PartitionOutcome::Complete),
            report(
                2,
                PartitionOutcome::Skipped {
                    reason: SkipReason::Paused,
                },
            ),
        ],
        first.listed,
    );
    // Partition 1's manifest changed (another entity tag); 2 was not complete; 3 is new.
    let second = quiet.split(listing(&[(0, "a"), (1, "b"), (2, "a"), (3, "a")]), t0);
    assert_eq!(looked_at(&second), [1, 2, 3]);
    assert_eq!(second.skipped, 1);
    quiet.remember(
        &[
            report(1, PartitionOutcome::Failed { error: "disk".into() }),
            report(3, PartitionOutcome::Complete),
        ],
        second.listed,
    );
    // A failed partition is looked at again; partition 0 stays passed over; one no longer listed is forgotten.
    let third = quiet.split(listing(&[(1, "b"), (3, "a")]), t0);
    assert_eq!(looked_at(&third), [1]);
    assert_eq!(third.skipped, 1);
    let fourth = quiet.split(listing(&[(0, "a"), (1, "b"), (3, "a")]), t0);
    assert_eq!(
        looked_at(&fourth),
        [0, 1],
        "partition 0 was forgotten when it was not listed"
    );
}

#[test]
fn a_full_run_every_interval_looks_at_everything() {
    let mut quiet = QuietPartitions::with_interval(Duration::from_secs(30));
    let t0 = Instant::now();
    let first = quiet.split(listing(&[(0, "a")]), t0);
    quiet.remember(&[report(0, PartitionOutcome::Complete)], first.listed);
    assert_eq!(
        quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(29)).skipped,
        1
    );
    let full = quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(30));
    assert_eq!((looked_at(&full), full.skipped), (vec![0], 0));
    let listed: HashMap<Tp, PartitionObjects> = full.listed;
    quiet.remember(&[report(0, PartitionOutcome::Complete)], listed);
    assert_eq!(
        quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(31)).skipped,
        1
    );
}

fn before(tag: &str, data_version: i64) -> super::Before {
    super::Before {
        link: "east".into(),
        notice: ObjectInfo {
            key: "east/link@changes.json".into(),
            size: 90,
            last_modified_ms: 1,
            e_tag: Some(tag.into()),
        },
        data_version,
    }
}

#[test]
fn a_run_is_passed_over_only_with_the_same_notice_and_catalog_before_a_full_run_is_due() {
    let mut quiet = QuietPartitions::with_interval(Duration::from_secs(30));
    let t0 = Instant::now();
    // Nothing settled yet: every run lists.
    assert_eq!(quiet.pass_over(&before("a", 1), t0), None);
    let split = quiet.split(listing(&[(0, "a"), (1, "a")]), t0);
    let reports = [
        report(0, PartitionOutcome::Complete),
        report(
            1,
            PartitionOutcome::Waiting {
                base_offset: 5,
                reason: "a gap".into(),
            },
        ),
    ];
    quiet.remember(&reports, split.listed);
    quiet.settle("east", Some(before("a", 1)), &reports, 2);
    assert_eq!(quiet.link(), Some("east"));
    let soon = t0 + Duration::from_secs(1);
    assert_eq!(quiet.pass_over(&before("a", 1), soon), Some(2));
    assert_eq!(quiet.pass_over(&before("b", 1), soon), None, "a new notice");
    assert_eq!(
        quiet.pass_over(&before("a", 2), soon),
        None,
        "another connection committed"
    );
    assert_eq!(
        quiet.pass_over(&before("a", 1), t0 + Duration::from_secs(30)),
        None,
        "a full run is due"
    );
    quiet.unsettle();
    assert_eq!(quiet.pass_over(&before("a", 1), soon), None);
}

#[test]
fn a_failed_or_refused_partition_or_no_notice_leaves_nothing_settled() {
    let t0 = Instant::now();
    let refused = PartitionOutcome::Refused(crate::report::RefusedSegment {
        manifest_key: "k".into(),
        base_offset: 0,
        refusal: crate::report::Refusal::InvalidManifest {
            reason: "forged".into(),
        },
    });
    for outcome in [PartitionOutcome::Failed { error: "disk".into() }, refused] {
        let mut quiet = QuietPartitions::with_interval(Duration::from_secs(30));
        let _ = quiet.split(listing(&[(0, "a")]), t0);
        quiet.settle("east", Some(before("a", 1)), &[report(0, outcome.clone())], 1);
        assert_eq!(quiet.pass_over(&before("a", 1), t0), None, "{outcome:?}");
    }
    let mut quiet = QuietPartitions::with_interval(Duration::from_secs(30));
    let _ = quiet.split(listing(&[(0, "a")]), t0);
    quiet.settle("east", None, &[report(0, PartitionOutcome::Complete)], 1);
    assert_eq!(quiet.pass_over(&before("a", 1), t0), None, "no notice was read");
    assert_eq!(
        quiet.link(),
        Some("east"),
        "the next run reads the notice of the link applied"
    );
}

#[test]
fn full_runs_that_take_long_come_less_often_unless_the_interval_is_fixed() {
    let t0 = Instant::now();
    let mut quiet = QuietPartitions::default();
    assert!(
        quiet.split(listing(&[(0, "a")]), t0).full,
        "the first run is a full one"
    );
    quiet.full_run_took(Duration::from_secs(4));
    assert!(!quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(31)).full);
    assert!(!quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(199)).full);
    assert!(
        quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(200)).full,
        "50 x 4 s"
    );
    // A quick full run: the interval again.
    quiet.full_run_took(Duration::from_millis(10));
    assert!(quiet.split(listing(&[(0, "a")]), t0 + Duration::from_secs(230)).full);

    let mut fixed = QuietPartitions::with_interval(Duration::from_secs(30));
    assert!(fixed.split(listing(&[(0, "a")]), t0).full);
    fixed.full_run_took(Duration::from_secs(4));
    assert!(fixed.split(listing(&[(0, "a")]), t0 + Duration::from_secs(30)).full);
}

#[test]
fn a_full_run_is_expected_to_take_longer_over_more_partitions() {
    // A catch-up's first full run lists few partitions; the next one is due by what it would cost over all of
    // those listed since, not 30 s later.
    let t0 = Instant::now();
    let mut quiet = QuietPartitions::default();
    assert!(quiet.split(listing(&[(0, "a")]), t0).full);
    quiet.full_run_took(Duration::from_millis(100));
    let ten: Vec<(i32, &str)> = (0..10).map(|p| (p, "a")).collect();
    // Over one partition, 50 x 0.1 s is below the interval: due after 30 s. Over ten, 50 x 1 s.
    assert!(!quiet.split(listing(&ten), t0 + Duration::from_secs(31)).full);
    assert!(!quiet.split(listing(&ten), t0 + Duration::from_secs(49)).full);
    assert!(
        quiet.split(listing(&ten), t0 + Duration::from_secs(50)).full,
        "50 x 0.1 s x 10 partitions"
    );
    // Measured again over the same ten (0.2 s, 50 x 0.2 s below 30 s): the interval again.
    quiet.full_run_took(Duration::from_millis(200));
    assert!(!quiet.split(listing(&ten), t0 + Duration::from_secs(79)).full);
    assert!(quiet.split(listing(&ten), t0 + Duration::from_secs(80)).full);
}
