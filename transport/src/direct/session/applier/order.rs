//! The order rule of the applier's session (see the parent module's doc): per partition, the durable end
//! ([`End`]) that a chunk, a seal, a roll or a truncate must meet, what each does to it, and which partitions the
//! session holds ([`Held`]). Kept apart from the session loop, which only routes frames here.

use std::collections::{HashMap, HashSet};

use super::{ApplierSession, ChunkApplier};
use crate::direct::error::{DirectError, Result};
use crate::direct::frame::Frame;
use crate::direct::payload::{Chunk, PartitionRef, Position, Roll, SegmentSeal, Truncate};
use crate::direct::session::{chunk_cost, seal_cost, tp};

/// Per-partition durable end within a session.
#[derive(Debug, Clone, Copy)]
pub(super) struct End {
    pub(super) segment_base: i64,
    pub(super) position: u64,
    pub(super) sealed: bool,
}

/// What the session does with one chunk.
enum Verdict {
    Apply,
    AlreadyApplied,
}

impl<A: ChunkApplier> ApplierSession<A> {
    /// Applies a group of chunks (see the module doc): each judged against the durable ends as the chunks before
    /// it leave them; resends are compared once every chunk before them is applied.
    pub(super) async fn on_chunks(
        &mut self,
        ends: &mut HashMap<PartitionRef, End>,
        held: &mut Held,
        group: Vec<Chunk>,
    ) -> Result<Vec<Frame>> {
        let mut credit = 0u64;
        let mut acks: Vec<Position> = Vec::new();
        let mut batch: Vec<Chunk> = Vec::with_capacity(group.len());
        for chunk in group {
            credit += chunk_cost(&chunk);
            if !held.applies(&chunk.partition) {
                // Fenced (feature bit 6) or stopped by an earlier chunk of this group: discarded.
                held.discard("Chunk", &chunk.partition);
                continue;
            }
            match verdict(ends, &chunk)? {
                Verdict::Apply => {
                    let (base, end) = (chunk.segment_base, chunk.position + chunk.bytes.len() as u64);
                    // `ends` runs ahead of what is durable only until the batch is applied; an error ends the
                    // session, and with it `ends`.
                    ends.insert(
                        chunk.partition.clone(),
                        End {
                            segment_base: base,
                            position: end,
                            sealed: false,
                        },
                    );
                    batch.push(chunk);
                }
                Verdict::AlreadyApplied => {
                    self.apply_batch(&mut batch, &mut acks, ends, held).await?;
                    match self.applier.check_applied(&chunk).await {
                        Ok(()) => {}
                        Err(e) if held.is_refusal(&e) => held.drop_partition(ends, e, "Chunk"),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        self.apply_batch(&mut batch, &mut acks, ends, held).await?;
        let mut replies: Vec<Frame> = acks.into_iter().map(Frame::Ack).collect();
        replies.push(Frame::Credit { bytes: credit });
        Ok(replies)
    }

    /// Makes `batch` durable, then notes one Ack per partition at its highest position (in `acks`, in the order
    /// the partitions first appear).
    /// A partition the applier reports fenced ([`DirectError::Fenced`], feature bit 6) or stopped
    /// ([`DirectError::PartitionStopped`]) loses its chunks of the batch (discarded, no Ack) and its claim; the rest
    /// of the batch is applied.
    async fn apply_batch(
        &mut self,
        batch: &mut Vec<Chunk>,
        acks: &mut Vec<Position>,
        ends: &mut HashMap<PartitionRef, End>,
        held: &mut Held,
    ) -> Result<()> {
        loop {
            if batch.is_empty() {
                return Ok(());
            }
            match self.applier.apply_chunks(batch).await {
                Ok(()) => {
                    if let Some(observer) = &self.config.observer {
                        observer.applied(batch);
                    }
                    break;
                }
                Err(e) if held.is_refusal(&e) => {
                    let Some(partition) = refused_partition(&e).cloned() else {
                        return Err(e);
                    };
                    if !batch.iter().any(|c| c.partition == partition) {
                        return Err(e);
                    }
                    batch.retain(|c| c.partition != partition);
                    held.drop_partition(ends, e, "Chunk");
                }
                Err(e) => return Err(e),
            }
        }
        for chunk in batch.drain(..) {
            let at = Position {
                partition: chunk.partition,
                segment_base: chunk.segment_base,
                position: chunk.position + chunk.bytes.len() as u64,
            };
            match acks.iter_mut().find(|a| a.partition == at.partition) {
                Some(prev) => *prev = at,
                None => acks.push(at),
            }
        }
        Ok(())
    }

    /// A Truncate: only below what the partition holds durably (the applier checks the bytes), then its durable
    /// end is where the applier says it now is.
    pub(super) async fn on_truncate(&mut self, ends: &mut HashMap<PartitionRef, End>, t: &Truncate) -> Result<()> {
        let name = tp(&t.partition);
        let Some(d) = ends.get(&t.partition).copied() else {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Truncate of {name} to offset {} (segment {} position {}): nothing of the partition is durable; not applied",
                    t.truncate_to, t.segment_base, t.position
                ),
            });
        };
        if (t.segment_base, t.position) >= (d.segment_base, d.position) {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Truncate of {name} to offset {} at segment {} position {}: not below the durable end (segment {} position {}); not applied",
                    t.truncate_to, t.segment_base, t.position, d.segment_base, d.position
                ),
            });
        }
        if let Some(at) = self.applier.apply_truncate(t).await? {
            ends.insert(
                t.partition.clone(),
                End {
                    segment_base: at.segment_base,
                    position: at.position,
                    sealed: false,
                },
            );
        }
        Ok(())
    }

    pub(super) async fn on_seal(
        &mut self,
        ends: &mut HashMap<PartitionRef, End>,
        seal: &SegmentSeal,
    ) -> Result<Vec<Frame>> {
        let name = tp(&seal.partition);
        let credit = Frame::Credit { bytes: seal_cost(seal) };
        let Some(d) = ends.get(&seal.partition).copied() else {
            return Err(DirectError::Protocol {
                reason: format!(
                    "SegmentSeal of {name} segment {}: nothing of the partition is durable; not applied",
                    seal.segment_base
                ),
            });
        };
        if d.segment_base != seal.segment_base || d.position != seal.final_size {
            return Err(DirectError::Protocol {
                reason: format!(
                    "SegmentSeal of {name} segment {} at final size {}: the durable bytes end at segment {} position {}; not applied",
                    seal.segment_base, seal.final_size, d.segment_base, d.position
                ),
            });
        }
        if d.sealed {
            // Sealed before (a resend after a cut): nothing to do.
            return Ok(vec![credit]);
        }
        self.applier.apply_seal(seal).await?;
        ends.insert(seal.partition.clone(), End { sealed: true, ..d });
        let ack = Frame::Ack(Position {
            partition: seal.partition.clone(),
            segment_base: seal.segment_base,
            position: seal.final_size,
        });
        Ok(vec![ack, credit])
    }

    /// A Roll (feature bit 6): like a seal, exactly at the durable end of an unsealed segment; acknowledged at its
    /// final size. A Roll of a segment sealed before (a resend after a cut) is skipped.
    pub(super) async fn on_roll(&mut self, ends: &mut HashMap<PartitionRef, End>, roll: &Roll) -> Result<Vec<Frame>> {
        let name = tp(&roll.partition);
        let Some(d) = ends.get(&roll.partition).copied() else {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Roll of {name} segment {}: nothing of the partition is durable; not applied",
                    roll.segment_base
                ),
            });
        };
        if d.segment_base != roll.segment_base || d.position != roll.final_size {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Roll of {name} segment {} at final size {}: the durable bytes end at segment {} position {}; not applied",
                    roll.segment_base, roll.final_size, d.segment_base, d.position
                ),
            });
        }
        if d.sealed {
            return Ok(Vec::new());
        }
        self.applier.apply_roll(roll).await?;
        ends.insert(roll.partition.clone(), End { sealed: true, ..d });
        Ok(vec![Frame::Ack(Position {
            partition: roll.partition.clone(),
            segment_base: roll.segment_base,
            position: roll.final_size,
        })])
    }
}

