//! Steps 1 to 4 of a run for one partition, and its plan: the catalog's gate, the lineage, the manifests not
//! settled, the partition's record, the directory reconciled with the catalog, then the steps to take.

use segmirror_catalog::{EventKind, PartitionId, PartitionState, PartitionUpsert, Subject, Upsert};
use segmirror_transport::manifest::Manifest;

use super::{Applier, Planned, Prepared, Read};
use crate::bucket::plan::{plan, Candidate, Installed, Step};
use crate::bucket::read::{
    self, choose_lineage, LineageChoice, ManifestRead, PartitionObjects, MANIFEST_READ_CONCURRENCY,
};
use crate::bucket::reconcile;
use crate::error::{Error, Result};
use crate::mirror::MirrorLayout;
use crate::report::{PartitionOutcome, PartitionReport, Refusal, SkipReason};
use futures::StreamExt;
use segmirror_catalog::PartitionKey;

/// Where a manifest's data provably ends: after its last batch for a sealed segment (whose `next` is the following
/// segment's base, not proven by its own batches), its `next` for an active-segment prefix (which the install checks
/// against the last batch), its base when it holds no batch.
fn data_end(m: &Manifest) -> i64 {
    match (m.sealed, m.last_offset) {
        (true, Some(last)) => last.saturating_add(1),
        (true, None) => m.base_offset,
        (false, _) => m.next_offset,
    }
}

