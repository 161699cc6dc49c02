//! One mirror, several shippers (feature bit 6, `docs/direct-protocol.md` §6.1): the sessions of one link, one per
//! source broker, share one [`ChunkApplier`] through a [`Cluster`].
//!
//! Why a lock around the applier rather than an actor or per-partition locks: the applier is one (one catalog,
//! one tail state directory), its calls already batch per session (group commit), and the fence must be exact:
//! a claim's grant and every apply check the holder of a partition under the *same* lock, so once a new holder's
//! grant is recorded no byte of the old holder is applied, whatever is still in flight. Each session's
//! [`ClusterMember`] holds a serial number; a grant records (node, epoch, serial) as the partition's holder, and
//! an apply of a member whose serial is not the holder's is refused with [`DirectError::Fenced`] (the session
//! discards the item and goes on with its other partitions). The displaced member is told through a channel
//! ([`ChunkApplier::next_revoke`]) so that its session sends the Revoke frame.
//!
//! What is durable is the applier's: [`ChunkApplier::claim`] arbitrates by leader epoch against its own record
//! and writes the grant before it returns, so a restarted applier refuses a stale leader too. The in-memory
//! holders here only say which *session* may append; they start empty, so after a restart nothing is appended
//! before a fresh claim.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Mutex};

use super::applier::{ChunkApplier, ClaimDecision, DurablePosition};
use crate::direct::error::{DirectError, Result};
use crate::direct::payload::{
    Chunk, Claim, LogStart, PartitionRef, Revoke, Roll, SegmentReplace, SegmentSeal, SourceProgress, TruncateMode,
};

/// The session allowed to append to a partition.
#[derive(Debug, Clone, Copy)]
struct Holder {
    node: i32,
    epoch: i32,
    serial: u64,
}

struct State<A> {
    applier: A,
    holders: HashMap<PartitionRef, Holder>,
    /// Per node, the member that last joined (its serial) and where its revocations go.
    members: HashMap<i32, (u64, mpsc::UnboundedSender<Revoke>)>,
}

/// The shared applier of a link's sessions; clone it freely.
pub struct Cluster<A> {
    state: Arc<Mutex<State<A>>>,
    serials: Arc<AtomicU64>,
    fenced: Arc<AtomicU64>,
}

impl<A> Clone for Cluster<A> {
    fn clone(&self) -> Cluster<A> {
        Cluster {
            state: self.state.clone(),
            serials: self.serials.clone(),
            fenced: self.fenced.clone(),
        }
    }
}

