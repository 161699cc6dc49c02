//! Incremental fetch sessions (KIP-227), kept as a broker keeps them.
//!
//! Why: a consumer fetches the same partitions over and over, most of them idle. With a session it names its
//! partitions once, then sends only what changed (new fetch offsets, partitions added or forgotten), and each
//! answer carries only the partitions with something new. The Java consumer and librdkafka open one with every
//! broker that offers it; a consumer of many partitions saves most of its request and response bytes.
//!
//! The rules are a broker's, so that stock clients behave as they do against Kafka:
//! - A request's epoch says what it is. 0 (INITIAL) is a full request that asks for a new session, closing the
//!   one it names; -1 (FINAL) is a full request that wants none, closing the one it names; any other epoch is an
//!   incremental request of the session named, and must be the epoch that session expects next. Fetch v4-v6 have
//!   no session fields: always full, never a session.
//! - A full request answered with a new session gets a random non-zero id, and the client's next request is
//!   epoch 1. When every slot is taken and the least recently used session was used within `evict_after`, the
//!   answer is sessionless (id 0, as a broker whose cache is full answers) and the client goes on with full
//!   requests; an older one is evicted. Active sessions are never evicted, so a crowd of clients cannot make
//!   each other start over again and again.
//! - An incremental request updates the session's partitions (offsets and sizes; partitions added;
//!   `forgotten_topics_data` removed), then all of them are read, and the answer holds only those with records, a
//!   moved high watermark, log start or last stable offset, or an error (an error is always sent, and once it
//!   clears the partition is sent again). A partition that got records moves to the back of the session, so that
//!   with a response budget the partitions take turns. An incremental answer with nothing new waits like any
//!   fetch (long polling is the caller's, `fetch`).
//! - An unknown id is FETCH_SESSION_ID_NOT_FOUND (the client starts over with a full request); a wrong epoch (a
//!   duplicate, or an answer the client never got) is INVALID_FETCH_SESSION_EPOCH; a session opened by topic
//!   names (v7-v12) used by topic ids (v13+), or the reverse, is FETCH_SESSION_TOPIC_ID_ERROR.
//!
//! What bounds memory: at most `slots` sessions; no session holds more partitions than the replica serves; all
//! of them together at most `cached_bytes` of bookkeeping (each partition counted with its topic's name). A
//! request that would go past a bound is answered sessionless, and the session it named, if any, closed: no
//! client can grow the cache beyond them. The cache's lock is held for bookkeeping only, never across a read
//! or a wait, so one endpoint serves every connection's sessions.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, TopicName};
use tokio::time::Instant;

/// A request's epoch that asks for a new session (a full request).
pub(super) const INITIAL_EPOCH: i32 = 0;
/// A request's epoch that wants no session (a full request).
pub(super) const FINAL_EPOCH: i32 = -1;
/// "No session", in requests and answers.
pub(super) const NO_SESSION: i32 = 0;

pub(super) const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub(super) const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
pub(super) const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;

/// What one cached partition costs beyond its topic's name (two map entries, its state), for `cached_bytes`.
const PARTITION_OVERHEAD: usize = 160;

/// How many fetch sessions the endpoint keeps, and when one may make room for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSessionLimits {
    /// Sessions kept at once (a broker's `max.incremental.fetch.session.cache.slots`); 0 answers every fetch
    /// sessionless.
    pub slots: usize,
    /// The least recently used session, once unused this long, is evicted to make room for a new one (a
    /// broker's `min.incremental.fetch.session.eviction.ms`); a more recently used one never is.
    pub evict_after: Duration,
    /// Bytes of bookkeeping over all sessions: each cached partition costs about 160 bytes plus its topic name.
    pub cached_bytes: usize,
}

impl Default for FetchSessionLimits {
    fn default() -> Self {
        Self {
            slots: 1000,
            evict_after: Duration::from_secs(120),
            cached_bytes: 64 << 20,
        }
    }
}

/// How the partitions of a request, and so of its session, are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keying {
    /// Fetch v4-v12: by topic name.
    ByName,
    /// Fetch v13 and later: by topic id.
    ById,
}

impl Keying {
    pub(super) fn of(version: i16) -> Self {
        if version >= 13 {
            Self::ById
        } else {
            Self::ByName
        }
    }
}

/// A topic as a request names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum TopicKey {
    Name(String),
    Id(uuid::Uuid),
}

impl TopicKey {
    fn of(keying: Keying, name: &TopicName, id: uuid::Uuid) -> Self {
        match keying {
            Keying::ByName => Self::Name(name.0.to_string()),
            Keying::ById => Self::Id(id),
        }
    }

