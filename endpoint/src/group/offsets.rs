//! OffsetCommit, OffsetFetch and DeleteGroups: committed offsets, through the [`OffsetStore`].
//!
//! Why the store is the only copy: a commit is answered only once the store has it durably (the service's store
//! is the catalog, fsynced), so an acknowledged commit survives a crash of `serve`, and fetches read the store
//! rather than a cache that could disagree with it. Store calls block: they run on tokio's blocking pool, and the
//! writes of one group are serialized so that two commits of the same partition land in the order they came.
//!
//! A commit is checked as a broker checks it: the group-level rules first (a member of the current generation,
//! or a commit with no generation and no member while the group has no members), then each partition (one the
//! endpoint serves, metadata within its cap, an offset that is not negative). A partition that fails is answered
//! with its error and the others are committed.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::coordinator::{code, Coordinator};
use super::CommittedOffset;

/// One partition's answer to OffsetFetch.
struct Fetched {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: String,
}

/// The topics and partitions an OffsetFetch asks for; `None`: every partition the group committed.
type Wanted = Option<Vec<(String, Vec<i32>)>>;

impl Coordinator {
    /// OffsetCommit (v2-v9).
    pub async fn offset_commit(&self, req: OffsetCommitRequest, _version: i16) -> OffsetCommitResponse {
        let group = req.group_id.0.as_str();
        let group_error = if !self.valid_group_id(group) {
            Some(ResponseError::InvalidGroupId)
        } else {
            let instance = req.group_instance_id.as_ref().map(|s| s.as_str());
            self.validate_commit(group, &req.member_id, instance, req.generation_id_or_member_epoch)
                .err()
        };
        let limits = &self.inner.limits;
        // Per topic, per partition: the error, or None for the partitions to commit.
        let mut answers: Vec<Vec<Option<ResponseError>>> = Vec::with_capacity(req.topics.len());
        let mut offsets = Vec::new();
        for t in &req.topics {
            let topic = t.name.0.as_str();
            answers.push(
                t.partitions
                    .iter()
                    .map(|p| {
                        let metadata = p.committed_metadata.as_ref().map_or("", |m| m.as_str());
                        let error = group_error.or(if !(self.inner.served)(topic, p.partition_index) {
                            Some(ResponseError::UnknownTopicOrPartition)
                        } else if metadata.len() > limits.max_offset_metadata_bytes {
                            Some(ResponseError::OffsetMetadataTooLarge)
                        } else if p.committed_offset < 0 {
                            Some(ResponseError::InvalidCommitOffsetSize)
                        } else {
                            None
                        });
                        if error.is_none() {
                            offsets.push(CommittedOffset {
                                topic: topic.to_owned(),
                                partition: p.partition_index,
                                offset: p.committed_offset,
                                leader_epoch: p.committed_leader_epoch,
                                metadata: metadata.to_owned(),
                            });
                        }
                        error
                    })
                    .collect(),
            );
        }
        let store_error = if offsets.is_empty() {
            None
        } else {
            self.store_commit(group, offsets).await.err()
        };
        let mut r = OffsetCommitResponse::default();
        r.topics = req
            .topics
            .iter()
            .zip(answers)
            .map(|(t, errors)| {
                let mut rt = OffsetCommitResponseTopic::default();
                rt.name = t.name.clone();
                rt.topic_id = t.topic_id;
                rt.partitions = t
                    .partitions
                    .iter()
                    .zip(errors)
                    .map(|(p, error)| {
                        let mut rp = OffsetCommitResponsePartition::default();
                        rp.partition_index = p.partition_index;
                        rp.error_code = code(error.or(store_error));
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        r
    }

    /// Writes a group's offsets through the store, in arrival order for the group; refuses a new group beyond
    /// the cap on stored groups.
    async fn store_commit(&self, group: &str, offsets: Vec<CommittedOffset>) -> Result<(), ResponseError> {
        if let Err(e) = self.load_stored().await {
            tracing::warn!(link = %self.inner.link, group, "commit refused: the offset store failed: {e}");
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        {
            let st = self.lock();
            let stored = st.stored.as_ref();
            let known = stored.is_some_and(|s| s.contains(group));
            if !known && stored.map_or(0, |s| s.len()) >= self.inner.limits.max_stored_groups {
                tracing::warn!(link = %self.inner.link, group, "commit refused: too many groups with stored offsets");
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        }
        let _order = self.commit_lock(group).lock().await;
        let store = self.inner.store.clone();
        let owned = group.to_owned();
        let done = tokio::task::spawn_blocking(move || store.commit(&owned, &offsets))
            .await
            .map_err(|e| format!("offset store task failed: {e}"))
            .and_then(|r| r);
        match done {
            Ok(()) => {
                if let Some(stored) = self.lock().stored.as_mut() {
                    stored.insert(group.to_owned());
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(link = %self.inner.link, group, "commit failed in the offset store: {e}");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    /// OffsetFetch: one group (v1-v7) or several (v8+). A partition without a committed offset is offset -1.
    pub async fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let mut r = OffsetFetchResponse::default();
        if version >= 8 {
            for g in &req.groups {
                let wanted: Wanted = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id.clone();
                match self.fetch_group(g.group_id.0.as_str(), wanted).await {
                    Err(e) => rg.error_code = e.code(),
                    Ok(topics) => {
                        rg.topics = topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                let mut rt = OffsetFetchResponseTopics::default();
                                rt.name = TopicName(StrBytes::from_string(name));
                                rt.partitions = partitions
                                    .into_iter()
                                    .map(|f| {
                                        let mut rp = OffsetFetchResponsePartitions::default();
                                        rp.partition_index = f.partition;
                                        rp.committed_offset = f.offset;
                                        rp.committed_leader_epoch = f.leader_epoch;
                                        rp.metadata = Some(StrBytes::from_string(f.metadata));
                                        rp
                                    })
                                    .collect();
                                rt
                            })
                            .collect()
                    }
                }
                r.groups.push(rg);
            }
            return r;
        }
        let wanted: Wanted = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        let (error, topics) = match self.fetch_group(req.group_id.0.as_str(), wanted.clone()).await {
            Ok(topics) => (None, topics),
            // v1 has no group-level error: each partition asked for carries it.
            Err(e) if version < 2 => (Some(e), unanswered(wanted.unwrap_or_default())),
            Err(e) => (Some(e), Vec::new()),
        };
        if version >= 2 {
            r.error_code = code(error);
        }
        r.topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                let mut rt = OffsetFetchResponseTopic::default();
                rt.name = TopicName(StrBytes::from_string(name));
                rt.partitions = partitions
                    .into_iter()
                    .map(|f| {
                        let mut rp = OffsetFetchResponsePartition::default();
                        rp.partition_index = f.partition;
                        rp.committed_offset = f.offset;
                        rp.committed_leader_epoch = f.leader_epoch;
                        rp.metadata = Some(StrBytes::from_string(f.metadata));
                        if version < 2 {
                            rp.error_code = code(error);
                        }
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        r
    }

    /// One group's committed offsets, for the partitions `wanted` (or all).
    async fn fetch_group(&self, group: &str, wanted: Wanted) -> Result<Vec<(String, Vec<Fetched>)>, ResponseError> {
        if !self.valid_group_id(group) {
            return Err(ResponseError::InvalidGroupId);
        }
        let known = match self.load_stored().await {
            Ok(()) => self.lock().stored.as_ref().is_some_and(|s| s.contains(group)),
            Err(e) => {
                tracing::warn!(link = %self.inner.link, group, "offset fetch: the offset store failed: {e}");
                return Err(ResponseError::CoordinatorNotAvailable);
            }
        };
        let committed = if known {
            let store = self.inner.store.clone();
            let owned = group.to_owned();
            tokio::task::spawn_blocking(move || store.fetch(&owned))
                .await
                .map_err(|e| format!("offset store task failed: {e}"))
                .and_then(|r| r)
                .map_err(|e| {
                    tracing::warn!(link = %self.inner.link, group, "offset fetch: the offset store failed: {e}");
                    ResponseError::CoordinatorNotAvailable
                })?
        } else {
            Vec::new()
        };
        let Some(wanted) = wanted else {
            let mut all: std::collections::BTreeMap<String, Vec<Fetched>> = Default::default();
            for c in committed {
                all.entry(c.topic).or_default().push(Fetched {
                    partition: c.partition,
                    offset: c.offset,
                    leader_epoch: c.leader_epoch,
                    metadata: c.metadata,
                });
            }
            for partitions in all.values_mut() {
                partitions.sort_by_key(|f| f.partition);
            }
            return Ok(all.into_iter().collect());
        };
        let mut by_key: std::collections::HashMap<(&str, i32), &CommittedOffset> = Default::default();
        for c in &committed {
            by_key.insert((c.topic.as_str(), c.partition), c);
        }
        Ok(wanted
            .into_iter()
            .map(|(topic, partitions)| {
                let answers = partitions
                    .into_iter()
                    .map(|partition| match by_key.get(&(topic.as_str(), partition)) {
                        Some(c) => Fetched {
                            partition,
                            offset: c.offset,
                            leader_epoch: c.leader_epoch,
                            metadata: c.metadata.clone(),
                        },
                        None => none_committed(partition),
                    })
                    .collect();
                (topic, answers)
            })
            .collect())
    }

    /// DeleteGroups: a group with no members forgets its stored offsets.
    pub async fn delete_groups(&self, req: DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
        let stored = self.load_stored().await;
        if let Err(e) = &stored {
            tracing::warn!(link = %self.inner.link, "delete groups: the offset store failed: {e}");
        }
        let mut r = DeleteGroupsResponse::default();
        for group in &req.groups_names {
            let error = self.delete_group(group, stored.is_ok()).await.err();
            let mut d = DeletableGroupResult::default();
            d.group_id = group.clone();
            d.error_code = code(error);
            r.results.push(d);
        }
        r
    }

    async fn delete_group(&self, group: &GroupId, stored_ok: bool) -> Result<(), ResponseError> {
        let group = group.0.as_str();
        if !self.valid_group_id(group) {
            return Err(ResponseError::InvalidGroupId);
        }
        if self.has_members(group) {
            return Err(ResponseError::NonEmptyGroup);
        }
        if !stored_ok {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if !self.lock().stored.as_ref().is_some_and(|s| s.contains(group)) {
            return Err(ResponseError::GroupIdNotFound);
        }
        let _order = self.commit_lock(group).lock().await;
        let store = self.inner.store.clone();
        let owned = group.to_owned();
        let done = tokio::task::spawn_blocking(move || store.delete(&owned))
            .await
            .map_err(|e| format!("offset store task failed: {e}"))
            .and_then(|r| r);
        match done {
            Ok(()) => {
                if let Some(stored) = self.lock().stored.as_mut() {
                    stored.remove(group);
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(link = %self.inner.link, group, "delete group failed in the offset store: {e}");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    }
}

fn none_committed(partition: i32) -> Fetched {
    Fetched {
        partition,
        offset: -1,
        leader_epoch: -1,
        metadata: String::new(),
    }
}

fn unanswered(wanted: Vec<(String, Vec<i32>)>) -> Vec<(String, Vec<Fetched>)> {
    wanted
        .into_iter()
        .map(|(topic, partitions)| (topic, partitions.into_iter().map(none_committed).collect()))
        .collect()
}