impl<A: ChunkApplier> Cluster<A> {
    pub fn new(applier: A) -> Cluster<A> {
        Cluster {
            state: Arc::new(Mutex::new(State {
                applier,
                holders: HashMap::new(),
                members: HashMap::new(),
            })),
            serials: Arc::new(AtomicU64::new(0)),
            fenced: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Apply calls refused because the calling session did not hold a partition (for status and tests).
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    /// The applier for one session of shipper `node` (a new session of the same node replaces the previous
    /// member: it must claim its partitions again).
    pub async fn member(&self, node: i32) -> ClusterMember<A> {
        let serial = self.serials.fetch_add(1, Ordering::Relaxed);
        // Unbounded: at most one revocation per grant of another session, and the session drains them as it reads.
        let (tx, rx) = mpsc::unbounded_channel();
        self.state.lock().await.members.insert(node, (serial, tx));
        ClusterMember {
            state: self.state.clone(),
            fenced: self.fenced.clone(),
            node,
            serial,
            revokes: rx,
        }
    }

    /// Runs `f` on the applier under the lock (status, tests).
    pub async fn with_applier<R>(&self, f: impl FnOnce(&mut A) -> R) -> R {
        f(&mut self.state.lock().await.applier)
    }

    /// Who may append to `partition` now: (node, epoch), if anyone.
    pub async fn holder(&self, partition: &PartitionRef) -> Option<(i32, i32)> {
        self.state
            .lock()
            .await
            .holders
            .get(partition)
            .map(|h| (h.node, h.epoch))
    }
}

/// One session's view of a [`Cluster`]: a [`ChunkApplier`] that appends only to partitions this session holds.
pub struct ClusterMember<A> {
    state: Arc<Mutex<State<A>>>,
    fenced: Arc<AtomicU64>,
    node: i32,
    serial: u64,
    revokes: mpsc::UnboundedReceiver<Revoke>,
}

impl<A> ClusterMember<A> {
    pub fn node(&self) -> i32 {
        self.node
    }
}

impl<A> State<A> {
    /// Ok when the member `serial` holds every partition of `partitions`; else the first one it does not hold.
    fn check<'p>(
        &self,
        serial: u64,
        what: &'static str,
        partitions: impl IntoIterator<Item = &'p PartitionRef>,
    ) -> Result<()> {
        for p in partitions {
            match self.holders.get(p) {
                Some(h) if h.serial == serial => {}
                other => {
                    return Err(DirectError::Fenced {
                        what,
                        partition: p.clone(),
                        holder_node: other.map_or(-1, |h| h.node),
                        holder_epoch: other.map_or(-1, |h| h.epoch),
                    })
                }
            }
        }
        Ok(())
    }
}

impl<A> ClusterMember<A> {
    /// [`State::check`], counted when it refuses.
    fn fence<'p>(
        &self,
        state: &State<A>,
        what: &'static str,
        partitions: impl IntoIterator<Item = &'p PartitionRef>,
    ) -> Result<()> {
        let r = state.check(self.serial, what, partitions);
        if r.is_err() {
            self.fenced.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

impl<A: ChunkApplier> ChunkApplier for ClusterMember<A> {
    /// The applier's (its recovery runs at every session start); the session resumes none of them, since in a
    /// session of several shippers every partition is claimed first.
    async fn durable_positions(&mut self) -> Result<Vec<DurablePosition>> {
        self.state.lock().await.applier.durable_positions().await
    }

    async fn apply_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "Chunk", [&chunk.partition])?;
        state.applier.apply_chunk(chunk).await
    }

    async fn apply_chunks(&mut self, chunks: &[Chunk]) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "Chunk", chunks.iter().map(|c| &c.partition))?;
        state.applier.apply_chunks(chunks).await
    }

    async fn check_applied(&mut self, chunk: &Chunk) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "Chunk", [&chunk.partition])?;
        state.applier.check_applied(chunk).await
    }

    async fn apply_seal(&mut self, seal: &SegmentSeal) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "SegmentSeal", [&seal.partition])?;
        state.applier.apply_seal(seal).await
    }

    async fn apply_log_start(&mut self, log_start: &LogStart) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "LogStart", [&log_start.partition])?;
        state.applier.apply_log_start(log_start).await
    }

    async fn apply_replace(&mut self, piece: &SegmentReplace) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "SegmentReplace", [&piece.partition])?;
        state.applier.apply_replace(piece).await
    }

    async fn apply_progress(&mut self, progress: &SourceProgress, upto: TruncateMode) -> Result<()> {
        let mut state = self.state.lock().await;
        // Advisory: the holder's report counts, another's is dropped.
        if state
            .check(self.serial, "SourceProgress", [&progress.partition])
            .is_err()
        {
            return Ok(());
        }
        state.applier.apply_progress(progress, upto).await
    }

    async fn writable_again(&mut self, stopped: &[PartitionRef]) -> Result<bool> {
        let mut state = self.state.lock().await;
        state.applier.writable_again(stopped).await
    }

    async fn apply_roll(&mut self, roll: &Roll) -> Result<()> {
        let mut state = self.state.lock().await;
        self.fence(&state, "Roll", [&roll.partition])?;
        state.applier.apply_roll(roll).await
    }

    /// Arbitrates (the applier's durable rule) and, on a grant, makes this session the holder and tells the
    /// displaced session, all under the lock every apply takes.
    async fn claim(&mut self, _node: i32, claim: &Claim) -> Result<ClaimDecision> {
        let mut state = self.state.lock().await;
        let decision = state.applier.claim(self.node, claim).await?;
        if let ClaimDecision::Granted { .. } = decision {
            let holder = Holder {
                node: self.node,
                epoch: claim.leader_epoch,
                serial: self.serial,
            };
            let previous = state.holders.insert(claim.partition.clone(), holder);
            if let Some(prev) = previous.filter(|p| p.serial != self.serial) {
                if let Some((serial, tx)) = state.members.get(&prev.node) {
                    if *serial == prev.serial {
                        // A session that ended has dropped its receiver: nothing to tell.
                        let _ = tx.send(Revoke {
                            partition: claim.partition.clone(),
                            holder_node: self.node,
                            holder_epoch: claim.leader_epoch,
                        });
                    }
                }
            }
        }
        Ok(decision)
    }

    async fn next_revoke(&mut self) -> Revoke {
        match self.revokes.recv().await {
            Some(r) => r,
            // The cluster keeps a sender while this member is registered; a replaced member waits forever.
            None => std::future::pending().await,
        }
    }
}
