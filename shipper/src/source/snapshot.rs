//! The producer snapshot a broker writes at the log end, read for shipping.
//!
//! A broker writes `<next>.snapshot` when it shuts down cleanly (and on a roll,
//! for the new segment's base). Shipped with the active prefix it ends at, it
//! lets the mirror start with the source's producer state instead of
//! rebuilding it. A running broker may be writing it while we read, so it is
//! read whole, capped at [`MAX_SNAPSHOT_BYTES`], parsed, and the bytes that
//! parsed are what is shipped: never the file, which may change after.

use std::path::Path;

use segment_format::report::Finding;
use segment_format::snapshot::ProducerSnapshot;
use segment_format::{Defect, Error};
use segmirror_transport::manifest::MAX_SNAPSHOT_BYTES;

use super::guard::{is_not_found, mtime_ms};

/// The producer snapshot a broker wrote at the log end, read whole.
#[derive(Debug, Clone)]
pub struct EndSnapshot {
    /// The bytes that parsed; these (not the file, which a broker may rewrite) are uploaded.
    pub bytes: Vec<u8>,
    /// The file's modification time.
    pub mtime_ms: i64,
}

/// The producer snapshot at the log end `next` (written by a broker at clean shutdown), read whole and parsed. A
/// running broker's may be empty or half written: one that does not parse, or exceeds [`MAX_SNAPSHOT_BYTES`], is
/// left out with a warning, as if it were not there (the mirror then rebuilds producer state from the base
/// snapshot and the batches, which gives the same state).
pub fn end_snapshot(path: &Path, next: i64) -> std::result::Result<(Option<EndSnapshot>, Option<Finding>), Error> {
    use std::io::Read as _;
    let left_out = |message: String| {
        Finding::warning(
            path,
            None,
            Some(next),
            Defect::Snapshot {
                message: format!("end snapshot not shipped: {message}"),
            },
        )
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, None)),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_SNAPSHOT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Ok((None, Some(left_out(format!("larger than {MAX_SNAPSHOT_BYTES} bytes")))));
    }
    if let Err(e) = ProducerSnapshot::parse(&bytes) {
        let finding = Finding::from_error(&e.at(path));
        return Ok((None, Some(left_out(finding.defect.to_string()))));
    }
    let mtime_ms = match mtime_ms(path) {
        Ok(ms) => ms,
        Err(e) if is_not_found(&e) => return Ok((None, None)),
        Err(e) => return Err(e),
    };
    Ok((Some(EndSnapshot { bytes, mtime_ms }), None))
}
