//! The tail feed's side of a source with several brokers (feature bit 6, `docs/direct-protocol.md` §6.1): claims,
//! grants, revokes, and the mirror's segment continued in this broker's own layout.
//!
//! Why: exactly one shipper may append to a partition of the mirror. The feed of the shipper beside each broker
//! ships only what its broker leads ([`LeadershipSource`](crate::source::leadership::LeadershipSource)), and before
//! it ships a partition it claims it from the applier at the leader epoch the metadata gives; the applier grants
//! the highest epoch and revokes the previous holder. A grant carries the mirror's durable position and end offset:
//! the feed finds that offset in its own replica ([`super::layout`]) and continues there, translating its replica's
//! positions into the mirror's segment until its replica's segment ends, where it sends a `Roll` of the mirror's
//! segment (it matches no broker file: the applier builds its companions) instead of a seal. From the next segment
//! on the mirror follows this broker's layout and ordinary seals apply.
//!
//! A refused claim, or a revoke, leaves the partition alone until this broker leads it at a higher epoch than the
//! one it claimed (a claim at the same epoch would be refused again: ties go to the holder).

use segmirror_transport::direct::payload::{Chunk, Claim, ClaimVerdict, ClaimedAt, Roll};
use segmirror_transport::direct::session::FeedItem;

use super::layout::{handover, Handover, MirrorEnd, ReplicaSegment};
use super::{log_start, name, resume_at, PartState};
use crate::error::{Error, Result};
use crate::source::read::{read_partition, PartitionRead};

/// Where a partition stands with the applier in cluster mode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) enum ClaimState {
    /// Not claimed in this session.
    #[default]
    Unclaimed,
    /// Claimed at this epoch; the answer has not come.
    Claiming { epoch: i32 },
    /// Granted at this epoch; `pending`: the position the grant gave, not yet found in the replica (`Some(None)`:
    /// nothing of the partition is in the mirror).
    Granted {
        epoch: i32,
        pending: Option<Option<ClaimedAt>>,
    },
    /// Refused or revoked while this broker led it at `epoch`: claimed again only at a higher epoch.
    Lost { epoch: i32 },
}

/// What the feed does with a partition this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gate {
    /// Nothing: not led, or waiting for an answer.
    Skip,
    /// Send this claim.
    Claim(Claim),
    /// Find the granted position in the replica first ([`position`]).
    Position(Option<ClaimedAt>),
    /// Step it as usual.
    Step,
}

/// The gate of `part` when this broker leads it at `led` (`None`: it does not).
pub(super) fn gate(part: &mut PartState, led: Option<i32>) -> Gate {
    let Some(epoch) = led else { return Gate::Skip };
    let claim = |part: &mut PartState| {
        part.claim = ClaimState::Claiming { epoch };
        Gate::Claim(Claim {
            partition: part.target.partition.clone(),
            leader_epoch: epoch,
        })
    };
    match &part.claim {
        ClaimState::Unclaimed => claim(part),
        ClaimState::Lost { epoch: lost } if epoch > *lost => claim(part),
        ClaimState::Lost { .. } | ClaimState::Claiming { .. } => Gate::Skip,
        ClaimState::Granted { pending: Some(at), .. } => Gate::Position(at.clone()),
        ClaimState::Granted { .. } => Gate::Step,
    }
}

/// Whether a granted partition's position is still to be found in the replica (it does not reach the mirror's
/// end yet): nothing of it steps.
pub(super) fn pending(part: &PartState) -> bool {
    matches!(part.claim, ClaimState::Granted { pending: Some(_), .. })
}

/// Takes the applier's answer to this partition's claim.
pub(super) fn answered(part: &mut PartState, verdict: &ClaimVerdict) {
    let epoch = match part.claim {
        ClaimState::Claiming { epoch } => epoch,
        _ => {
            tracing::warn!(partition = %name(&part.target.partition), "a claim answer for a partition not being claimed: ignored");
            return;
        }
    };
    part.at = None;
    part.translate = None;
    part.claim = match verdict {
        ClaimVerdict::Granted { durable } => ClaimState::Granted {
            epoch,
            pending: Some(durable.clone()),
        },
        ClaimVerdict::Refused { .. } => ClaimState::Lost { epoch },
    };
}

/// Another node holds the partition now: ship nothing more of it until led at a higher epoch.
pub(super) fn revoked(part: &mut PartState) {
    let epoch = match part.claim {
        ClaimState::Claiming { epoch } | ClaimState::Granted { epoch, .. } | ClaimState::Lost { epoch } => epoch,
        ClaimState::Unclaimed => i32::MIN,
    };
    part.claim = ClaimState::Lost { epoch };
    part.at = None;
    part.translate = None;
}