    /// The topic's name and id as an answer carries them (the name up to v12, the id from v13).
    pub(super) fn wire(&self) -> (TopicName, uuid::Uuid) {
        match self {
            Self::Name(name) => (
                TopicName(kafka_protocol::protocol::StrBytes::from_string(name.clone())),
                uuid::Uuid::nil(),
            ),
            Self::Id(id) => (TopicName::default(), *id),
        }
    }

    fn cost(&self) -> usize {
        PARTITION_OVERHEAD
            + match self {
                // The name is held twice: in the partition map and in the session's order.
                Self::Name(name) => 2 * name.len(),
                Self::Id(_) => 0,
            }
    }
}

/// One partition a fetch reads.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    pub topic: TopicKey,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// What a fetch request is, once its session was looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Context {
    /// Refused with this error before anything is read.
    Refused(i16),
    /// Read what the request names and answer all of it, without a session.
    Sessionless,
    /// Read what the request names and answer all of it in a new session, if the cache has room.
    Full(Keying),
    /// Read the session's partitions and answer those with something new; the session must still expect
    /// `epoch` when the answer is made (a request that came in meanwhile would have moved it).
    Incremental { id: i32, epoch: i32 },
}

/// The answer's session fields and partitions (each with its index in what was asked).
#[derive(Debug)]
pub(super) struct Closed {
    pub session_id: i32,
    pub error_code: i16,
    pub partitions: Vec<(usize, PartitionData)>,
}

/// The ends an answer carried for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    high_watermark: i64,
    log_start: i64,
    last_stable: i64,
}

#[derive(Debug)]
struct Cached {
    /// Position in the session's order.
    seq: u64,
    offset: i64,
    max_bytes: i32,
    /// The ends last sent, `None` when never sent or when the last answer was an error.
    sent: Option<Sent>,
}

type PartitionKey = (TopicKey, i32);

#[derive(Debug)]
struct Session {
    /// The epoch the next incremental request must carry.
    epoch: i32,
    keying: Keying,
    partitions: HashMap<PartitionKey, Cached>,
    order: BTreeMap<u64, PartitionKey>,
    next_seq: u64,
    /// Its key in the cache's use order, and when it was last used.
    used: u64,
    last_used: Instant,
    bytes: usize,
}

impl Session {
    fn new(keying: Keying) -> Self {
        Self {
            epoch: next_epoch(INITIAL_EPOCH),
            keying,
            partitions: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            used: 0,
            last_used: Instant::now(),
            bytes: 0,
        }
    }

    /// Add or update a partition (a new one goes to the back).
    fn upsert(&mut self, asked: &Asked) {
        let key = (asked.topic.clone(), asked.partition);
        if let Some(cached) = self.partitions.get_mut(&key) {
            cached.offset = asked.offset;
            cached.max_bytes = asked.max_bytes;
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += asked.topic.cost();
        self.order.insert(seq, key.clone());
        self.partitions.insert(
            key,
            Cached {
                seq,
                offset: asked.offset,
                max_bytes: asked.max_bytes,
                sent: None,
            },
        );
    }

    fn forget(&mut self, key: &PartitionKey) {
        if let Some(cached) = self.partitions.remove(key) {
            self.order.remove(&cached.seq);
            self.bytes = self.bytes.saturating_sub(key.0.cost());
        }
    }

    /// Move a partition to the back of the order.
    fn move_to_back(&mut self, key: &PartitionKey) {
        let Some(cached) = self.partitions.get_mut(key) else {
            return;
        };
        if let Some(key) = self.order.remove(&cached.seq) {
            cached.seq = self.next_seq;
            self.next_seq += 1;
            self.order.insert(cached.seq, key);
        }
    }

    /// Every partition of the session, in order, as a fetch reads them.
    fn asked(&self) -> Vec<Asked> {
        self.order
            .values()
            .filter_map(|key| {
                let cached = self.partitions.get(key)?;
                Some(Asked {
                    topic: key.0.clone(),
                    partition: key.1,
                    offset: cached.offset,
                    max_bytes: cached.max_bytes,
                })
            })
            .collect()
    }
}

#[derive(Debug, Default)]
struct Cache {
    sessions: HashMap<i32, Session>,
    /// Sessions by last use, least recent first.
    by_use: BTreeMap<u64, i32>,
    next_use: u64,
    bytes: usize,
    draws: u64,
}

impl Cache {
    fn remove(&mut self, id: i32) -> Option<Session> {
        let session = self.sessions.remove(&id)?;
        self.by_use.remove(&session.used);
        self.bytes = self.bytes.saturating_sub(session.bytes);
        Some(session)
    }

