//! `segmirror verify` of mirror roots: the segment checks of `segment_format::verify`, with the mirror root's own
//! entries known for what they are, and with `--deep` what the tail appender kept for promotion checked against
//! the bytes. Here rather than in `mirror` because it needs `direct` too, and `mirror` is the layer below both
//! appliers, importing neither.

use std::path::PathBuf;

use segment_format::verify::{Progress, Report, VerifyOptions};

use crate::direct;
use crate::mirror::{tail_dir, MIRROR_ROOT_ENTRIES};

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
