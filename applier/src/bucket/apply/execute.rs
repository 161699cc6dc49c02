//! Steps 5 and 6 of a run for one planned partition: install each planned version in offset order, record it once
//! durable, then sweep the files the catalog does not list.

use segment_format::partition_metadata::Uuid;
use segmirror_catalog::{EventKind, InstallOutcome, PartitionId, PartitionKey, Preceded, Subject};
use segmirror_transport::manifest::Manifest;

use super::{Applier, Planned};
use crate::bucket::plan::Step;
use crate::bucket::reconcile;
use crate::error::{Error, Result};
use crate::install::{self, Target};
use crate::mirror::MirrorLayout;
use crate::report::{InstalledSegment, PartitionOutcome, PartitionReport, Refusal, RefusedSegment, SkippedSegment};
use segment_format::progress::Progress;

impl Applier {
    /// Steps 5 (installing) and 6 for one planned partition. `Err` only for an injected crash (tests); every other
    /// failure ends up in the partition's report.
    pub(super) async fn execute(
        &self,
        layout: &MirrorLayout,
        p: Planned,
        progress: &dyn Progress,
    ) -> Result<PartitionReport> {
        let Planned {
            mut report,
            key,
            id,
            topic_id,
            dir,
            steps,
            mut installed,
            mut log_end,
        } = p;
        let mut dir_ready = false;
        let mut failed = false;
        let mut adopted = Vec::new();
        for step in steps {
            match step {
                Step::Skip { base_offset, why } => report.skipped.push(SkippedSegment { base_offset, why }),
                Step::Wait { base_offset, reason } => {
                    report.outcome = PartitionOutcome::Waiting { base_offset, reason };
                }
                Step::Refuse {
                    key: manifest_key,
                    base_offset,
                    refusal,
                } => {
                    self.refused(&key, &mut report, manifest_key, base_offset, refusal)
                        .await;
                    progress.segment_done();
                }
                Step::Install {
                    key: manifest_key,
                    manifest,
                    replaces,
                    preceded,
                } => {
                    let outcome = self
                        .install_one(
                            layout,
                            &key,
                            id,
                            &topic_id,
                            &dir,
                            &mut dir_ready,
                            &manifest_key,
                            &manifest,
                            replaces,
                            preceded,
                            progress,
                        )
                        .await;
                    progress.segment_done();
                    match outcome {
                        Ok(Ok(segment)) => {
                            if segment.reused_files as usize == manifest.all_files().count() {
                                adopted.push(segment.base_offset);
                            }
                            installed.insert(segment.base_offset);
                            log_end = log_end.max(Some(segment.next_offset));
                            report.bytes_fetched += segment.fetched_bytes;
                            report.bytes_reused += segment.reused_bytes;
                            report.installed.push(segment);
                        }
                        Ok(Err(refusal)) => {
                            self.refused(&key, &mut report, manifest_key, manifest.base_offset, refusal)
                                .await;
                            break;
                        }
                        #[cfg(feature = "failpoints")]
                        Err(e @ Error::Injected(_)) => return Err(e),
                        Err(e) => {
                            report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                            failed = true;
                            break;
                        }
                    }
                }
            }
        }
        if !failed {
            let sweep_dir = dir.clone();
            let keep = installed.clone();
            match tokio::task::spawn_blocking(move || reconcile::sweep(&sweep_dir, &keep, log_end)).await {
                Ok(Ok(removed)) => report.removed.extend(removed),
                Ok(Err(e)) => report.outcome = PartitionOutcome::Failed { error: e.to_string() },
                Err(e) => {
                    report.outcome = PartitionOutcome::Failed {
                        error: Error::task("sweep", e).to_string(),
                    }
                }
            }
        }
        if !report.removed.is_empty() || !adopted.is_empty() {
            let mut parts = Vec::new();
            if !adopted.is_empty() {
                parts.push(format!("adopted segment(s) {adopted:?} found complete on disk"));
            }
            if !report.removed.is_empty() {
                parts.push(format!(
                    "removed {} leftover file(s) of interrupted installs",
                    report.removed.len()
                ));
            }
            let detail = parts.join("; ");
            let event_key = key.clone();
            // Best effort: the event is for people; the state it describes is already durable.
            if let Err(e) = self
                .catalog
                .call("reconciled event", move |c| {
                    c.append_event(Subject::Partition(&event_key), EventKind::Reconciled, &detail)
                })
                .await
            {
                tracing::warn!(partition = %key, error = %e, "could not record the reconciliation event");
            }
        }
        Ok(report)
    }