    fn touch(&mut self, id: i32, now: Instant) {
        let use_key = self.next_use;
        if let Some(session) = self.sessions.get_mut(&id) {
            self.by_use.remove(&session.used);
            session.used = use_key;
            session.last_used = now;
            self.by_use.insert(use_key, id);
            self.next_use += 1;
        }
    }

    /// Evict the least recently used session if it was unused for `evict_after`; whether one was.
    fn evict_stale(&mut self, now: Instant, evict_after: Duration) -> bool {
        let Some((_, &id)) = self.by_use.first_key_value() else {
            return false;
        };
        let stale = self
            .sessions
            .get(&id)
            .is_some_and(|s| now.saturating_duration_since(s.last_used) >= evict_after);
        if stale {
            tracing::debug!(session = id, "fetch session evicted to make room for a new one");
            self.remove(id);
        }
        stale
    }
}

/// The endpoint's fetch sessions.
pub(super) struct FetchSessions {
    limits: FetchSessionLimits,
    cache: Mutex<Cache>,
    /// Keys the session ids: ids a client cannot predict from its own.
    ids: RandomState,
}

impl FetchSessions {
    pub(super) fn new(limits: FetchSessionLimits) -> Self {
        Self {
            limits,
            cache: Mutex::new(Cache::default()),
            ids: RandomState::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // The cache's invariants hold between statements that cannot panic; a poisoned lock is still usable.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many sessions are kept now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Look up the session a request names and say what the request is, with the partitions to read.
    /// `served` is how many partitions the replica serves: no session holds more.
    pub(super) fn open(
        &self,
        version: i16,
        request: &FetchRequest,
        served: usize,
        now: Instant,
    ) -> (Context, Vec<Asked>) {
        let keying = Keying::of(version);
        let (id, epoch) = if version >= 7 {
            (request.session_id, request.session_epoch)
        } else {
            (NO_SESSION, FINAL_EPOCH)
        };
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != NO_SESSION && self.lock().remove(id).is_some() {
                tracing::debug!(session = id, "fetch session closed by a full fetch");
            }
            let context = if epoch == FINAL_EPOCH {
                Context::Sessionless
            } else {
                Context::Full(keying)
            };
            return (context, asked(request, keying));
        }
        let mut cache = self.lock();
        let Some(session) = cache.sessions.get_mut(&id) else {
            tracing::debug!(session = id, epoch, "fetch session not found");
            return (Context::Refused(FETCH_SESSION_ID_NOT_FOUND), Vec::new());
        };
        if session.epoch != epoch {
            tracing::debug!(
                session = id,
                epoch,
                expected = session.epoch,
                "fetch session epoch refused"
            );
            return (Context::Refused(INVALID_FETCH_SESSION_EPOCH), Vec::new());
        }
        if session.keying != keying {
            tracing::debug!(session = id, version, "fetch session used with the other topic keying");
            return (Context::Refused(FETCH_SESSION_TOPIC_ID_ERROR), Vec::new());
        }
        let before = session.bytes;
        let named = asked(request, keying);
        for asked in &named {
            session.upsert(asked);
        }
        for forgotten in &request.forgotten_topics_data {
            let topic = TopicKey::of(keying, &forgotten.topic, forgotten.topic_id);
            for &partition in &forgotten.partitions {
                session.forget(&(topic.clone(), partition));
            }
        }
        let (after, len) = (session.bytes, session.partitions.len());
        cache.bytes = cache.bytes.saturating_sub(before) + after;
        if len == 0 {
            // Nothing left to fetch: the session ends, as a broker ends it.
            cache.remove(id);
            tracing::debug!(session = id, "fetch session closed: every partition forgotten");
            return (Context::Sessionless, named);
        }
        if len > served || cache.bytes > self.limits.cached_bytes {
            // The session would outgrow its bounds: end it, and answer this request in full without one.
            let all = cache.remove(id).map(|s| s.asked()).unwrap_or_default();
            tracing::debug!(session = id, partitions = len, "fetch session closed: past its bounds");
            return (Context::Sessionless, all);
        }
        let Some(session) = cache.sessions.get_mut(&id) else {
            return (Context::Refused(FETCH_SESSION_ID_NOT_FOUND), Vec::new());
        };
        session.epoch = next_epoch(session.epoch);
        let context = Context::Incremental {
            id,
            epoch: session.epoch,
        };
        let all = session.asked();
        cache.touch(id, now);
        tracing::debug!(
            session = id,
            epoch,
            version,
            partitions = all.len(),
            "incremental fetch"
        );
        (context, all)
    }

    /// Make the answer: the session fields, and which partitions it carries. `read` is, in order, what was read
    /// for each of `asked`.
    pub(super) fn close(
        &self,
        context: Context,
        asked: &[Asked],
        read: Vec<PartitionData>,
        served: usize,
        now: Instant,
    ) -> Closed {
        match context {
            Context::Refused(error_code) => Closed {
                session_id: NO_SESSION,
                error_code,
                partitions: Vec::new(),
            },
            Context::Sessionless => Closed {
                session_id: NO_SESSION,
                error_code: 0,
                partitions: read.into_iter().enumerate().collect(),
            },
            Context::Full(keying) => {
                let session_id = self.create(keying, asked, &read, served, now);
                Closed {
                    session_id,
                    error_code: 0,
                    partitions: read.into_iter().enumerate().collect(),
                }
            }
            Context::Incremental { id, epoch } => self.incremental(id, epoch, asked, read),
        }
    }

    /// A new session holding what a full request asked and what its answer carried; its id, or 0 when there is
    /// no room (or sessions are off, or the request is larger than a session may be).
    fn create(&self, keying: Keying, asked: &[Asked], read: &[PartitionData], served: usize, now: Instant) -> i32 {
        if self.limits.slots == 0 {
            return NO_SESSION;
        }
        let mut session = Session::new(keying);
        for (asked, data) in asked.iter().zip(read) {
            session.upsert(asked);
            if let Some(cached) = session.partitions.get_mut(&(asked.topic.clone(), asked.partition)) {
                cached.sent = sent(data);
            }
        }
        if session.partitions.len() > served || session.bytes > self.limits.cached_bytes {
            return NO_SESSION;
        }
        let mut cache = self.lock();
        while cache.sessions.len() >= self.limits.slots || cache.bytes + session.bytes > self.limits.cached_bytes {
            if !cache.evict_stale(now, self.limits.evict_after) {
                tracing::debug!(
                    sessions = cache.sessions.len(),
                    "no room for a new fetch session: answered without one"
                );
                return NO_SESSION;
            }
        }
        let id = loop {
            cache.draws += 1;
            let mut hasher = self.ids.build_hasher();
            hasher.write_u64(cache.draws);
            // Positive, as a broker's are.
            let id = (hasher.finish() >> 33) as i32;
            if id != NO_SESSION && !cache.sessions.contains_key(&id) {
                break id;
            }
        };
        cache.bytes += session.bytes;
        tracing::debug!(
            session = id,
            partitions = session.partitions.len(),
            "fetch session created"
        );
        cache.sessions.insert(id, session);
        cache.touch(id, now);
        id
    }

    /// The answer to an incremental request: only the partitions with something new, the session told what was
    /// sent.
    fn incremental(&self, id: i32, epoch: i32, asked: &[Asked], read: Vec<PartitionData>) -> Closed {
        let mut cache = self.lock();
        let Some(session) = cache.sessions.get_mut(&id) else {
            // Closed or evicted while this fetch read: the client starts over.
            return Closed {
                session_id: NO_SESSION,
                error_code: FETCH_SESSION_ID_NOT_FOUND,
                partitions: Vec::new(),
            };
        };
        if session.epoch != epoch {
            return Closed {
                session_id: id,
                error_code: INVALID_FETCH_SESSION_EPOCH,
                partitions: Vec::new(),
            };
        }
        let mut partitions = Vec::new();
        for (i, (asked, data)) in asked.iter().zip(read).enumerate() {
            let key = (asked.topic.clone(), asked.partition);
            let records = data.records.as_ref().is_some_and(|r: &Bytes| !r.is_empty());
            let now_sent = sent(&data);
            let respond = match session.partitions.get_mut(&key) {
                Some(cached) => {
                    let moved = cached.sent != now_sent || now_sent.is_none();
                    cached.sent = now_sent;
                    records || moved
                }
                None => true,
            };
            if records {
                session.move_to_back(&key);
            }
            if respond {
                partitions.push((i, data));
            }
        }
        tracing::debug!(
            session = id,
            epoch,
            sent = partitions.len(),
            "incremental fetch answered"
        );
        Closed {
            session_id: id,
            error_code: 0,
            partitions,
        }
    }
}

/// The ends an answer carries for a partition; `None` for an error (always sent, and sent again once cleared).
fn sent(data: &PartitionData) -> Option<Sent> {
    (data.error_code == 0).then_some(Sent {
        high_watermark: data.high_watermark,
        log_start: data.log_start_offset,
        last_stable: data.last_stable_offset,
    })
}

/// The epoch after `epoch`: wraps to 1, never back to the full request's 0.
fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// The partitions a request names, in its order.
fn asked(request: &FetchRequest, keying: Keying) -> Vec<Asked> {
    request
        .topics
        .iter()
        .flat_map(|t| {
            let topic = TopicKey::of(keying, &t.topic, t.topic_id);
            t.partitions.iter().map(move |p| Asked {
                topic: topic.clone(),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