/// Which partitions a session applies: with several shippers (feature bit 6) only those it claimed; never those
/// the applier stopped in this session ([`DirectError::PartitionStopped`]).
pub(super) struct Held {
    pub(super) cluster: bool,
    pub(super) claimed: HashSet<PartitionRef>,
    pub(super) stopped: HashSet<PartitionRef>,
}

impl Held {
    /// Whether this session applies what it receives of `p`.
    pub(super) fn applies(&self, p: &PartitionRef) -> bool {
        (!self.cluster || self.claimed.contains(p)) && !self.stopped.contains(p)
    }

    /// An item of a partition this session does not apply: discarded. A stopped partition was said once when it
    /// stopped; what follows of it is only counted at debug level.
    pub(super) fn discard(&self, what: &'static str, partition: &PartitionRef) {
        if self.stopped.contains(partition) {
            tracing::debug!(partition = %tp(partition), what, "the partition is stopped; discarded");
            return;
        }
        tracing::warn!(
            partition = %tp(partition), what,
            "refused: this shipper's session does not hold the partition (another claim displaced it, or it never claimed it); discarded"
        );
    }

    /// Whether the applier's error concerns one partition only: fenced (feature bit 6, several shippers) or stopped.
    pub(super) fn is_refusal(&self, e: &DirectError) -> bool {
        match e {
            DirectError::Fenced { .. } => self.cluster,
            DirectError::PartitionStopped { .. } => true,
            _ => false,
        }
    }

