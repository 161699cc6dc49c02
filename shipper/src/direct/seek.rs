//! Positioning the feed at the start of a session
//! ([`ChunkFeed::seek`](segmirror_transport::direct::session::ChunkFeed::seek)): every partition at the applier's durable position, proven a batch boundary by a scan from byte 0 ([`resume_at`]),
//! compared with the mirror's end for a divergence ([`diverge`]), continued over what the cleaner rewrote
//! ([`resume`]), or refused for the session when it cannot be proven ([`TailFeed::refuse_resume`]).
//!
//! Why a module of its own: a seek runs once per session and decides where each partition's steps
//! ([`super::step`]) start; nothing of it runs while streaming.

use std::collections::HashMap;

use segmirror_transport::direct::payload::{PartitionRef, Position, TruncateMode};

use super::{blocking, cluster, diverge, log_path, name, progress, replace, resume, running, wake};
use super::{PartState, TailFeed, TailPartition, Unprovable};
use crate::error::{Error, Result};
use crate::source::growing::{read_tail, TailOptions, TailPosition, TailRead};

impl TailFeed {
    /// Position every partition (see
    /// [`ChunkFeed::seek`](segmirror_transport::direct::session::ChunkFeed::seek)); the shipper's error, the first
    /// position it cannot prove included ([`Unprovable::Fail`]).
    pub async fn seek_positions(&mut self, resume: &[Position]) -> Result<()> {
        self.seek_with(resume, Unprovable::Fail).await
    }

