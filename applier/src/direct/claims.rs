//! Claims of several shippers (feature bit 6, `docs/direct-protocol.md` §6.1): which source broker may ship a
//! partition into this mirror, fenced by leader epoch, and the Roll that ends a mirror segment where no broker file
//! ends.
//!
//! Why a file per partition under `<mirror>/.tail/claims/`: the grant must be durable *before* the ClaimResult
//! goes out, so that an applier restarted after a leadership change still refuses the old leader (its epoch is
//! below the recorded one), exactly as Kafka's leader epoch fences a stale leader. It is not in the partition's
//! state file because a partition may be claimed before anything of it is in the mirror, and not in the catalog
//! because claims are the tail's business (promote and verify never need them). The file is written atomically
//! (temporary file, fsync, rename, fsync of the directory), like the state files.
//!
//! The rule: a claim whose epoch is above the recorded one wins; an equal epoch wins only for the same node (the
//! leader reconnecting); anything else is refused naming the holder. Which *session* may append is the transport's
//! `Cluster` (in memory, under the same lock as every apply); this module is the durable half.

use std::fs;
use std::path::PathBuf;

use segment_format::durable::{fsync_dir, write_atomically};
use segment_format::index::DEFAULT_INDEX_INTERVAL_BYTES;
use segmirror_transport::digest::digest_file;
use segmirror_transport::direct::payload::{Claim, PartitionRef, Position, Roll, SegmentSeal};
use segmirror_transport::direct::session::{ClaimDecision, DurablePosition};

use super::truncate::last_batch;
use super::{rebuild_index_with, tp_name, Inner, TailError, TailResult};
use crate::mirror::{self, recorded_claim, ClaimRecord};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::direct::payload::CompanionKind;

/// Index interval a Roll's offset and time index are rebuilt with: Kafka's default `index.interval.bytes`. The
/// segment matches no broker file, so there is no broker index to match; the default is what a broker with default
/// settings would have written for these batches.
pub const ROLL_INDEX_INTERVAL_BYTES: u64 = DEFAULT_INDEX_INTERVAL_BYTES;

/// Where the claim record of `partition` lives ([`mirror::claim_file`]).
pub fn claim_path(root: &std::path::Path, partition: &PartitionRef) -> PathBuf {
    mirror::claim_file(root, &tp_name(partition))
}

impl Inner {
    /// Arbitrates a claim by leader epoch and records a grant durably before returning it.
    pub(super) fn claim(&mut self, node: i32, claim: &Claim) -> TailResult<ClaimDecision> {
        let p = &claim.partition;
        if let Some(held) = recorded_claim(&self.root, p)? {
            let wins = claim.leader_epoch > held.epoch || (claim.leader_epoch == held.epoch && node == held.node);
            if !wins {
                tracing::info!(partition = %tp_name(p), node, epoch = claim.leader_epoch, holder = held.node,
                    holder_epoch = held.epoch, "claim refused: fenced by a higher or equal leader epoch");
                return Ok(ClaimDecision::Refused {
                    holder_node: held.node,
                    holder_epoch: held.epoch,
                });
            }
        }
        let path = claim_path(&self.root, p);
        let dir = mirror::claims_dir(&self.root);
        if !dir.exists() {
            fs::create_dir_all(&dir).map_err(|e| TailError::io(&dir, e))?;
            fsync_dir(&mirror::tail_dir(&self.root))?;
        }
        let record = ClaimRecord {
            topic: p.topic.clone(),
            partition: p.partition,
            node,
            epoch: claim.leader_epoch,
        };
        let bytes = serde_json::to_vec_pretty(&record).map_err(|e| TailError::BadState {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&path, &bytes)?;
        let durable = self
            .states
            .get(&tp_name(p))
            .filter(|s| s.topic_id == p.topic_id)
            .map(|s| {
                (
                    DurablePosition {
                        position: Position {
                            partition: p.clone(),
                            segment_base: s.segment_base,
                            position: s.position,
                        },
                        sealed: s.sealed,
                    },
                    s.next_offset.unwrap_or(s.segment_base),
                )
            });
        Ok(match durable {
            Some((durable, end_offset)) => {
                // Read off the mirror's bytes (as the Resume's log ends are), not remembered: what the new holder
                // must match is what the mirror holds.
                let (_, last_batch_crc) = last_batch(&self.partition_dir(&p.topic, p.partition), &durable)?;
                ClaimDecision::Granted {
                    durable: Some(durable),
                    end_offset,
                    last_batch_crc,
                }
            }
            None => ClaimDecision::Granted {
                durable: None,
                end_offset: 0,
                last_batch_crc: None,
            },
        })
    }

    /// Ends the mirror segment at the durable end as a Roll says: the next offset must be the mirror's, the digest
    /// (the shipper's, or the file's own) is checked by the seal; the offset and time index are rebuilt from the
    /// batches with [`ROLL_INDEX_INTERVAL_BYTES`], the `.txnindex` the appender kept stays, and no producer
    /// snapshot is written (promote rebuilds producer state).
    pub(super) fn apply_roll(&mut self, roll: &Roll) -> TailResult<()> {
        let p = &roll.partition;
        let name = tp_name(p);
        let bad = |reason: String| TailError::BadSeal {
            partition: name.clone(),
            segment: roll.segment_base,
            reason: format!("Roll: {reason}"),
        };
        let Some(s) = self.states.get(&name).cloned() else {
            return Err(bad("nothing of the partition is durable".into()));
        };
        if s.sealed && s.segment_base == roll.segment_base && s.position == roll.final_size {
            return Ok(()); // rolled before (a resend after a cut)
        }
        if s.next_offset != Some(roll.next_offset) || s.segment_base != roll.segment_base {
            return Err(bad(format!(
                "the next offset is {}, but the mirror's segment {} ends before offset {:?}",
                roll.next_offset, s.segment_base, s.next_offset
            )));
        }
        let path = self.log_path(&p.topic, p.partition, roll.segment_base);
        let log_sha256 = match roll.log_sha256 {
            Some(d) => d,
            None => digest_file(&path)?.sha256.0,
        };
        // The active segment's indexes are rebuilt as a rolled segment's, whether or not the appender kept them.
        let pdir = self.partition_dir(&p.topic, p.partition);
        for (kind, companion) in [
            (SegmentFileKind::Index, CompanionKind::OffsetIndex),
            (SegmentFileKind::TimeIndex, CompanionKind::TimeIndex),
        ] {
            let bytes = rebuild_index_with(&path, roll.segment_base, companion, ROLL_INDEX_INTERVAL_BYTES)?;
            write_atomically(&pdir.join(segment_file_name(roll.segment_base, kind)), &bytes)?;
        }
        let seal = SegmentSeal {
            partition: p.clone(),
            segment_base: roll.segment_base,
            final_size: roll.final_size,
            log_sha256,
            companions: Vec::new(),
        };
        self.apply_seal(&seal)
    }
}