impl Applier {
    /// Steps 1 to 3 of the module docs for one partition (steps 4 and 5 follow in [`Applier::plan_recorded`], once
    /// the partitions are recorded together).
    pub(super) async fn prepare(
        &self,
        key: PartitionKey,
        objects: PartitionObjects,
        report: &mut PartitionReport,
        notes: &mut Vec<String>,
    ) -> Result<Prepared> {
        let lookup_key = key.clone();
        let recorded = self
            .catalog
            .call("partition", move |c| match c.partition(&lookup_key) {
                Ok(p) => Ok(Some(p)),
                Err(segmirror_catalog::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            })
            .await?;
        if let Some(p) = &recorded {
            report.source_topic_id = Some(p.source_topic_id.clone());
            let skip = match p.state {
                PartitionState::Mirroring => None,
                PartitionState::Paused => Some(SkipReason::Paused),
                PartitionState::Promoted => Some(SkipReason::Promoted),
            };
            if let Some(reason) = skip {
                report.outcome = PartitionOutcome::Skipped { reason };
                return Ok(Prepared::Done);
            }
        }
        let (topic_id, older) =
            match choose_lineage(recorded.as_ref().map(|p| p.source_topic_id.as_str()), &objects.lineages) {
                LineageChoice::Nothing => return Ok(Prepared::Done),
                LineageChoice::Break { recorded: old, offered } => {
                    let id = recorded.as_ref().map(|p| p.id);
                    return self.lineage_break(key, id, old, offered.to_string(), report).await;
                }
                LineageChoice::Use { topic_id, older } => (topic_id, older),
            };
        if !older.is_empty() {
            let older: Vec<String> = older.iter().map(|id| id.to_string()).collect();
            notes.push(format!(
                "{key}: ignoring older lineage(s) {} in the store (a deleted topic's leftovers)",
                older.join(", ")
            ));
        }
        report.source_topic_id = Some(topic_id.to_string());
        let installed: Vec<Installed> = match &recorded {
            Some(p) => {
                let id = p.id;
                self.catalog
                    .call("installed segments", move |c| c.installed_segments(id))
                    .await?
                    .iter()
                    .map(Installed::from)
                    .collect()
            }
            None => Vec::new(),
        };

        // Read what is not settled.
        let lineage = objects.lineages.get(&topic_id).map(|l| &l.manifests);
        let mut candidates = Vec::new();
        let mut to_read = Vec::new();
        for (&base, info) in lineage.into_iter().flatten() {
            if installed.iter().any(|s| s.base_offset == base && s.sealed) {
                candidates.push(Candidate::Settled { base_offset: base });
            } else {
                to_read.push((base, info.key.clone()));
            }
        }
        let (store, prefix) = (self.config.store.as_ref(), &self.config.prefix);
        let reads: Vec<(i64, String, Result<ManifestRead>)> = futures::stream::iter(to_read)
            .map(|(base, key)| async move {
                let read = read::read_manifest(store, prefix, &key).await;
                (base, key, read)
            })
            .buffered(MANIFEST_READ_CONCURRENCY)
            .collect()
            .await;
        let mut log_start_offset = recorded.as_ref().map_or(0, |p| p.log_start_offset);
        let mut valid = Vec::new();
        for (base, key, read) in reads {
            match read? {
                ManifestRead::Valid(manifest) => valid.push((key, manifest)),
                ManifestRead::Invalid(refusal) => candidates.push(Candidate::Invalid {
                    key,
                    base_offset: base,
                    refusal,
                }),
                ManifestRead::Gone => {}
            }
        }
        // A log start offset is a claim about the source no batch proves; it is believed only up to the end of what
        // the partition's data shows, so an absurd one (2^63-1) is refused with its manifest and never recorded.
        let shipped_end = valid
            .iter()
            .map(|(_, m)| data_end(m))
            .chain(installed.last().map(|s| s.next_offset))
            .max()
            .unwrap_or(0);
        for (key, manifest) in valid {
            if manifest.log_start_offset > shipped_end {
                candidates.push(Candidate::Invalid {
                    base_offset: manifest.base_offset,
                    refusal: Refusal::InvalidManifest {
                        reason: format!(
                            "{key}: log start offset {} lies beyond every offset shipped for this partition (up to \
                             {shipped_end}); if a seed is still shipping, the next run picks it up",
                            manifest.log_start_offset
                        ),
                    },
                    key,
                });
            } else {
                log_start_offset = log_start_offset.max(manifest.log_start_offset);
                candidates.push(Candidate::Read { key, manifest });
            }
        }

        Ok(Prepared::Read(Box::new(Read {
            key,
            topic_id,
            log_start_offset,
            installed,
            candidates,
        })))
    }

    /// Record or confirm the partitions `read` in the catalog, all in one transaction; if that transaction fails
    /// (the database, not a partition), one at a time as before, so that one partition's failure stays its own.
    pub(super) async fn record_partitions(
        &self,
        read: &[Read],
    ) -> Result<Vec<std::result::Result<Upsert, segmirror_catalog::Error>>> {
        let batch: Vec<PartitionUpsert> = read
            .iter()
            .map(|r| PartitionUpsert {
                key: r.key.clone(),
                source_topic_id: r.topic_id.to_string(),
                log_start_offset: r.log_start_offset,
            })
            .collect();
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let one_by_one = batch.clone();
        match self
            .catalog
            .try_call("record partitions", move |c| c.upsert_partitions(&batch))
            .await?
        {
            Ok(outcomes) => Ok(outcomes),
            Err(e) => {
                tracing::warn!(error = %e, "recording the partitions together failed; recording them one at a time");
                let mut outcomes = Vec::with_capacity(one_by_one.len());
                for p in one_by_one {
                    let outcome = self
                        .catalog
                        .try_call("upsert partition", move |c| {
                            c.upsert_partition(&p.key, &p.source_topic_id, p.log_start_offset)
                        })
                        .await?;
                    outcomes.push(outcome);
                }
                Ok(outcomes)
            }
        }
    }

    /// Plan a partition once its record is made or confirmed (`upsert`): reconcile its directory, plan its steps.
    pub(super) async fn plan_recorded(
        &self,
        layout: &MirrorLayout,
        read: Read,
        upsert: std::result::Result<Upsert, segmirror_catalog::Error>,
        report: &mut PartitionReport,
    ) -> Result<Prepared> {
        let Read {
            key,
            topic_id,
            installed,
            candidates,
            ..
        } = read;
        let partition = match upsert {
            Ok(Upsert::Created(p) | Upsert::Existing(p)) => p,
            Ok(Upsert::LineageBreak {
                partition,
                offered_source_topic_id,
            }) => {
                let old = partition.source_topic_id.clone();
                return self
                    .lineage_break(key, Some(partition.id), old, offered_source_topic_id, report)
                    .await;
            }
            Err(segmirror_catalog::Error::Promoted { .. }) => {
                report.outcome = PartitionOutcome::Skipped {
                    reason: SkipReason::LinkPromoted,
                };
                return Ok(Prepared::Done);
            }
            Err(e) => return Err(e.into()),
        };
        if partition.state == PartitionState::Promoted {
            report.outcome = PartitionOutcome::Skipped {
                reason: SkipReason::Promoted,
            };
            return Ok(Prepared::Done);
        }

        // Reconcile.
        let dir = layout.partition_dir(&key.topic, key.partition);
        let (scan_dir, name, checked_installed) = (dir.clone(), report.name(), installed.clone());
        let (removed, dirty) = tokio::task::spawn_blocking(move || -> Result<_> {
            let disk = reconcile::scan(&scan_dir)?;
            let mut removed = Vec::new();
            if let Some(disk) = &disk {
                reconcile::check_lineage(&scan_dir, disk, &topic_id)?;
                removed = reconcile::remove_temp_files(&scan_dir, disk)?;
            }
            let dirty = reconcile::check_installed(&name, &scan_dir, disk.as_ref(), &checked_installed)?;
            Ok((removed, dirty))
        })
        .await
        .map_err(|e| Error::task("reconcile", e))??;
        report.removed.extend(removed);

        let steps = plan(&installed, candidates);
        if let Some(base) = dirty {
            let reinstalled = steps.iter().any(
                |s| matches!(s, Step::Install { manifest, replaces: Some(_), .. } if manifest.base_offset == base),
            );
            if !reinstalled {
                let path = dir.join(segment_format::dir::segment_file_name(
                    base,
                    segment_format::dir::SegmentFileKind::Log,
                ));
                return Err(Error::DiskBehindCatalog {
                    partition: report.name(),
                    base_offset: base,
                    path,
                    reason: "its .log is longer than recorded (an interrupted replacement) and the store holds no \
                             longer version to complete it with"
                        .into(),
                });
            }
        }
        Ok(Prepared::Planned(Box::new(Planned {
            report: report.clone(),
            id: partition.id,
            key,
            topic_id,
            dir,
            steps,
            installed: installed.iter().map(|s| s.base_offset).collect(),
            log_end: installed.last().map(|s| s.next_offset),
        })))
    }

    /// Report a lineage break: log the event, pause the partition (if recorded), skip it.
    async fn lineage_break(
        &self,
        key: PartitionKey,
        id: Option<PartitionId>,
        recorded: String,
        offered: String,
        report: &mut PartitionReport,
    ) -> Result<Prepared> {
        let detail = format!(
            "the store holds source topic id {offered}, the mirror holds {recorded}: the source topic was \
             recreated; not merged, partition paused (start the new lineage to mirror it)"
        );
        self.catalog
            .call("lineage break", move |c| {
                c.append_event(Subject::Partition(&key), EventKind::LineageBreak, &detail)?;
                if let Some(id) = id {
                    c.set_partition_state(id, PartitionState::Paused)?;
                }
                Ok(())
            })
            .await?;
        report.outcome = PartitionOutcome::Skipped {
            reason: SkipReason::LineageBreak { recorded, offered },
        };
        Ok(Prepared::Done)
    }
}