    /// Position every partition; a position it cannot prove fails the seek or refuses its partition (`unprovable`).
    pub async fn seek_with(&mut self, resume: &[Position], unprovable: Unprovable) -> Result<()> {
        // A new session holds nothing, and a step started before this seek is stale.
        self.held.clear();
        self.generation += 1;
        // Partitions created since the last listing are positioned with the others.
        self.rediscover(true).await?;
        let mut fresh = Vec::with_capacity(self.parts.len());
        self.refused.clear();
        // The mirror's layout, when the applier sent one, is what the memory of shipped versions starts from (it
        // knows what was installed, whoever shipped it); otherwise what this process shipped stays known across
        // its sessions. A replacement in progress restarts either way.
        let layout = self.layout.take();
        for part in &self.parts {
            let target = part.target.clone();
            let point = resume
                .iter()
                .find(|p| p.partition == target.partition)
                .map(|p| (p.segment_base, p.position));
            let memory = match &layout {
                Some(layout) => replace::from_layout(layout.get(&target.partition).map_or(&[][..], |l| l.as_slice())),
                None => part.sealed.clone(),
            };
            let layout_known = layout.is_some();
            let end = self
                .log_ends
                .iter()
                .find(|(p, _)| p.partition == target.partition)
                .map(|(p, e)| (p.clone(), *e));
            let upto = self.config.upto;
            let verdict = match end {
                Some((resume, end)) => {
                    let target = target.clone();
                    blocking(move || diverge::compare(&target, &resume, end, upto)).await
                }
                None => Ok(diverge::Verdict::Agrees),
            };
            let verdict = match verdict {
                Err(e @ Error::ResumeInvalid { .. }) if unprovable == Unprovable::RefusePartition => {
                    fresh.push(Self::refuse_resume(&mut self.refused, part, e));
                    continue;
                }
                verdict => verdict?,
            };
            let (resumed, truncate) = match (point, verdict) {
                (_, diverge::Verdict::Diverged { truncate, at }) => {
                    let lost = format!(
                        "the mirror ends at offset {} in leader epoch {}; the source's epoch {} ends at {}",
                        truncate.mirror_end_offset,
                        truncate.mirror_epoch,
                        truncate.source_epoch,
                        truncate.source_end_offset
                    );
                    if truncate.mode == TruncateMode::HighWatermark {
                        tracing::error!(partition = %name(&target.partition), truncate_to = truncate.truncate_to, %lost,
                            "the source lost committed records the mirror holds (high-watermark mode): the partition stops");
                    } else {
                        tracing::warn!(partition = %name(&target.partition), truncate_to = truncate.truncate_to, %lost,
                            "the source truncated records the mirror holds: truncating the mirror to match");
                    }
                    let mut resumed = resume::Resumed::fresh(memory);
                    resumed.at = Some(at);
                    (resumed, Some(*truncate))
                }
                (None, _) => (resume::Resumed::fresh(memory), None),
                (Some((base, position)), diverge::Verdict::Agrees) => {
                    match blocking(move || resume::resume(&target, base, position, memory, layout_known)).await {
                        Ok(resumed) => (resumed, None),
                        Err(e @ Error::ResumeInvalid { .. }) if unprovable == Unprovable::RefusePartition => {
                            fresh.push(Self::refuse_resume(&mut self.refused, part, e));
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            fresh.push(PartState {
                target: part.target.clone(),
                at: resumed.at,
                log_start: resumed.track,
                sealed: resumed.sealed,
                replacing: None,
                awaits: resumed.awaits,
                progress: progress::Track::default(),
                truncate,
                stopped: false,
                // A new session claims every partition again.
                claim: cluster::ClaimState::default(),
                translate: None,
                // Resumed mid-segment: its seal reads the file (`running`).
                running: running::RunningSlot::default(),
                // Stepped in the next round.
                wake: wake::Wake::default(),
                #[cfg(test)]
                running_seals: part.running_seals,
            });
        }
        let unfollowed: Vec<Position> = resume
            .iter()
            .filter(|p| !self.parts.iter().any(|s| s.target.partition == p.partition))
            .cloned()
            .collect();
        if !self.keep_pending(&unfollowed) {
            for p in &unfollowed {
                tracing::warn!(partition = %name(&p.partition), "resume position for a partition this feed does not ship: ignored");
            }
        }
        self.parts = fresh;
        Ok(())
    }

    /// A partition whose Resume position this feed cannot prove ([`Error::ResumeInvalid`]: beyond the segment's
    /// end or inside a batch of a segment the cleaner did not rewrite, a segment gone without retention or a merge
    /// to explain it, an epoch the source does not know, a divergence with no truncation point below the position):
    /// refused for this session, nothing of it shipped, the session's other partitions go on. Why not the process:
    /// the position is the peer's value (or the source changed under it); why not the session: one partition's
    /// position must not stop the others. The next session's Resume is checked again (`docs/direct-protocol.md` §6,
    /// "Resume positions the shipper cannot prove").
    pub(super) fn refuse_resume(refused: &mut HashMap<PartitionRef, String>, part: &PartState, e: Error) -> PartState {
        tracing::error!(partition = %name(&part.target.partition), error = %e,
            "refusing the applier's Resume position (ResumeInvalid): the partition ships nothing in this session; \
             the others go on. Re-seed or reset the partition on the mirror if its position stays unprovable");
        refused.insert(part.target.partition.clone(), e.to_string());
        let mut state = PartState::new(part.target.clone(), None);
        state.sealed = part.sealed.clone();
        state.stopped = true;
        state
    }

    /// Why this session refused `partition`'s Resume position, if it did ([`TailFeed::refuse_resume`]).
    pub fn refused_resume(&self, partition: &PartitionRef) -> Option<&str> {
        self.refused.get(partition).map(String::as_str)
    }
}

/// A [`TailPosition`] at `position` of segment `base`, proven a batch boundary
/// by scanning to it from byte 0 (which also yields the prefix CRC).
pub(super) fn resume_at(target: &TailPartition, base: i64, position: u64) -> Result<TailPosition> {
    let invalid = |reason: String| Error::ResumeInvalid {
        partition: name(&target.partition),
        segment_base: base,
        position,
        reason,
    };
    let path = log_path(&target.dir, base);
    let mut at = match TailPosition::start(&path, base) {
        Ok(at) => at,
        Err(segment_format::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(invalid(format!("{} no longer exists (retention?)", path.display())))
        }
        Err(e) => return Err(e.into()),
    };
    while at.position < position {
        let options = TailOptions {
            upto: None,
            max_chunk_bytes: position - at.position,
            ..TailOptions::default()
        };
        match read_tail(&at, &options)? {
            TailRead::Appended { chunk, next } => {
                if chunk.is_empty() {
                    return Err(invalid(format!(
                        "{} holds whole batches only up to byte {}",
                        path.display(),
                        at.position
                    )));
                }
                if chunk.to > position {
                    return Err(invalid(format!(
                        "not a batch boundary of {}: a batch spans [{}, {})",
                        path.display(),
                        chunk.to - chunk.len().min(chunk.to - at.position),
                        chunk.to
                    )));
                }
                at = next;
            }
            TailRead::Corrupt(e) => return Err(invalid(format!("not a batch boundary: {e}"))),
            other => return Err(invalid(format!("{} changed while scanned: {other:?}", path.display()))),
        }
    }
    Ok(at)
}
