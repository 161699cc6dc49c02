//! `segmirror verify` of mirror roots: the segment checks of `segment_format::verify`, with the mirror root's own
//! entries known for what they are, and with `--deep` what the appliers recorded for promotion checked against the
//! bytes: the tail appender's kept facts, and the catalog's record of each installed segment's transactions. Here
//! rather than in `mirror` because it needs `direct` and the catalog too, and `mirror` is the layer below both
//! appliers, importing neither.

use std::path::{Path, PathBuf};

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::error::Defect;
use segment_format::report::Finding;
use segment_format::txn_ends;
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
/// of an open transaction). A segment no longer in the mirror, or without a record, is skipped.
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
            for (base, (next, ends)) in recorded {
                let Some(ends) = ends else { continue };
                let log = dir.join(segment_file_name(base, SegmentFileKind::Log));
                if !log.is_file() {
                    continue;
                }
                // A record written before runs (or closings) were kept is compared without them.
                let found = txn_ends::of_log(&log, next).map(|found| {
                    found.map(|f| match (ends.closings.is_some(), ends.runs.is_empty()) {
                        (true, _) => f,
                        (false, true) => f.without_runs(),
                        (false, false) => f.without_closings(),
                    })
                });
                match found {
                    Ok(Some(found)) if found == ends => {}
                    Ok(found) => findings.push(Finding::error(
                        &log,
                        None,
                        None,
                        Defect::Other {
                            message: format!(
                                "the catalog's record of this segment's transactions, which promotion trusts, says \
                                 {}; its batches below offset {next} give {}",
                                ends.encode(),
                                found.map_or_else(|| "too many producers to record".to_string(), |f| f.encode())
                            ),
                        },
                    )),
                    Err(e) => io_errors.push(format!("{}: {e}", log.display())),
                }
            }
        }
    }
    (findings, io_errors)
}
