//! A continuous shipper's rounds of the active segment (`crate::source::incremental`): the version derived from
//! the state kept since the last round, reading only the bytes appended since, and the state established from the
//! bucket's version when there is none. Split from `partition` to keep one concern per file.

use std::path::PathBuf;

use segment_format::dir::{SegmentFileKind, SegmentFiles};

use super::{blocking, PartitionShipper, Stop};
use crate::bucket::seed::chunks::Reading;
use crate::source::incremental::ActiveTail;
use crate::source::{self, Prepared};

impl PartitionShipper<'_, '_> {
    /// The active segment's version from the state a continuous shipper kept since its last round, reading only
    /// the bytes appended since (`source::incremental`): the prepared version, the reading `upload_chunked` would
    /// otherwise make of the whole prefix, and the state after it. `None` when there is no state, or it is not the
    /// version the bucket holds, or it cannot continue: then the segment is prepared from byte 0, as `seed` does.
    pub(super) async fn incremental(
        &mut self,
        segment: &SegmentFiles,
        snapshot: Option<PathBuf>,
    ) -> Result<Option<(Box<Prepared>, Reading, ActiveTail)>, Stop> {
        let Some(held) = self.ctx.held else { return Ok(None) };
        let Some(state) = held.tail(&self.source.dir) else {
            return Ok(None);
        };
        held.drop_tail(&self.source.dir);
        let base = segment.base_offset;
        if state.tail.base_offset != base || *state.path() != segment.log || self.ctx.prepare.verify.is_deep() {
            return Ok(None);
        }
        // The state must describe exactly the version in the bucket (another shipper may have committed between
        // rounds; its lease then fences this one at the commit anyway).
        let matches = self.shipped(base).await?.is_some_and(|m| {
            let log = m.file(SegmentFileKind::Log);
            let digest = state.digest();
            !m.sealed
                && m.next_offset == state.next_offset()
                && log.is_some_and(|f| f.size == digest.size && f.sha256 == digest.sha256 && f.crc32c == digest.crc32c)
        });
        if !matches {
            return Ok(None);
        }
        let staging = self.ctx.prepare.staging_dir.clone().unwrap_or_else(std::env::temp_dir);
        let seg = segment.clone();
        let partition = self.report.name();
        let built = blocking("read the active segment's new bytes", move || {
            let (next, read, pending, new_bytes) = match source::incremental::advance(&state, None, Some(&staging)) {
                Ok(source::incremental::Advance::Grown {
                    next,
                    read,
                    pending,
                    new_bytes,
                }) => (next, read, pending, new_bytes),
                Ok(source::incremental::Advance::Unusable(reason)) => {
                    tracing::info!(%partition, base, reason, "active segment read from byte 0 again");
                    return Ok(None);
                }
                Err(e) => {
                    tracing::info!(%partition, base, error = %e, "active segment read from byte 0 again");
                    return Ok(None);
                }
            };
            let log_mtime = source::guard::mtime_ms(&seg.log)?;
            let (offset_index, time_index) = (next.offset_index(), next.time_index());
            let version = source::bound::ActiveFiles {
                prefix: next.len(),
                next: next.next_offset(),
                log_mtime,
                offset_index: &offset_index,
                time_index: &time_index,
            };
            let (files, warnings) = source::bound::active_files(&seg, snapshot.as_deref(), &version)?;
            let whole = next.digest();
            let range =
                segmirror_transport::manifest::SegmentRange::new(base, next.next_offset()).map_err(|reason| {
                    segment_format::Error::BadName {
                        path: seg.log.clone(),
                        reason,
                    }
                })?;
            let prepared = Prepared {
                range,
                sealed: false,
                files,
                stats: next.stats,
                guard: source::SourceGuard::LogCrc32c(whole.crc32c),
                excluded_tail: pending,
                warnings,
                // Nothing of the file is remembered by the one-shot seed's memory here: the kept state is this
                // process's own (`source_identity` is for that memory).
                source_identity: None,
                log_bytes_scanned: read,
                // The new bytes of an active segment a broker just wrote: its own cached pages.
                cache_footprint: source::CacheFootprint::default(),
            };
            Ok(Some((
                Box::new(prepared),
                Reading::Ready { whole, new_bytes },
                *next,
                read,
            )))
        })
        .await?
        .map_err(|e: segment_format::Error| Stop::Changed(e.to_string()))?;
        Ok(built.map(|(prepared, reading, next, read)| {
            held.count_tail_read(read);
            (prepared, reading, next)
        }))
    }

    /// Establish the state a continuous shipper's next rounds continue from: the active segment's prefix the bucket
    /// now holds, read once and compared with the manifest's `.log` entry (a source that no longer has those bytes
    /// gets no state; the next round prepares it from byte 0 again).
    pub(super) async fn establish(&mut self, segment: &SegmentFiles) -> Result<(), Stop> {
        let Some(held) = self.ctx.held else { return Ok(()) };
        let base = segment.base_offset;
        let Some(Some(m)) = self.bucket.read.get(&base).cloned() else {
            return Ok(());
        };
        let Some(log) = m.file(SegmentFileKind::Log).cloned() else {
            return Ok(());
        };
        if m.sealed || self.ctx.prepare.verify.is_deep() {
            return Ok(());
        }
        held.count_full_read();
        let (path, interval) = (segment.log.clone(), self.ctx.prepare.index_interval_bytes);
        let state = blocking("establish the active segment's state", move || {
            let start = source::incremental::ActiveTail::start(&path, base, interval)?;
            source::incremental::advance(&start, Some(log.size), None)
        })
        .await?;
        if let Ok(source::incremental::Advance::Grown { next, .. }) = state {
            let digest = next.digest();
            if digest.size == log.size && digest.sha256 == log.sha256 && next.next_offset() == m.next_offset {
                held.keep_tail(&self.source.dir, *next);
            }
        }
        Ok(())
    }
}
