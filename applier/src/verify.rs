//! `segmirror verify` of mirror roots: the segment checks of `segment_format::verify`, with the mirror root's own
//! entries known for what they are, and with `--deep` what the appliers recorded for promotion checked against the
//! bytes: the tail appender's kept facts, and the catalog's record of each installed segment's transactions. Here
//! rather than in `mirror` because it needs `direct` and the catalog too, and `mirror` is the layer below both
//! appliers, importing neither.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use segment_format::closed_log::{self, SegmentClosing};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::error::Defect;
use segment_format::report::Finding;
use segment_format::txn_ends::{self, TxnEnds};
use segment_format::verify::{Progress, Report, VerifyOptions};
use segmirror_catalog::{Catalog, PartitionState};

use crate::direct;
use crate::mirror::{partition_dir, tail_dir, MIRROR_ROOT_ENTRIES};

/// `segmirror verify` over `paths`, any of which may be a mirror root: its own entries ([`MIRROR_ROOT_ENTRIES`])
/// are segmirror's state, not strays that stop a broker (a broker's log dir, with `meta.properties`, still has
/// them reported). With `--deep`, what the tail appender kept for promotion is checked against the bytes too
/// ([`direct::verify_kept`]).
pub fn verify_paths(paths: &[PathBuf], options: &VerifyOptions, progress: &dyn Progress) -> Report {
    let mut report = segment_format::verify::verify_paths_owned_by(paths, options, progress, MIRROR_ROOT_ENTRIES);
    if options.depth == segment_format::verify::Depth::Deep {
        for path in paths.iter().filter(|p| tail_dir(p).is_dir()) {
            let (findings, io_errors) = direct::verify_kept(path);
            report.findings.extend(findings);
            report.io_errors.extend(io_errors);
        }
    }
    report
}

/// What each install recorded in `catalog` of its version's transactions (what promotion trusts instead of reading
/// the segments, `promote`'s `recorded_txns`), for every partition of the mirror root `root` not yet promoted,
/// against the batches of the installed segment: a record that differs is an error (promotion would skip the abort
/// of an open transaction). A segment no longer in the mirror, or without a record, is skipped. The segment's log
/// (`crate::segment_log`) where the record keeps one: an entry a consistent cut would resolve otherwise than the
/// batches is an error; a log that is not the recorded one a warning (a cut reads back instead).
pub fn verify_recorded_transactions(root: &Path, catalog: &Catalog) -> (Vec<Finding>, Vec<String>) {
    let (mut findings, mut io_errors) = (Vec::new(), Vec::new());
    let links = match catalog.links() {
        Ok(links) => links,
        Err(e) => return (findings, vec![format!("catalog: {e}")]),
    };
    for link in links {
        let partitions = match catalog.partitions(&link.name) {
            Ok(p) => p,
            Err(e) => {
                io_errors.push(format!("catalog, link {}: {e}", link.name));
                continue;
            }
        };
        for p in partitions.iter().filter(|p| p.state != PartitionState::Promoted) {
            let recorded = match catalog.installed_txn_ends(p.id) {
                Ok(r) => r,
                Err(e) => {
                    io_errors.push(format!("catalog, {}: {e}", p.key));
                    continue;
                }
            };
            let dir = partition_dir(root, &p.key.topic, p.key.partition);
            verify_partition(&dir, recorded, &mut findings, &mut io_errors);
        }
    }
    (findings, io_errors)
}

