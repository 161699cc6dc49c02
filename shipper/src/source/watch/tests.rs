//! The watcher over a temp log dir with real file operations: appends in a
//! burst, a roll, a retention delete (`.deleted` then removal), a compaction
//! swap (`.cleaned` → `.swap` → `.log`), a truncation, partitions created,
//! renamed `-delete` and removed, and the high-watermark checkpoint rewritten.
//! Assertions are on the state reached and the kinds of events seen, never on
//! exact counts (notifications coalesce); waiting is only for an expected
//! event, with a timeout.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use super::state::{pass, Dirty, State};
use super::*;

/// Longest wait for an expected event: generous on a loaded machine; a
/// passing run waits a tick or two.
const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

fn seg(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

fn append(path: &Path, n: usize) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(&vec![7u8; n]).unwrap();
}

/// Receive events until one satisfies `pred`; all events seen on the way.
async fn until(rx: &mut mpsc::Receiver<WatchEvent>, what: &str, pred: impl Fn(&WatchEvent) -> bool) -> Vec<WatchEvent> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Some(e) = rx.recv().await {
            let hit = pred(&e);
            seen.push(e);
            if hit {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no {what} within {EVENT_TIMEOUT:?}; seen: {seen:#?}"
    );
    seen
}

fn is_for(e: &WatchEvent, dir: &Path) -> bool {
    e.partition().is_some_and(|p| p.dir == dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_operations_become_partition_events() {
    let log_dir = tempfile::tempdir().unwrap();
    let root = log_dir.path().to_path_buf();
    let t0 = root.join("t-0");
    std::fs::create_dir(&t0).unwrap();
    append(&seg(&t0, 0), 100);
    // Internal topics and other files are not partitions to follow.
    std::fs::create_dir(root.join("__consumer_offsets-0")).unwrap();
    let mut config = WatchConfig::new(vec![root.clone()], TopicFilter::all());
    // Notifications alone must carry every step: no rescan during the test.
    config.rescan = Duration::from_secs(3600);
    let (_watcher, mut rx) = watch(config).await.unwrap();
    let seen = until(&mut rx, "t-0 appeared", |e| {
        matches!(e, WatchEvent::PartitionAppeared { partition, active_base: Some(0), segments: 1 } if partition.dir == t0)
    })
    .await;
    assert!(
        seen.iter().all(|e| e.partition().is_none_or(|p| p.topic == "t")),
        "{seen:?}"
    );

    // A burst of appends: coalesced, ending at the final length.
    let writes = 2000;
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(seg(&t0, 0)).unwrap();
        for _ in 0..writes {
            f.write_all(&[1u8; 100]).unwrap();
        }
    }
    let end = 100 + writes as u64 * 100;
    let seen = until(
        &mut rx,
        "growth to the end",
        |e| matches!(e, WatchEvent::ActiveGrew { len, base_offset: 0, .. } if *len == end),
    )
    .await;
    let grew = seen
        .iter()
        .filter(|e| matches!(e, WatchEvent::ActiveGrew { .. }))
        .count();
    assert!(
        grew < writes / 2,
        "{grew} growth events for {writes} appends: not coalesced"
    );

    // Roll.
    append(&seg(&t0, 100), 10);
    until(&mut rx, "roll to 100", |e| {
        matches!(
            e,
            WatchEvent::Rolled {
                previous_base: Some(0),
                active_base: 100,
                ..
            }
        )
    })
    .await;
    append(&seg(&t0, 200), 10);
    until(&mut rx, "roll to 200", |e| {
        matches!(e, WatchEvent::Rolled { active_base: 200, .. })
    })
    .await;

    // Retention: renamed `.deleted`, removed later.
    let deleted = t0.join("00000000000000000000.log.deleted");
    std::fs::rename(seg(&t0, 0), &deleted).unwrap();
    let seen = until(&mut rx, "log start at 100", |e| {
        matches!(e, WatchEvent::LogStartMoved { first_base: 100, .. })
    })
    .await;
    assert!(seen
        .iter()
        .any(|e| matches!(e, WatchEvent::SegmentDeleted { base_offset: 0, .. })));
    std::fs::remove_file(&deleted).unwrap();

    // Compaction swap of the sealed segment 100.
    let cleaned = t0.join("00000000000000000100.log.cleaned");
    std::fs::write(&cleaned, [3u8; 5]).unwrap();
    let swap = t0.join("00000000000000000100.log.swap");
    std::fs::rename(&cleaned, &swap).unwrap();
    std::fs::rename(&swap, seg(&t0, 100)).unwrap();
    until(&mut rx, "swap of 100", |e| {
        matches!(e, WatchEvent::SegmentReplaced { base_offset: 100, .. })
    })
    .await;

    // The active tail shrinks.
    std::fs::OpenOptions::new()
        .write(true)
        .open(seg(&t0, 200))
        .unwrap()
        .set_len(4)
        .unwrap();
    until(&mut rx, "active shrank", |e| {
        matches!(
            e,
            WatchEvent::ActiveShrank {
                base_offset: 200,
                len: 4,
                was: 10,
                ..
            }
        )
    })
    .await;

    // The high-watermark checkpoint is rewritten (temp file and rename).
    let tmp = root.join("replication-offset-checkpoint.tmp");
    std::fs::write(&tmp, "0\n1\nt 0 5\n").unwrap();
    std::fs::rename(&tmp, root.join("replication-offset-checkpoint")).unwrap();
    until(&mut rx, "checkpoint change", |e| {
        matches!(e, WatchEvent::HighWatermarksChanged { .. })
    })
    .await;

    // A new partition, then its deletion (renamed `-delete`, then removed).
    let t1 = root.join("t-1");
    std::fs::create_dir(&t1).unwrap();
    append(&seg(&t1, 0), 1);
    until(&mut rx, "t-1 appeared", |e| {
        matches!(e, WatchEvent::PartitionAppeared { .. }) && is_for(e, &t1)
    })
    .await;
    let marked = root.join("t-1.0123456789abcdef0123456789abcdef-delete");
    std::fs::rename(&t1, &marked).unwrap();
    until(&mut rx, "t-1 gone, marked for deletion", |e| {
        matches!(
            e,
            WatchEvent::PartitionGone {
                marked_for_deletion: true,
                ..
            }
        ) && is_for(e, &t1)
    })
    .await;
    std::fs::remove_dir_all(&marked).unwrap();

    // A partition dir removed outright.
    std::fs::remove_dir_all(&t0).unwrap();
    until(&mut rx, "t-0 gone", |e| {
        matches!(
            e,
            WatchEvent::PartitionGone {
                marked_for_deletion: false,
                ..
            }
        ) && is_for(e, &t0)
    })
    .await;
}

/// The pass alone (what a rescan runs when notifications were lost): the
/// same state changes give the same events from listings only.
#[test]
fn a_full_pass_derives_events_from_listings_alone() {
    let log_dir = tempfile::tempdir().unwrap();
    let root = log_dir.path().to_path_buf();
    let dirs = vec![root.clone()];
    let filter = TopicFilter::all();
    let all = Dirty {
        all: true,
        ..Dirty::default()
    };
    let mut state = State::default();
    let run = |state: &mut State| {
        let mut out = Vec::new();
        pass(state, &all, &dirs, &filter, &mut out);
        out
    };
    assert!(run(&mut state).is_empty());
    let p = root.join("orders-3");
    std::fs::create_dir(&p).unwrap();
    append(&seg(&p, 0), 50);
    append(&seg(&p, 40), 50);
    let events = run(&mut state);
    assert!(matches!(
        events.as_slice(),
        [WatchEvent::PartitionAppeared { partition, active_base: Some(40), segments: 2 }]
            if partition.topic == "orders" && partition.partition == 3
    ));
    // Nothing changed: nothing reported.
    assert!(run(&mut state).is_empty());
    // Several changes between two passes: each is reported.
    append(&seg(&p, 40), 5);
    std::fs::rename(seg(&p, 0), p.join("00000000000000000000.log.deleted")).unwrap();
    std::fs::write(p.join("00000000000000000040.log.cleaned"), b"x").unwrap();
    let events = run(&mut state);
    assert!(events
        .iter()
        .any(|e| matches!(e, WatchEvent::SegmentDeleted { base_offset: 0, .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e, WatchEvent::LogStartMoved { first_base: 40, .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e, WatchEvent::ActiveGrew { len: 55, .. })));
    assert!(
        !events.iter().any(|e| matches!(e, WatchEvent::SegmentReplaced { .. })),
        "{events:?}"
    );
    // A compaction swap of segment 40 seen mid-way: the new data is `.swap`,
    // the old `.log` already renamed `.deleted`. One replacement, no deletion.
    append(&seg(&p, 60), 5);
    run(&mut state);
    std::fs::write(p.join("00000000000000000040.log.swap"), b"compacted").unwrap();
    std::fs::rename(seg(&p, 40), p.join("00000000000000000040.log.deleted")).unwrap();
    let events = run(&mut state);
    assert!(
        matches!(events.as_slice(), [WatchEvent::SegmentReplaced { base_offset: 40, .. }]),
        "{events:?}"
    );
    std::fs::rename(p.join("00000000000000000040.log.swap"), seg(&p, 40)).unwrap();
    assert!(
        run(&mut state).is_empty(),
        "the final rename keeps the inode: nothing new"
    );
    // A pass that saw the segment missing, then back: replaced, not silent.
    std::fs::rename(seg(&p, 40), p.join("moved-away")).unwrap();
    run(&mut state);
    std::fs::rename(p.join("moved-away"), seg(&p, 40)).unwrap();
    let events = run(&mut state);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, WatchEvent::SegmentReplaced { base_offset: 40, .. })),
        "{events:?}"
    );
    // A truncation that removes the active segment: the one before is active again.
    append(&seg(&p, 90), 5);
    run(&mut state);
    std::fs::remove_file(seg(&p, 90)).unwrap();
    let events = run(&mut state);
    assert!(events
        .iter()
        .any(|e| matches!(e, WatchEvent::SegmentDeleted { base_offset: 90, .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e, WatchEvent::ActiveShrank { base_offset: 60, .. })));
    std::fs::remove_dir_all(&p).unwrap();
    let events = run(&mut state);
    assert!(matches!(
        events.as_slice(),
        [WatchEvent::PartitionGone {
            marked_for_deletion: false,
            ..
        }]
    ));
}

#[test]
fn notifications_mark_the_partition_the_log_dir_or_the_checkpoint() {
    let root = PathBuf::from("/data/kafka");
    let dirs: Vec<WatchedDir> = [PathBuf::from("/other"), root.clone()]
        .iter()
        .map(|d| WatchedDir::new(d))
        .collect();
    let mut d = Dirty::default();
    mark_path(&mut d, &dirs, &root.join("t-0/00000000000000000000.log"));
    mark_path(&mut d, &dirs, &root.join("t-0/00000000000000000000.index"));
    mark_path(&mut d, &dirs, &root.join("t-1"));
    mark_path(&mut d, &dirs, &root.join("replication-offset-checkpoint.tmp"));
    mark_path(&mut d, &dirs, Path::new("/elsewhere/x"));
    assert_eq!(
        d.partitions.iter().cloned().collect::<Vec<_>>(),
        vec![(1, root.join("t-0"))]
    );
    assert_eq!(d.log_dirs.iter().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(d.checkpoints.iter().copied().collect::<Vec<_>>(), vec![1]);
    assert!(!d.all);
}

/// A log dir configured relatively: notify's absolute paths mark it, and the partition is named as configured (the
/// key the watcher's state holds it under).
#[test]
fn absolute_notifications_mark_a_relative_log_dir_as_configured() {
    let given = PathBuf::from("kafka-logs");
    let absolute = std::env::current_dir().unwrap().join(&given);
    let dirs = vec![WatchedDir::new(&given)];
    let mut d = Dirty::default();
    mark_path(&mut d, &dirs, &absolute.join("t-0/00000000000000000000.log"));
    mark_path(&mut d, &dirs, &absolute.join("t-1"));
    mark_path(&mut d, &dirs, &absolute.join("replication-offset-checkpoint"));
    // The path as given still matches (a platform whose events keep it).
    mark_path(&mut d, &dirs, &given.join("t-2/00000000000000000000.log"));
    assert_eq!(
        d.partitions.iter().cloned().collect::<Vec<_>>(),
        vec![(0, given.join("t-0")), (0, given.join("t-2"))]
    );
    assert_eq!(d.log_dirs.iter().copied().collect::<Vec<_>>(), vec![0]);
    assert_eq!(d.checkpoints.iter().copied().collect::<Vec<_>>(), vec![0]);
}

/// A listing that missed a segment (a rename landed while `readdir` ran) is checked by name before a deletion is
/// reported: a swap's `.cleaned`, `.swap` or new `.log` keeps it; only a segment with none of them is gone.
#[test]
fn a_segment_the_listing_missed_is_looked_up_by_name_before_it_counts_as_deleted() {
    use super::state::{recheck_missing, LogStamp, PartitionState};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let stamp = LogStamp { inode: 1, len: 10 };
    let before = PartitionState {
        segments: [(0, stamp), (50, stamp), (100, stamp), (150, stamp), (200, stamp)]
            .into_iter()
            .collect(),
        listed: None,
    };
    // 0: mid-swap, only the `.swap` file; 50: the cleaner's output not swapped yet; 100: swapped in since the
    // listing; 150: deleted by retention; 200: the active segment the listing did see.
    std::fs::write(p.join("00000000000000000000.log.swap"), b"compacted").unwrap();
    std::fs::write(p.join("00000000000000000050.log.cleaned"), b"compacted").unwrap();
    std::fs::write(seg(p, 100), b"compacted").unwrap();
    std::fs::write(p.join("00000000000000000150.log.deleted"), b"old").unwrap();
    let mut now = PartitionState {
        segments: [(200, stamp)].into_iter().collect(),
        listed: None,
    };
    recheck_missing(p, &before, &mut now);
    assert_eq!(now.segments.keys().copied().collect::<Vec<_>>(), [0, 50, 100, 200]);
    assert_eq!(now.segments[&0].len, 9, "the swap file's own stamp");
    // What the diff reports from there: replacements, not a deletion of 0 or a log start move.
    let id = PartitionId {
        log_dir: p.to_path_buf(),
        dir: p.to_path_buf(),
        topic: "t".into(),
        partition: 0,
    };
    let mut events = Vec::new();
    super::state::diff(&id, &before, &now, &mut events);
    assert!(
        events
            .iter()
            .all(|e| !matches!(e, WatchEvent::SegmentDeleted { base_offset, .. } if *base_offset != 150)),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| matches!(e, WatchEvent::LogStartMoved { .. })),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, WatchEvent::SegmentDeleted { base_offset: 150, .. })),
        "{events:?}"
    );
}