/// Positions a granted partition in this broker's replica (blocking). Returns the updated state and the item to
/// send first, if any (a `Roll` when the mirror's segment ends where this replica rolled). A replica that does not
/// reach the mirror's end yet stays pending.
pub(super) fn position(mut part: PartState, durable: Option<ClaimedAt>) -> Result<(PartState, Option<FeedItem>)> {
    let ClaimState::Granted { epoch, .. } = part.claim else {
        return Ok((part, None));
    };
    let Some(at) = durable else {
        // Nothing in the mirror: from this replica's first segment, as a fresh start.
        part.claim = ClaimState::Granted { epoch, pending: None };
        part.at = None;
        return Ok((part, None));
    };
    let view = match read_partition(&part.target.dir)? {
        PartitionRead::View(view) => view,
        PartitionRead::Refused(findings) => {
            return Err(Error::InvalidSetting {
                setting: "tail partition",
                reason: format!("{} is not shippable: {findings:?}", part.target.dir.display()),
            })
        }
    };
    let segments: Vec<ReplicaSegment> = view
        .segments
        .iter()
        .map(|s| ReplicaSegment {
            base_offset: s.base_offset(),
            log: s.files.log.clone(),
        })
        .collect();
    let mirror = MirrorEnd {
        segment_base: at.segment_base,
        position: at.position,
        end_offset: at.end_offset,
        last_batch_crc: at.last_batch_crc,
    };
    let mut first = None;
    match handover(&name(&part.target.partition), &segments, mirror)? {
        Handover::Wait { replica_end } => {
            tracing::info!(partition = %name(&part.target.partition), replica_end, mirror_end = at.end_offset,
                "this replica does not reach the mirror's end yet: waiting");
            return Ok((part, None));
        }
        Handover::Aligned { base, position } => part.at = Some(resume_at(&part.target, base, position)?),
        Handover::Translate(t) => {
            part.at = Some(resume_at(&part.target, t.replica_base, t.replica_position)?);
            part.translate = Some(t);
        }
        Handover::RollFirst {
            mirror_base,
            final_size,
            next_base,
        } => {
            part.at = Some(resume_at(&part.target, next_base, 0)?);
            first = Some(FeedItem::Roll(Roll {
                partition: part.target.partition.clone(),
                segment_base: mirror_base,
                final_size,
                next_offset: next_base,
                log_sha256: None,
            }));
        }
        Handover::BelowLogStart { log_start } => {
            let first_log = segments
                .first()
                .map(|s| s.log.clone())
                .ok_or_else(|| Error::ResumeInvalid {
                    partition: name(&part.target.partition),
                    segment_base: at.segment_base,
                    position: at.position,
                    reason: "the replica has no segment".to_string(),
                })?;
            part.at = log_start::start_at(&first_log, log_start)?;
            part.log_start = log_start::Track::seen(log_start);
        }
    }
    part.claim = ClaimState::Granted { epoch, pending: None };
    Ok((part, first))
}

/// An item of a partition whose mirror segment continues in another layout, addressed to the mirror: a chunk of
/// the replica's segment moves to the mirror's segment and position, and the replica segment's seal becomes the
/// mirror segment's `Roll` (after which the layouts agree).
pub(super) fn translate(part: &mut PartState, item: FeedItem) -> Result<FeedItem> {
    let Some(t) = part.translate else { return Ok(item) };
    let out_of_range = |position: u64| Error::Diverged {
        partition: name(&part.target.partition),
        segment_base: t.replica_base,
        position,
        reason: format!("a position before where the mirror continues ({t:?})"),
    };
    match item {
        FeedItem::Chunk(c) if c.segment_base == t.replica_base => {
            let position = t
                .mirror_position_of(c.position)
                .ok_or_else(|| out_of_range(c.position))?;
            Ok(FeedItem::Chunk(Chunk {
                partition: c.partition,
                segment_base: t.mirror_base,
                position,
                bytes: c.bytes,
                crcs: c.crcs,
            }))
        }
        FeedItem::Seal(s) if s.segment_base == t.replica_base => {
            let final_size = t.final_size(s.final_size).ok_or_else(|| out_of_range(s.final_size))?;
            let next_offset = part
                .at
                .as_ref()
                .map(|a| a.base_offset)
                .ok_or_else(|| out_of_range(s.final_size))?;
            part.translate = None;
            // The replica's segment is not a mirror segment: nothing of it to replace later.
            part.sealed.remove(&t.replica_base);
            Ok(FeedItem::Roll(Roll {
                partition: s.partition,
                segment_base: t.mirror_base,
                final_size,
                next_offset,
                log_sha256: None,
            }))
        }
        other => Ok(other),
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
