//! Versions already shipped, committed again without uploading their data: an unsealed version whose range the
//! source has sealed since (`seal`, see `plan`), and one that gained its log-end producer snapshot
//! (`add_end_snapshot`). Each is a new manifest over the shipped objects, under the lease like any commit.

use std::path::PathBuf;

use segment_format::dir::{SegmentFileKind, SegmentFiles};
use segmirror_transport::manifest::{Manifest, ManifestFile};

use super::{blocking, Common, PartitionShipper, Stop};
use crate::source::{self, SegmentStats};

impl PartitionShipper<'_, '_> {
    /// Re-commit a shipped unsealed version, unchanged, with the log-end snapshot the source wrote since.
    pub(super) async fn add_end_snapshot(
        &mut self,
        shipped: Manifest,
        end: source::EndSnapshot,
        common: &Common<'_>,
    ) -> Result<(), Stop> {
        let (base, next) = (shipped.base_offset, shipped.next_offset);
        if self.ensure_lease().await? && self.shipped(base).await?.as_ref() != Some(&shipped) {
            // Another shipper committed meanwhile; the next run decides on what is there now.
            return Ok(());
        }
        let stats = SegmentStats {
            first_offset: shipped.first_offset,
            last_offset: shipped.last_offset,
            batches: shipped.batches,
            records: shipped.records,
            max_timestamp: shipped.max_timestamp,
        };
        let mut manifest = self.manifest(base, next, false, shipped.files, common, stats);
        manifest.format = shipped.format;
        manifest.log_chunks = shipped.log_chunks;
        manifest.end_snapshot = Some(self.upload_end_snapshot(base, next, end).await?);
        self.commit(manifest).await
    }

    /// Re-commit a shipped unsealed version, whose range the source has now
    /// sealed, as sealed (see `plan`). Its objects are reused; a producer
    /// snapshot the source has gained is uploaded (to a key no manifest names).
    pub(super) async fn seal(
        &mut self,
        segment: &SegmentFiles,
        snapshot: Option<PathBuf>,
        shipped: Manifest,
        common: &Common<'_>,
    ) -> Result<(), Stop> {
        let base = segment.base_offset;
        let seg = segment.clone();
        let found = match blocking("stat segment", move || source::seal_in_place(&seg, snapshot.as_deref())).await? {
            Ok(found) => found,
            Err(e) => return Err(Stop::Changed(e.to_string())),
        };
        for warning in found.warnings {
            self.warn(warning);
        }
        let mut files: Vec<ManifestFile> = shipped.files.clone();
        for f in &mut files {
            if let Some((_, mtime)) = found.mtimes.iter().find(|(k, _)| *k == f.name.kind) {
                f.mtime_ms = *mtime;
            }
        }
        if let (None, Some(local)) = (shipped.file(SegmentFileKind::Snapshot), found.snapshot) {
            files.push(self.upload(base, shipped.next_offset, &local).await?);
        }
        let stats = SegmentStats {
            first_offset: shipped.first_offset,
            last_offset: shipped.last_offset,
            batches: shipped.batches,
            records: shipped.records,
            max_timestamp: shipped.max_timestamp,
        };
        let mut manifest = self.manifest(base, shipped.next_offset, true, files, common, stats);
        // The chunks are the sealed segment's `.log` as they were for the unsealed version.
        manifest.format = shipped.format;
        manifest.log_chunks = shipped.log_chunks;
        self.commit(manifest).await
    }
}