/// `path` relative to the process's working directory (`../..` up to the root, then down), so a test can name a
/// temp dir relatively without changing the working directory every test of the process shares.
fn relative_to_cwd(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let up = cwd.components().count() - 1;
    let mut rel: PathBuf = std::iter::repeat_n("..", up).collect();
    rel.push(path.strip_prefix("/").unwrap());
    rel
}

/// A log dir given as a relative path (`ship --log-dir kafka-logs`) is watched through its notifications, not only
/// by the rescan: notify names the paths of its events absolutely, and they must still be matched to the log dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_log_dir_is_watched_by_its_notifications() {
    let log_dir = tempfile::tempdir().unwrap();
    let relative = relative_to_cwd(log_dir.path());
    assert!(
        relative.is_relative() && relative.join("..").exists(),
        "{}",
        relative.display()
    );
    let t0 = relative.join("t-0");
    std::fs::create_dir(&t0).unwrap();
    append(&seg(&t0, 0), 100);
    let mut config = WatchConfig::new(vec![relative.clone()], TopicFilter::all());
    // No rescan during the test: only the notifications can report the append.
    config.rescan = Duration::from_secs(3600);
    let (_watcher, mut rx) = watch(config).await.unwrap();
    until(
        &mut rx,
        "t-0 appeared",
        |e| matches!(e, WatchEvent::PartitionAppeared { partition, .. } if partition.dir == t0),
    )
    .await;
    append(&seg(&t0, 0), 50);
    // The event names the partition as configured (relative), as every other event of this watcher does.
    until(&mut rx, "t-0 grew", |e| {
        matches!(e, WatchEvent::ActiveGrew { partition, len: 150, .. } if partition.dir == t0 && partition.log_dir == relative)
    })
    .await;
    // A partition created later is reported too (a notification on the log dir itself).
    let t1 = relative.join("t-1");
    std::fs::create_dir(&t1).unwrap();
    append(&seg(&t1, 0), 10);
    until(
        &mut rx,
        "t-1 appeared",
        |e| matches!(e, WatchEvent::PartitionAppeared { partition, .. } if partition.dir == t1),
    )
    .await;
}

