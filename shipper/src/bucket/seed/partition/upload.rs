//! A version's objects going up: each file of `[base, next)` to its data key, the active segment's `.log` as
//! chunks (the ones shipped before, checked against the source's bytes, plus one of the bytes after them), and the
//! log-end producer snapshot. Only data objects: the manifest naming them is committed after all of them
//! (`PartitionShipper::commit`), so a manifest never names an object that is not complete.

use segment_format::dir::SegmentFileKind;
use segmirror_transport::manifest::{LogChunk, ManifestFile, SegmentFileName};
use segmirror_transport::Error as TransportError;

use super::{blocking, failed, PartitionShipper, Stop};
use crate::bucket::seed::chunks::{read_for_chunks, Reading};
use crate::bucket::seed::report::{FailureKind, PartitionStatus};
use crate::source::{self, LocalFile};

impl PartitionShipper<'_, '_> {
    /// Upload one file of the version `[base, next)`.
    pub(super) async fn upload(&mut self, base: i64, next: i64, file: &LocalFile) -> Result<ManifestFile, Stop> {
        let range = segmirror_transport::manifest::SegmentRange::new(base, next)
            .map_err(|reason| failed(FailureKind::Source, reason))?;
        let name = SegmentFileName::new(base, file.kind);
        let key = self
            .key
            .data_key(&self.topic_id(), range, name)
            .map_err(|e| failed(FailureKind::Source, e.to_string()))?;
        let staged = match &file.rebuilt {
            Some(bytes) => self.ctx.store.stage_bytes(&key, bytes.clone()).await,
            None => self.ctx.store.stage_file(&key, &file.path, Some(file.len)).await,
        };
        let summary = match staged {
            Ok(s) => s,
            // The source file vanished or shrank while being read.
            Err(TransportError::Io { path, source })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                return Err(Stop::Changed(format!("{}: {source}", path.display())))
            }
            Err(e) => return Err(e.into()),
        };
        self.report.bytes_uploaded += summary.digest.size;
        Ok(ManifestFile {
            name,
            key,
            size: summary.digest.size,
            crc32c: summary.digest.crc32c,
            sha256: summary.digest.sha256,
            mtime_ms: file.mtime_ms,
        })
    }

    /// The `.log` of `[base, next)` as chunks: `reuse` (checked against the source's bytes) plus one new chunk
    /// of the bytes after them, ending where `chunk_next` starts. Returns the `.log` entry (the assembled file; its
    /// key names no object) and every chunk.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn upload_chunked(
        &mut self,
        base: i64,
        next: i64,
        chunk_next: i64,
        file: &LocalFile,
        reuse: &[LogChunk],
        sealed: bool,
        reading: Option<Reading>,
    ) -> Result<Option<(ManifestFile, Vec<LogChunk>)>, Stop> {
        let range = |next| {
            segmirror_transport::manifest::SegmentRange::new(base, next)
                .map_err(|reason| failed(FailureKind::Source, reason))
        };
        let staging = self.ctx.prepare.staging_dir.clone().unwrap_or_else(std::env::temp_dir);
        let (path, len, reused) = (file.path.clone(), file.len, reuse.to_vec());
        // A continuous shipper's incremental round read the new bytes already, and only those.
        let reading = match reading {
            Some(reading) => reading,
            None => {
                let reading = blocking("read source for chunks", move || {
                    read_for_chunks(&path, len, &reused, &staging)
                })
                .await?
                .map_err(|e| Stop::Changed(format!("{}: {e}", file.path.display())))?;
                self.report.log_bytes_scanned += len;
                reading
            }
        };
        let (whole, new_bytes) = match reading {
            Reading::Ready { whole, new_bytes } => (whole, new_bytes),
            Reading::Short { at } => {
                return Err(Stop::Changed(format!(
                    "{}: ends at byte {at}, below the verified {len}",
                    file.path.display()
                )))
            }
            // A sealed segment the cleaner compacted since its active prefix was shipped: its bytes legitimately
            // differ; it is shipped whole, to new keys, as before chunks.
            Reading::Differs { key, field, .. } if sealed => {
                tracing::info!(partition = %self.report.name(), base, key, field, "sealed segment rewritten since its prefix was shipped; shipping it whole");
                return Ok(None);
            }
            Reading::Differs { key, from, to, field } => {
                return Err(Stop::Status(PartitionStatus::Diverged {
                    base_offset: base,
                    shipped_next_offset: reuse.last().map_or(base, |c| c.next_offset),
                    source_next_offset: next,
                    reason: format!(
                        "the source's bytes [{from}, {to}) differ from shipped chunk {key} ({field}): it was \
                         truncated and rewritten; the shipped chunks are not overwritten"
                    ),
                }))
            }
        };
        let mut chunks = reuse.to_vec();
        if let Some((temp, digest)) = new_bytes {
            let from = reuse.last().map_or(0, |c| c.to);
            let key = self.key.chunk_key(&self.topic_id(), range(chunk_next)?, from);
            let staged = self.ctx.store.stage_file(&key, temp.path(), None).await?;
            if staged.digest != digest {
                return Err(Stop::Changed(format!(
                    "{}: the uploaded chunk differs from the bytes read",
                    file.path.display()
                )));
            }
            self.report.bytes_uploaded += digest.size;
            chunks.push(LogChunk {
                from,
                to: from + digest.size,
                next_offset: chunk_next,
                key,
                crc32c: digest.crc32c,
                sha256: digest.sha256,
            });
        }
        let name = SegmentFileName::new(base, SegmentFileKind::Log);
        let key = self
            .key
            .data_key(&self.topic_id(), range(next)?, name)
            .map_err(|e| failed(FailureKind::Source, e.to_string()))?;
        let log = ManifestFile {
            name,
            key,
            size: whole.size,
            crc32c: whole.crc32c,
            sha256: whole.sha256,
            mtime_ms: file.mtime_ms,
        };
        Ok(Some((log, chunks)))
    }

    /// Upload the log-end producer snapshot of the version `[base, next)`: the bytes that parsed, not the file.
    pub(super) async fn upload_end_snapshot(
        &mut self,
        base: i64,
        next: i64,
        end: source::EndSnapshot,
    ) -> Result<ManifestFile, Stop> {
        let range = segmirror_transport::manifest::SegmentRange::new(base, next)
            .map_err(|reason| failed(FailureKind::Source, reason))?;
        let key = self.key.end_snapshot_key(&self.topic_id(), range);
        let digest = self.ctx.store.stage_bytes(&key, end.bytes.into()).await?.digest;
        self.report.bytes_uploaded += digest.size;
        Ok(ManifestFile {
            name: SegmentFileName::new(next, SegmentFileKind::Snapshot),
            key,
            size: digest.size,
            crc32c: digest.crc32c,
            sha256: digest.sha256,
            mtime_ms: end.mtime_ms,
        })
    }
}