    /// The applier refused a partition alone (see [`Held::is_refusal`]): a fenced one loses its claim (another
    /// session's grant displaced this one's), a stopped one is discarded for the rest of the session, said once.
    pub(super) fn drop_partition(&mut self, ends: &mut HashMap<PartitionRef, End>, e: DirectError, what: &'static str) {
        match e {
            DirectError::PartitionStopped { partition, reason } => {
                tracing::error!(
                    partition = %tp(&partition), what, %reason,
                    "the partition stopped; the link's other partitions go on"
                );
                self.claimed.remove(&partition);
                ends.remove(&partition);
                self.stopped.insert(partition);
            }
            DirectError::Fenced { partition, .. } => {
                self.discard(what, &partition);
                self.claimed.remove(&partition);
                ends.remove(&partition);
            }
            _ => {}
        }
    }
}

fn refused_partition(e: &DirectError) -> Option<&PartitionRef> {
    match e {
        DirectError::Fenced { partition, .. } | DirectError::PartitionStopped { partition, .. } => Some(partition),
        _ => None,
    }
}

/// What the session does with `chunk`, given the partitions' durable ends (see the module doc); a gap is an error.
fn verdict(ends: &HashMap<PartitionRef, End>, chunk: &Chunk) -> Result<Verdict> {
    let name = tp(&chunk.partition);
    let len = chunk.bytes.len() as u64;
    let start = (chunk.segment_base, chunk.position);
    let end = (chunk.segment_base, chunk.position + len);
    let gap = |reason: String| DirectError::Protocol {
        reason: format!(
            "Chunk of {name} at segment {} position {}: {reason}; not applied",
            start.0, start.1
        ),
    };
    let verdict = match ends.get(&chunk.partition) {
        None if chunk.position == 0 => Verdict::Apply,
        None => {
            return Err(gap(
                "nothing of the partition is durable, a first chunk must start at 0".into(),
            ))
        }
        Some(d) => {
            let durable = (d.segment_base, d.position);
            if chunk.segment_base == d.segment_base {
                if start == durable && !d.sealed {
                    Verdict::Apply
                } else if end <= durable {
                    Verdict::AlreadyApplied
                } else if start > durable {
                    return Err(gap(format!("a gap: the durable bytes end at {}", d.position)));
                } else if d.sealed {
                    return Err(gap(format!("the segment is sealed at {}", d.position)));
                } else {
                    return Err(gap(format!(
                        "it straddles the durable end {} (a resend must start at a chunk boundary)",
                        d.position
                    )));
                }
            } else if chunk.segment_base > d.segment_base {
                if chunk.position != 0 {
                    return Err(gap(format!(
                        "a gap: the first chunk of a new segment must start at 0 (durable: segment {} position {})",
                        d.segment_base, d.position
                    )));
                }
                // A later segment: after a seal, or a retention gap the applier's succession rule judges.
                Verdict::Apply
            } else {
                return Err(gap(format!(
                    "segment {} is older than the durable segment {}",
                    chunk.segment_base, d.segment_base
                )));
            }
        }
    };
    Ok(verdict)
}