/// Reading a partition (listing its directory, opening and reading its segment, as the watcher's own passes and a
/// broker's consumers do) causes no notification at all, through real inotify; a write still marks the partition,
/// and a partition directory created after the start is watched too. Notified reads once overflowed the kernel's
/// queue at 10,000 partitions, and every overflow meant another full pass.
#[test]
fn reads_cause_no_notification_and_writes_mark_the_partition() {
    use std::io::Read as _;
    let log_dir = tempfile::tempdir().unwrap();
    let t0 = log_dir.path().join("t-0");
    std::fs::create_dir(&t0).unwrap();
    append(&seg(&t0, 0), 100);
    let marks = Arc::new(Marks::default());
    let (handler_marks, dirs) = (marks.clone(), vec![WatchedDir::new(log_dir.path())]);
    let notices = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = notices.clone();
    let _notifications = inotify::start(&[dirs[0].absolute.clone()], move |notice| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        on_notice(&handler_marks, &dirs, notice)
    })
    .unwrap();

    for _ in 0..3 {
        let _ = std::fs::read_dir(log_dir.path()).unwrap().count();
        let _ = std::fs::read_dir(&t0).unwrap().count();
        let mut bytes = Vec::new();
        std::fs::File::open(seg(&t0, 0))
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        assert_eq!(bytes.len(), 100);
    }
    // Notifications are delivered by their own thread: give them time to arrive before looking.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        notices.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "reads were notified"
    );
    assert!(marks.take().is_empty());

    let wait_for = |what: &str, dir: &Path| {
        let deadline = std::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            let d = marks.take();
            if d.partitions.contains(&(0, dir.to_path_buf())) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what} did not mark {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    append(&seg(&t0, 0), 10);
    wait_for("an append", &t0);

    // A partition created after the start: its creation marks the log dir, and its appends mark it.
    let t1 = log_dir.path().join("t-1");
    std::fs::create_dir(&t1).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = marks.take();
    append(&seg(&t1, 0), 10);
    wait_for("an append to a new partition", &t1);
}