/// [`verify_recorded_transactions`] of one partition (`dir`), its records by segment base.
fn verify_partition(
    dir: &Path,
    recorded: BTreeMap<i64, (i64, Option<TxnEnds>)>,
    findings: &mut Vec<Finding>,
    io_errors: &mut Vec<String>,
) {
    // The producers open at each segment's base, as the batches from the partition's first segment give them;
    // `None` past a segment not read (not in the mirror, or without a record).
    let mut open_at_base: Option<BTreeSet<i64>> = Some(BTreeSet::new());
    let first_on_disk = segment_format::dir::PartitionDir::open(dir)
        .ok()
        .and_then(|d| d.segments.first().map(|s| s.base_offset));
    // Where the next segment must begin for the fold to follow on.
    let mut follows = first_on_disk;
    for (base, (next, ends)) in recorded {
        let log = dir.join(segment_file_name(base, SegmentFileKind::Log));
        if Some(base) < first_on_disk {
            continue;
        }
        if Some(base) != follows {
            open_at_base = None;
        }
        follows = Some(next);
        let Some(ends) = ends.filter(|_| log.is_file()) else {
            open_at_base = None;
            continue;
        };
        let found = match txn_ends::logged_of_log(&log, next) {
            Ok(found) => found,
            Err(e) => {
                io_errors.push(format!("{}: {e}", log.display()));
                open_at_base = None;
                continue;
            }
        };
        let (found, closings) = found;
        // A record written before runs (or closings) were kept is compared without them.
        let found_ends = found
            .as_ref()
            .map(|f| match (ends.closings.is_some(), ends.runs.is_empty()) {
                (true, _) => f.clone(),
                (false, true) => f.without_runs(),
                (false, false) => f.without_closings(),
            });
        if found_ends.as_ref() != Some(&ends.without_log()) {
            findings.push(Finding::error(
                &log,
                None,
                None,
                Defect::Other {
                    message: format!(
                        "the catalog's record of this segment's transactions, which promotion trusts, says {}; its \
                         batches below offset {next} give {}",
                        ends.encode(),
                        found_ends.map_or_else(|| "too many producers to record".to_string(), |f| f.encode())
                    ),
                },
            ));
        }
        if let Some(record) = ends.log {
            match crate::segment_log::read(dir, base, record) {
                Ok(Some(logged)) => {
                    if let Some(message) = log_differs(&logged, &closings, open_at_base.as_ref()) {
                        findings.push(Finding::error(&log, None, None, Defect::Other { message }));
                    }
                }
                Ok(None) => findings.push(Finding::warning(
                    &log,
                    None,
                    None,
                    Defect::Other {
                        message: format!(
                            "the segment's log of closed transactions is not the one recorded ({} entries): a \
                             consistent cut inside it reads back from the cut instead",
                            record.entries
                        ),
                    },
                )),
                Err(e) => io_errors.push(format!("{}, segment {base}'s log: {e}", dir.display())),
            }
        }
        match (&mut open_at_base, &found) {
            (Some(open), Some(found)) => found.fold(open),
            _ => open_at_base = None,
        }
    }
}

/// The first entry of a segment's log (`logged`) that a consistent cut would resolve otherwise than the segment's
/// batches do (`walked`: every marker's entry, from the batches), described; `None` when all agree. An entry must be
/// the batches' one, except that it may say the transaction is whole (the tail appender saw it begin in the segment)
/// where its producer was not open at the segment's base (`open_at_base`; where a segment before it could not be
/// read, that is not checked): both resolve alike.
fn log_differs(
    logged: &[SegmentClosing],
    walked: &[SegmentClosing],
    open_at_base: Option<&BTreeSet<i64>>,
) -> Option<String> {
    logged.iter().find_map(|c| {
        let w = closed_log::find_in_segment(walked, c.producer_id, c.marker_offset);
        let agrees = w.is_some_and(|w| {
            w == c
                || (c.whole
                    && !w.whole
                    && w.data == c.data
                    && open_at_base.is_none_or(|open| !open.contains(&c.producer_id)))
        });
        (!agrees).then(|| {
            format!(
                "the segment's log of closed transactions, which a consistent cut trusts, says {c:?}; its batches \
                 give {}",
                w.map_or_else(|| "no such marker".to_string(), |w| format!("{w:?}"))
            )
        })
    })
}
