//! Putting built partitions live and recording them: each `.ready` directory takes the live partition's place
//! (which is kept as `.old` in staging), the root checkpoints are rewritten, the catalog marks the partitions
//! promoted, and staging is removed.
//!
//! Why this order: every step is idempotent and the names on disk (`.ready`, `.old`) say how far each partition
//! got, so a rerun after a crash at any point finishes exactly the journaled promotion.

use std::path::Path;

use segment_format::durable::fsync_dir;
use segmirror_catalog::{Catalog, EventKind, PartitionKey, PartitionState, Subject};

use super::build::{build, staged, OLD, READY};
use super::error::Result;
use super::files::{remove_dir_all, remove_file, rename};
use super::journal::{Journal, Planned, Step, JOURNAL_FILE, PROMOTION_DIR};
use super::report::{Outcome, PromotedPartition};
use super::target;

/// Carry out a journaled promotion from whatever state the disk is in. Every step is idempotent.
pub(super) fn execute(
    journal: &Journal,
    log_dir: &Path,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    outcome: Outcome,
) -> Result<Vec<PromotedPartition>> {
    let staging = log_dir.join(PROMOTION_DIR);
    let mut results = Vec::new();
    for p in &journal.partitions {
        results.push(build(journal, p, &staging, outcome, hook)?);
    }
    for p in &journal.partitions {
        swap(p, log_dir, &staging, hook)?;
    }
    target::write_root_checkpoints(log_dir, &journal.partitions)?;
    hook(Step::Checkpointed);
    for p in &journal.partitions {
        record(catalog, &journal.link, p, log_dir)?;
    }
    hook(Step::Recorded);
    // The journal goes first: a staging directory without one holds nothing left to do.
    remove_file(&staging.join(JOURNAL_FILE))?;
    fsync_dir(&staging)?;
    remove_dir_all(&staging)?;
    fsync_dir(log_dir)?;
    Ok(results)
}

/// Put `<tp>.ready` in place of the live partition directory, keeping the live one as `<tp>.old`.
fn swap(p: &Planned, log_dir: &Path, staging: &Path, hook: &mut dyn FnMut(Step)) -> Result<()> {
    let ready = staged(staging, p, READY);
    let old = staged(staging, p, OLD);
    let live = log_dir.join(p.tp().dir_name());
    if !ready.exists() {
        // Swapped earlier (the journal says it was built, and only a swap removes `.ready`).
        return Ok(());
    }
    if !old.exists() {
        rename(&live, &old)?;
        fsync_dir(log_dir)?;
        fsync_dir(staging)?;
        hook(Step::MovedAside(p.tp()));
    }
    rename(&ready, &live)?;
    fsync_dir(staging)?;
    fsync_dir(log_dir)?;
    hook(Step::Swapped(p.tp()));
    Ok(())
}

/// Mark the partition promoted in the catalog, with the target topic id.
fn record(catalog: &mut Catalog, link: &str, p: &Planned, log_dir: &Path) -> Result<()> {
    let key = PartitionKey::of(link, &p.tp());
    let row = catalog.partition(&key)?;
    if row.state == PartitionState::Promoted {
        return Ok(());
    }
    catalog.set_mirror_topic_id(row.id, &p.target_topic_id)?;
    let detail = format!(
        "promoted into {}: offsets [{}, {}), {} segment(s), leader epoch restamped to {}, target topic id {} \
         (state before promotion: {}); producer state starts empty at offset {}",
        log_dir.display(),
        p.log_start_offset,
        p.end_offset(),
        p.segments.len(),
        p.leader_epoch,
        p.target_topic_id,
        p.previous_state,
        p.end_offset()
    );
    catalog.append_event(Subject::Partition(&key), EventKind::Note, &detail)?;
    for c in &p.cut {
        let detail = format!(
            "transaction open at the mirror's end aborted at promotion: producer id {} (epoch {}), first offset {}, \
             {} record(s), ABORT marker at offset {}",
            c.producer_id, c.producer_epoch, c.first_offset, c.records, c.marker_offset
        );
        catalog.append_event(Subject::Partition(&key), EventKind::Note, &detail)?;
    }
    catalog.set_partition_state(row.id, PartitionState::Promoted)?;
    Ok(())
}
