use super::*;

fn seen() -> Seen {
    Seen {
        watched: true,
        touched: false,
        high_watermark: None,
        reported: None,
        bounded: false,
        report_owed: false,
        log_start_unconfirmed: false,
    }
}

/// A partition stepped at `at` without an item, at high watermark `hw`.
fn quiet(at: Instant, hw: Option<i64>) -> Wake {
    let mut wake = Wake::default();
    wake.starting(hw, Some(7));
    wake.stepped(false, at);
    wake
}

#[test]
fn a_partition_never_stepped_or_asked_for_again_is_stepped() {
    let now = Instant::now();
    assert_eq!(Wake::default().want(seen(), now), Want::Step);
    let mut wake = quiet(now, None);
    assert_eq!(wake.want(seen(), now), Want::Skip);
    wake.ask();
    assert_eq!(wake.want(seen(), now), Want::Step);
}

#[test]
fn without_a_watcher_every_round_steps_it() {
    let now = Instant::now();
    let wake = quiet(now, None);
    assert_eq!(
        wake.want(
            Seen {
                watched: false,
                ..seen()
            },
            now
        ),
        Want::Step
    );
}

#[test]
fn an_event_naming_its_directory_steps_it() {
    let now = Instant::now();
    let wake = quiet(now, None);
    assert_eq!(
        wake.want(
            Seen {
                touched: true,
                ..seen()
            },
            now
        ),
        Want::Step
    );
}

#[test]
fn a_step_that_yielded_is_followed_by_another_whenever_it_comes() {
    let start = Instant::now();
    let mut wake = Wake::default();
    wake.stepped(true, start);
    // A round long after (the feed was busy elsewhere): there may be more of it, and no event would say so.
    assert_eq!(wake.want(seen(), start + ACTIVE_WINDOW * 10), Want::Step);
    wake.stepped(false, start + ACTIVE_WINDOW * 10);
    assert_eq!(wake.want(seen(), start + ACTIVE_WINDOW * 12), Want::Skip);
}

#[test]
fn a_recent_item_keeps_it_stepped_every_round_for_the_active_window() {
    let start = Instant::now();
    let mut wake = Wake::default();
    wake.stepped(true, start);
    wake.stepped(false, start + Duration::from_millis(10));
    assert_eq!(wake.want(seen(), start + Duration::from_millis(20)), Want::Step);
    assert_eq!(
        wake.want(seen(), start + ACTIVE_WINDOW + Duration::from_millis(1)),
        Want::Skip
    );
}

#[test]
fn a_moved_high_watermark_steps_it_under_the_bound_only() {
    let now = Instant::now();
    let wake = quiet(now, Some(10));
    let moved = Seen {
        high_watermark: Some(Some(11)),
        ..seen()
    };
    assert_eq!(wake.want(Seen { bounded: true, ..moved }, now), Want::Step);
    assert_eq!(
        wake.want(moved, now),
        Want::Skip,
        "log-end mode without progress: the bound is not used"
    );
    let same = Seen {
        high_watermark: Some(Some(10)),
        bounded: true,
        ..seen()
    };
    assert_eq!(wake.want(same, now), Want::Skip);
    // Learned for the first time.
    let unknown = quiet(now, None);
    assert_eq!(unknown.want(Seen { bounded: true, ..same }, now), Want::Step);
}

#[test]
fn a_high_watermark_not_yet_reported_steps_it_until_it_is() {
    let now = Instant::now();
    let wake = quiet(now, Some(10));
    let pending = Seen {
        high_watermark: Some(Some(12)),
        reported: Some(Some(10)),
        ..seen()
    };
    assert_eq!(wake.want(pending, now), Want::Step);
    let reported = Seen {
        reported: Some(Some(12)),
        ..pending
    };
    assert_eq!(wake.want(reported, now), Want::Skip);
    // Not looked up (the change count stands): the one the last step started from counts.
    let not_looked_up = Seen {
        high_watermark: None,
        reported: Some(Some(9)),
        ..seen()
    };
    assert_eq!(wake.want(not_looked_up, now), Want::Step);
    assert_eq!(
        wake.want(
            Seen {
                reported: Some(Some(10)),
                ..not_looked_up
            },
            now
        ),
        Want::Skip
    );
    // Nothing reported yet (the first report is the step's own business), or no high watermark known.
    assert_eq!(
        wake.want(
            Seen {
                reported: None,
                ..pending
            },
            now
        ),
        Want::Skip
    );
    let unknown = Seen {
        high_watermark: Some(None),
        reported: Some(Some(10)),
        ..seen()
    };
    assert_eq!(wake.want(unknown, now), Want::Skip);
}

#[test]
fn an_owed_progress_report_steps_it() {
    let now = Instant::now();
    let wake = quiet(now, None);
    assert_eq!(
        wake.want(
            Seen {
                report_owed: true,
                ..seen()
            },
            now
        ),
        Want::Step
    );
}

#[test]
fn a_log_start_waiting_for_confirmation_steps_it() {
    let now = Instant::now();
    let wake = quiet(now, None);
    assert_eq!(
        wake.want(
            Seen {
                log_start_unconfirmed: true,
                ..seen()
            },
            now
        ),
        Want::Step
    );
}

#[test]
fn the_sweep_comes_within_one_and_a_half_intervals() {
    let now = Instant::now();
    let wake = quiet(now, None);
    assert_eq!(
        wake.want(seen(), now + SWEEP_INTERVAL - Duration::from_millis(1)),
        Want::Skip
    );
    assert_eq!(wake.want(seen(), now + SWEEP_INTERVAL * 3 / 2), Want::Sweep);
}

#[test]
fn the_sweep_is_jittered() {
    let now = Instant::now();
    let due: std::collections::HashSet<Instant> = (0..32).filter_map(|_| quiet(now, None).sweep_at).collect();
    assert!(due.len() > 1, "32 partitions stepped at once all come due at once");
}

#[test]
fn the_high_watermark_need_not_be_read_while_the_change_count_stands() {
    let now = Instant::now();
    let wake = quiet(now, Some(10));
    assert!(wake.hw_unchanged(Some(7)));
    assert!(!wake.hw_unchanged(Some(8)));
    assert!(
        !wake.hw_unchanged(None),
        "a source without a change count is always read"
    );
    assert!(!Wake::default().hw_unchanged(Some(7)), "never stepped: read");
}