#[test]
fn full_passes_that_take_long_are_made_less_often() {
    assert_eq!(
        rescan_after(RESCAN_INTERVAL, Duration::from_millis(20)),
        RESCAN_INTERVAL
    );
    assert_eq!(
        rescan_after(RESCAN_INTERVAL, Duration::from_millis(400)),
        Duration::from_secs(20)
    );
    assert_eq!(
        rescan_after(Duration::from_millis(5), Duration::ZERO),
        Duration::from_millis(5)
    );
}

/// A rescan restats a partition whose directory is unchanged since a settled listing instead of listing it again:
/// its active segment's growth is still seen, and any change of its entries makes it listed.
#[test]
fn a_rescan_of_a_settled_partition_sees_appends_and_any_change_of_its_entries() {
    use super::state::{restat_partition, snapshot_partition};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    append(&seg(p, 0), 50);
    append(&seg(p, 40), 50);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let settled = snapshot_partition(p).unwrap().unwrap();
    assert!(settled.listed.is_some());
    // Unchanged: the same state.
    assert_eq!(restat_partition(p, &settled).unwrap().unwrap(), settled);
    // An append to the active segment: its new length, from a stat of that file alone.
    append(&seg(p, 40), 7);
    let grown = restat_partition(p, &settled).unwrap().unwrap();
    assert_eq!(grown.segments[&40].len, 57);
    assert_eq!(grown.segments.len(), 2);
    // A new segment (a roll): the directory changed, so it is listed.
    append(&seg(p, 90), 3);
    let rolled = restat_partition(p, &grown).unwrap().unwrap();
    assert_eq!(rolled.segments.keys().copied().collect::<Vec<_>>(), [0, 40, 90]);
    // A sealed segment renamed `.deleted` by retention: listed, gone.
    std::fs::rename(seg(p, 0), p.join("00000000000000000000.log.deleted")).unwrap();
    let deleted = restat_partition(p, &rolled).unwrap().unwrap();
    assert_eq!(deleted.segments.keys().copied().collect::<Vec<_>>(), [40, 90]);
    // The directory removed: gone.
    let gone = p.to_path_buf();
    drop(dir);
    assert!(restat_partition(&gone, &deleted).unwrap().is_none());
}
