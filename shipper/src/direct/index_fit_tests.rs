//! The index form of a sealed segment written as a broker with a given `index.interval.bytes` writes it.

use std::path::PathBuf;

use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::log::scan_frames;

use super::*;
use crate::direct::tests::batch_at;

const BASE: i64 = 500;

/// A sealed segment of 60 batches with the indexes a broker at `interval` writes; returns (log, index, timeindex).
fn segment(dir: &Path, interval: u64) -> (PathBuf, PathBuf, PathBuf) {
    let mut log = Vec::new();
    let mut offset = BASE;
    for i in 0..60 {
        log.extend(batch_at(offset, 3, i));
        offset += 3;
    }
    let mut offsets = OffsetIndexBuilder::new(BASE, interval);
    let mut times = TimeIndexBuilder::new(BASE, interval);
    for frame in scan_frames(&log, 0) {
        let info = frame.unwrap().info;
        offsets.push(&info).unwrap();
        times.push(&info).unwrap();
    }
    times.seal();
    let paths = (
        dir.join(format!("{BASE:020}.log")),
        dir.join(format!("{BASE:020}.index")),
        dir.join(format!("{BASE:020}.timeindex")),
    );
    std::fs::write(&paths.0, &log).unwrap();
    std::fs::write(&paths.1, offsets.to_bytes()).unwrap();
    std::fs::write(&paths.2, times.to_bytes()).unwrap();
    paths
}

#[test]
fn the_topics_interval_is_read_off_the_brokers_index() {
    for (interval, named) in [(1024, Some(1024)), (65536, Some(65536)), (4096, None)] {
        let dir = tempfile::tempdir().unwrap();
        let (log, index, time) = segment(dir.path(), interval);
        let form = fit(&log, BASE, &index, Some(&time), None).unwrap();
        assert_eq!(form.interval(), named, "interval {interval}: {form:?}");
        assert!(matches!(form, IndexForm::Rebuild(_)));
    }
}

#[test]
fn an_index_no_interval_rebuilds_must_travel_as_the_brokers_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (log, index, time) = segment(dir.path(), 1024);
    // An entry dropped from the middle (as after a restart inside the segment): no interval gives it.
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 24, "too few entries for the test");
    bytes.drain(8..16);
    std::fs::write(&index, &bytes).unwrap();
    assert_eq!(fit(&log, BASE, &index, Some(&time), None).unwrap(), IndexForm::Broker);

    // The offset index fits but the time index is not a rebuild's (a last entry the roll did not write).
    let (log, index, time) = segment(dir.path(), 1024);
    let mut times = std::fs::read(&time).unwrap();
    times.truncate(times.len() - 12);
    std::fs::write(&time, &times).unwrap();
    assert_eq!(fit(&log, BASE, &index, Some(&time), None).unwrap(), IndexForm::Broker);

    // An untrimmed (preallocated) index.
    let (log, index, time) = segment(dir.path(), 1024);
    let mut padded = std::fs::read(&index).unwrap();
    padded.extend([0u8; 80]);
    std::fs::write(&index, &padded).unwrap();
    assert_eq!(fit(&log, BASE, &index, Some(&time), None).unwrap(), IndexForm::Broker);
    assert_eq!(IndexForm::Broker.interval(), None);
}

/// The default rebuild the running digest made settles the form without the log, and only when it is the broker's.
#[test]
fn a_default_rebuild_built_while_shipping_settles_the_form_without_reading_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (log, index, time) = segment(dir.path(), 4096);
    let built = (std::fs::read(&index).unwrap(), std::fs::read(&time).unwrap());
    // The log is gone: a form found now cannot have come from reading it.
    std::fs::remove_file(&log).unwrap();
    assert_eq!(
        fit(&log, BASE, &index, Some(&time), Some(&built)).unwrap(),
        IndexForm::Rebuild(DEFAULT_INDEX_INTERVAL_BYTES)
    );

    // Built bytes that are not the broker's (a broker at another interval) fall back to fitting from the log.
    let (log, index, time) = segment(dir.path(), 1024);
    let form = fit(&log, BASE, &index, Some(&time), Some(&built)).unwrap();
    assert_eq!(form.interval(), Some(1024), "{form:?}");
    std::fs::remove_file(&log).unwrap();
    assert!(
        fit(&log, BASE, &index, Some(&time), Some(&built)).is_err(),
        "the fallback reads the log"
    );
}