    /// Record a refusal: the partition's outcome and a `segment_rejected` event.
    async fn refused(
        &self,
        key: &PartitionKey,
        report: &mut PartitionReport,
        manifest_key: String,
        base_offset: i64,
        refusal: Refusal,
    ) {
        let detail = format!("{manifest_key}: {refusal}");
        tracing::warn!(partition = %key, %detail, "segment refused");
        report.outcome = PartitionOutcome::Refused(RefusedSegment {
            base_offset,
            manifest_key,
            refusal,
        });
        let event_key = key.clone();
        if let Err(e) = self
            .catalog
            .call("rejection event", move |c| {
                c.append_event(Subject::Partition(&event_key), EventKind::SegmentRejected, &detail)
            })
            .await
        {
            tracing::warn!(partition = %key, error = %e, "could not record the rejection event");
        }
    }

    /// Install one version and record it. `Ok(Err(_))` is a refusal (including a catalog conflict).
    #[allow(clippy::too_many_arguments)]
    async fn install_one(
        &self,
        layout: &MirrorLayout,
        key: &PartitionKey,
        id: PartitionId,
        topic_id: &Uuid,
        dir: &std::path::Path,
        dir_ready: &mut bool,
        manifest_key: &str,
        manifest: &Manifest,
        replaces: Option<i64>,
        preceded: Preceded,
        progress: &dyn Progress,
    ) -> Result<std::result::Result<InstalledSegment, Refusal>> {
        if !*dir_ready {
            let (d, t) = (dir.to_path_buf(), *topic_id);
            tokio::task::spawn_blocking(move || install::ensure_partition_dir(&d, &t))
                .await
                .map_err(|e| Error::task("create partition dir", e))??;
            *dir_ready = true;
        }
        let staging_dir = layout.staging_dir(&key.topic, key.partition, manifest.base_offset, manifest.next_offset);
        let target = Target {
            store: self.config.store.as_ref(),
            partition_dir: dir,
            staging_dir: staging_dir.clone(),
            manifest_key,
            manifest,
            replaces: replaces.is_some(),
            verify: &self.config.verify,
            progress,
            appends: self.appends.as_ref(),
            #[cfg(feature = "failpoints")]
            failpoint: self.config.failpoint.clone(),
        };
        let placed = match install::install(&target).await? {
            Ok(placed) => placed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let (version, txn_ends) = (placed.version.clone(), placed.txn_ends.clone());
        let source_topic_id = topic_id.to_string();
        let recording = std::time::Instant::now();
        let receipt = self
            .catalog
            .try_call("mark installed", move |c| {
                c.mark_installed_after(id, &source_topic_id, &version, preceded, txn_ends.as_ref())
            })
            .await?;
        let receipt = match receipt {
            Ok(r) => r,
            Err(segmirror_catalog::Error::Conflict { reason, .. }) => {
                return Ok(Err(Refusal::Conflict {
                    reason: reason.to_string(),
                }))
            }
            Err(e) => return Err(e.into()),
        };
        let recorded = recording.elapsed();
        install::remove_staging(&staging_dir).await?;
        tracing::debug!(
            key = manifest_key,
            record_ms = recorded.as_millis(),
            cleanup_ms = (recording.elapsed() - recorded).as_millis(),
            "recorded"
        );
        Ok(Ok(InstalledSegment {
            base_offset: manifest.base_offset,
            next_offset: manifest.next_offset,
            sealed: manifest.sealed,
            log_bytes: placed.version.size,
            replaced: match receipt.outcome {
                InstallOutcome::Replaced { previous_next_offset } => Some(previous_next_offset),
                _ => replaces,
            },
            reused_files: placed.reused_files,
            already_recorded: receipt.outcome == InstallOutcome::AlreadyInstalled,
            fetched_bytes: placed.fetched_bytes,
            reused_bytes: placed.reused_bytes,
        }))
    }
}
