use std::path::{Path, PathBuf};

use super::*;

fn pid(p: i32) -> PartitionId {
    PartitionId {
        log_dir: PathBuf::from("/k"),
        dir: PathBuf::from(format!("/k/t-{p}")),
        topic: "t".into(),
        partition: p,
    }
}

fn grew(p: i32, base: i64, len: u64) -> WatchEvent {
    WatchEvent::ActiveGrew {
        partition: pid(p),
        base_offset: base,
        len,
    }
}

const INTERVAL: Duration = Duration::from_millis(500);

#[test]
fn a_round_waits_for_a_change_then_for_the_interval_or_the_byte_threshold() {
    let mut t = RoundTrigger::default();
    assert!(
        !t.due(Duration::from_secs(60), INTERVAL, 1000),
        "nothing changed: no round, however long"
    );
    t.observe(&grew(0, 0, 100));
    assert!(
        !t.due(Duration::from_millis(100), INTERVAL, 1000),
        "changed, interval not up"
    );
    assert!(t.due(INTERVAL, INTERVAL, 1000), "changed and the interval is up");
    // Growth is counted from the length each partition had, across partitions.
    t.observe(&grew(0, 0, 600));
    t.observe(&grew(1, 0, 399));
    assert!(!t.due(Duration::ZERO, INTERVAL, 1000), "999 bytes grown");
    t.observe(&grew(1, 0, 400));
    assert!(t.due(Duration::ZERO, INTERVAL, 1000), "1000 bytes grown: at once");
    t.started();
    assert!(!t.due(Duration::from_secs(60), INTERVAL, 1000), "a round took it all");
    // After a round, growth counts from the last lengths, not from zero.
    t.observe(&grew(0, 0, 700));
    assert!(!t.due(Duration::ZERO, INTERVAL, 150));
    t.observe(&grew(0, 0, 850));
    assert!(t.due(Duration::ZERO, INTERVAL, 150));
    // A roll starts a new segment's count at zero and is a change by itself.
    t.started();
    t.observe(&WatchEvent::Rolled {
        partition: pid(0),
        previous_base: Some(0),
        active_base: 50,
    });
    assert!(t.due(INTERVAL, INTERVAL, 1000));
    t.observe(&grew(0, 50, 1000));
    assert!(t.due(Duration::ZERO, INTERVAL, 1000));
    // An unreadable listing is no change.
    t.started();
    t.observe(&WatchEvent::Unreadable {
        path: "/k".into(),
        reason: "EIO".into(),
    });
    assert!(!t.is_dirty());
    t.mark_dirty();
    assert!(t.due(INTERVAL, INTERVAL, 1000));
}

#[test]
fn a_round_looks_at_the_partitions_named_since_the_last_one_or_at_everything() {
    let mut t = RoundTrigger::default();
    t.observe(&grew(0, 0, 100));
    t.observe(&grew(3, 0, 100));
    t.observe(&WatchEvent::Unreadable {
        path: PathBuf::from("/k/t-9"),
        reason: "gone".into(),
    });
    let named: HashSet<PathBuf> = [pid(0).dir, pid(3).dir].into_iter().collect();
    assert_eq!(t.started(), RoundScope::Partitions(named));
    assert_eq!(
        t.started(),
        RoundScope::Partitions(HashSet::new()),
        "taken by the round"
    );

    // The high-watermark checkpoint, which the broker rewrites every 5 s, starts no round and widens none.
    t.observe(&WatchEvent::HighWatermarksChanged {
        log_dir: PathBuf::from("/k"),
    });
    assert!(!t.is_dirty() && !t.due(INTERVAL, INTERVAL, 1000));
    t.observe(&grew(1, 0, 100));
    t.observe(&WatchEvent::HighWatermarksChanged {
        log_dir: PathBuf::from("/k"),
    });
    assert_eq!(t.started(), RoundScope::Partitions([pid(1).dir].into_iter().collect()));

    // The log-start checkpoint (a log start moved by DeleteRecords shows nowhere else) names what it is about only
    // once read: a change starts nothing before that.
    t.observe(&grew(1, 0, 200));
    t.observe(&WatchEvent::LogStartsChanged {
        log_dir: PathBuf::from("/k"),
    });
    assert_eq!(t.take_unread_log_starts(), vec![PathBuf::from("/k")]);
    assert!(t.take_unread_log_starts().is_empty());
    // Read for the first time: nothing to compare with, so every partition.
    let entries = |pairs: &[(&str, i32, i64)]| -> HashMap<(String, i32), i64> {
        pairs.iter().map(|(t, p, o)| ((t.to_string(), *p), *o)).collect()
    };
    t.log_starts_read(Path::new("/k"), Some(entries(&[("t", 0, 5), ("t", 1, 0), ("u", 0, 7)])));
    assert_eq!(t.started(), RoundScope::Everything);
    // Then only the partitions whose entry moved, appeared or went.
    t.log_starts_read(Path::new("/k"), Some(entries(&[("t", 0, 5), ("t", 1, 3), ("v", 0, 1)])));
    assert!(t.is_dirty());
    let moved: HashSet<PathBuf> = ["/k/t-1", "/k/v-0", "/k/u-0"].iter().map(PathBuf::from).collect();
    assert_eq!(t.started(), RoundScope::Partitions(moved));
    // Rewritten unchanged (the broker rewrites it every 60 s): nothing to do.
    t.log_starts_read(Path::new("/k"), Some(entries(&[("t", 0, 5), ("t", 1, 3), ("v", 0, 1)])));
    assert!(!t.is_dirty());
    // Unreadable: every partition.
    t.log_starts_read(Path::new("/k"), None);
    assert_eq!(t.started(), RoundScope::Everything);
    // Known from before the first round: the first change is compared with it.
    let mut known = RoundTrigger::default();
    known.log_starts_known(Path::new("/k"), Some(entries(&[("t", 0, 5)])));
    known.log_starts_read(Path::new("/k"), Some(entries(&[("t", 0, 9)])));
    assert_eq!(
        known.started(),
        RoundScope::Partitions([PathBuf::from("/k/t-0")].into_iter().collect())
    );

    // A round that could not finish a partition: the next one looks at everything again.
    t.mark_dirty();
    assert!(t.is_dirty());
    assert_eq!(t.started(), RoundScope::Everything);
}
