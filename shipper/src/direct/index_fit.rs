//! How a sealed segment's offset and time index travel: as the `index.interval.bytes` that rebuilds the broker's
//! own bytes (nothing else on the wire), or, when no interval does, as the broker's bytes.
//!
//! Why the shipper works it out: the interval is a topic config that the log dir does not record, and only the
//! shipper holds the broker's index. It reads it off that index ([`IntervalFit`]: one header scan of the sealed
//! `.log`, which the seal's hash pass just read into the page cache) and then proves its choice by rebuilding both
//! indexes with it and comparing them with the broker's files: a seal never names an interval whose rebuild the
//! applier would refuse. Kafka's default needs no name (`REBUILD_INDEX_INTERVAL_BYTES` in `applier::tail`), so
//! a topic at the default sends what it always sent.
//!
//! When no interval reproduces the broker's index (a broker restarted inside the segment counts its bytes since the
//! last entry from 0 again; a follower before Kafka 4.1 indexed per appended chunk), the indexes go inline when at
//! most [`MAX_INLINE_REPLACEMENT_INDEX_BYTES`](super::MAX_INLINE_REPLACEMENT_INDEX_BYTES); a larger one still goes
//! as a digest and the applier's rebuild refuses the seal, naming both digests (logged at warn by the seal).

use std::ops::ControlFlow;
use std::path::Path;

use segment_format::index::{
    pick_interval, read_index_file, IntervalFit, OffsetIndex, OffsetIndexBuilder, TimeIndexBuilder,
    DEFAULT_INDEX_INTERVAL_BYTES,
};
use segment_format::log::LogFile;

use crate::error::Result;

/// How the offset and time index of a sealed segment travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IndexForm {
    /// A rebuild with this `index.interval.bytes` gives the broker's bytes of both.
    Rebuild(u64),
    /// No interval does: the broker's bytes must travel.
    Broker,
}

impl IndexForm {
    /// The interval a seal names: none for Kafka's default (what an applier assumes), or one that fits a `u32`.
    pub(super) fn interval(self) -> Option<u32> {
        match self {
            IndexForm::Rebuild(DEFAULT_INDEX_INTERVAL_BYTES) | IndexForm::Broker => None,
            IndexForm::Rebuild(i) => u32::try_from(i).ok(),
        }
    }
}

/// The form for the sealed segment `log` (base offset `base`) with the broker's `index` and `time_index`.
/// `default_built`: the offset and time index a rebuild at [`DEFAULT_INDEX_INTERVAL_BYTES`] gives, when the caller
/// built them as the segment was shipped (`running`); equal to the broker's, they settle it without reading `log`.
pub(super) fn fit(
    log: &Path,
    base: i64,
    index: &Path,
    time_index: Option<&Path>,
    default_built: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<IndexForm> {
    let index_bytes = read_index_file(index)?;
    let parsed = OffsetIndex::parse(&index_bytes);
    // A zero tail or a partial slot (an untrimmed index) is nothing a rebuild writes.
    if parsed.layout.zero_tail > 0 || parsed.layout.partial_bytes > 0 {
        return Ok(IndexForm::Broker);
    }
    let time_bytes = time_index.map(read_index_file).transpose()?;
    if let Some((offsets, times)) = default_built {
        if *offsets == index_bytes && time_bytes.as_ref().is_none_or(|t| t == times) {
            return Ok(IndexForm::Rebuild(DEFAULT_INDEX_INTERVAL_BYTES));
        }
    }
    let mut fit = IntervalFit::new(base, &parsed.entries);
    let default = rebuild(log, base, DEFAULT_INDEX_INTERVAL_BYTES, Some(&mut fit))?;
    let Some(range) = fit.finish() else {
        return Ok(IndexForm::Broker);
    };
    let interval = pick_interval(&range);
    let (offsets, times) = match (interval, default) {
        (DEFAULT_INDEX_INTERVAL_BYTES, Some(built)) => built,
        _ => match rebuild(log, base, interval, None)? {
            Some(built) => built,
            None => return Ok(IndexForm::Broker),
        },
    };
    let same = offsets == index_bytes && time_bytes.is_none_or(|t| t == times);
    Ok(if same {
        IndexForm::Rebuild(interval)
    } else {
        IndexForm::Broker
    })
}

/// The offset and time index bytes a rebuild with `interval` gives (`None`: the builders refused a batch), feeding
/// `fit` the batches on the way.
fn rebuild(
    log: &Path,
    base: i64,
    interval: u64,
    mut fit: Option<&mut IntervalFit<'_>>,
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut offsets = OffsetIndexBuilder::new(base, interval);
    let mut times = TimeIndexBuilder::new(base, interval);
    let mut refused = false;
    LogFile::open(log)?.scan(|frame| {
        if let Some(fit) = fit.as_deref_mut() {
            fit.push(&frame.info);
        }
        if offsets.push(&frame.info).is_err() || times.push(&frame.info).is_err() {
            refused = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    if refused {
        return Ok(None);
    }
    times.seal();
    Ok(Some((offsets.to_bytes(), times.to_bytes())))
}

#[cfg(test)]
#[path = "index_fit_tests.rs"]
mod tests;
