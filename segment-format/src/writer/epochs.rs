//! The leader-epoch cache as `LeaderEpochFileCache` maintains it on append.
//!
//! Followers use `leader-epoch-checkpoint` to find where their log diverges from
//! the leader's, so it must say exactly what a broker that appended these
//! batches would say: on every magic-2 append `assign(partitionLeaderEpoch,
//! baseOffset)`, which adds an entry only for a new epoch (or an earlier start
//! offset of the current one) after dropping every entry with an epoch or start
//! offset not below the new one; a legacy (magic 0/1) append clears the cache
//! (`UnifiedLog.append`: "Clearing leader epoch cache after unexpected append with
//! message format v0/v1").

use crate::checkpoint::{EpochEntry, LeaderEpochCheckpoint};

/// Entries in increasing epoch and start offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// `LeaderEpochFileCache.assign`. Negative epochs or offsets, which Kafka
    /// refuses, are ignored as `LogSegment.recover` ignores them (a batch that no
    /// leader stamped). Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        let needed = self
            .entries
            .last()
            .is_none_or(|last| epoch != last.epoch || start_offset < last.start_offset);
        if !needed {
            return false;
        }
        // `maybeTruncateNonMonotonicEntries`, newest first.
        while self
            .entries
            .last()
            .is_some_and(|e| e.epoch >= epoch || e.start_offset >= start_offset)
        {
            self.entries.pop();
        }
        self.entries.push(EpochEntry { epoch, start_offset });
        true
    }

    /// `clearAndFlush`.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn to_checkpoint(&self) -> LeaderEpochCheckpoint {
        LeaderEpochCheckpoint::new(self.entries.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry { epoch, start_offset }
    }

    #[test]
    fn assign_follows_leader_epoch_file_cache() {
        let mut c = LeaderEpochCache::new();
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 5), "same epoch, later offset: no entry");
        assert!(c.assign(2, 10));
        assert!(!c.assign(-1, 11), "unstamped batches are ignored");
        assert_eq!(c.entries(), &[e(0, 0), e(2, 10)]);
        // Same epoch at an earlier offset replaces the entry.
        assert!(c.assign(2, 8));
        assert_eq!(c.entries(), &[e(0, 0), e(2, 8)]);
        // A lower epoch truncates every entry with epoch >= it.
        assert!(c.assign(1, 20));
        assert_eq!(c.entries(), &[e(0, 0), e(1, 20)]);
        // A start offset below existing ones truncates those too.
        assert!(c.assign(5, 0));
        assert_eq!(c.entries(), &[e(5, 0)]);
        c.clear();
        assert!(c.entries().is_empty());
        assert_eq!(c.to_checkpoint().encode(), "0\n0\n");
    }
}
