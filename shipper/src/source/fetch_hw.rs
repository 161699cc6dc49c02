//! High watermarks learned as they move: a long-polling `Fetch` parked at each partition's high watermark
//! (`segmirror ship --source-bootstrap HOST:PORT`, the default there).
//!
//! Why: asked with `ListOffsets` every [`LIST_OFFSETS_INTERVAL`](super::list_offsets::LIST_OFFSETS_INTERVAL)
//! ([`super::list_offsets`]), the bound of a committed-only tail trails the broker by up to that interval, half of
//! it on average: measured end to end, committed records reached the mirror in p50 30 ms / p99 55 ms where the
//! uncommitted log end took p50 2.3 ms / p99 19 ms (`tools/bench/tail.sh`, `docs/BENCHMARKS.md`). Polling faster
//! costs requests while nothing moves. A consumer `Fetch` at offset = the last known high watermark with
//! `min_bytes` 1 is instead parked by the broker until its high watermark moves past that offset (Kafka's
//! `DelayedFetch` under `FetchIsolation.HIGH_WATERMARK` counts only bytes below the high watermark, and the leader
//! completes the parked fetches of a partition when its high watermark increases), or `max_wait_ms` passes; every
//! partition of the answer carries the broker's `high_watermark`. So the bound follows within one round trip of
//! the broker acknowledging the records (against Kafka 4.4, the `fetch_hw` test of the tests crate: a median of
//! 0.3 ms from the acknowledgement to the new bound), and an idle source costs one request per [`FETCH_MAX_WAIT`].
//!
//! How ([`FetchHighWatermarks::spawn`], one background task, one connection to the bootstrap broker for every
//! partition, as `ListOffsets` used; [`HighWatermarkSource::high_watermark`] only reads what it learned):
//! - A partition is first learned with `ListOffsets` (a fetch needs an offset to park at), and so again after the
//!   fetch answered it with an error code (`NOT_LEADER_OR_FOLLOWER`, `OFFSET_OUT_OF_RANGE` after a truncation, an
//!   unknown partition...): at most every `ListOffsets` interval, its last known bound staying in force meanwhile.
//! - Then one sessionless `Fetch` (no KIP-227 fetch session; versions [`MIN_FETCH_VERSION`]`..=`
//!   [`MAX_FETCH_VERSION`], the ones that name topics rather than give their ids) of every partition at its last
//!   known high watermark, isolation `READ_UNCOMMITTED`, `min_bytes` 1, `max_wait_ms` [`FETCH_MAX_WAIT`] (the
//!   `ListOffsets` interval while some partition still waits to be learned, so it is retried at that pace), and
//!   `max_bytes` = `partition_max_bytes` = 1 ([`FETCH_BYTES`]): the broker still returns the first batch of the
//!   first partition with news (KIP-74: a fetch always makes progress) and a byte of the others, so an answer
//!   holds one batch besides a few dozen bytes per partition, bounded anyway by the connection's
//!   [`MAX_RESPONSE_BYTES`](super::list_offsets::MAX_RESPONSE_BYTES). The records are dropped unread.
//! - A broker speaking no such `Fetch` version, or a fetch that fails (the connection is then dropped and dialled
//!   again), falls back to `ListOffsets` every interval, the fetch tried again after a pause doubling from
//!   [`FETCH_RETRY`] to [`MAX_FETCH_RETRY`] (reset by a fetch answered): a batch larger than the connection's response
//!   bound costs one reconnect per backoff, never a loop. A broker that answers a fetch at once without news
//!   (a preferred read replica, a misbehaving peer) is asked again only after the interval: never a busy loop.
//!
//! What is taken as the bound (the answers are untrusted): always the high watermark the broker stated for that
//! partition in its latest answer, by `ListOffsets` or `Fetch` (one connection, one request at a time, so the
//! latest answer is the newest); never a value computed here, and never anything the records say. A negative one,
//! an error code or a partition missing from the answer keeps the last one in force (an answer for a partition not
//! asked for, or a second one for the same partition, is ignored). A value lower than the last one is taken as it
//! is: a leader's high watermark does not go back within its epoch, but a new leader may state a lower one until
//! it catches up, and after an unclean election the log may truly have been cut below it; the lower bound ships
//! less, never more than the broker says is committed. (Keeping the higher value would be right for clean
//! elections only.) A follower serving the fetch (Fetch v11+ lets a consumer read from one) states its own high
//! watermark, which trails the leader's: a lower bound, still a committed one.
//!
//! Cost: without a fetch session every request lists every partition (about 35 bytes each plus its topic's name)
//! and every answer answers each, once per move of any high watermark; the fetches are spaced so that at most
//! [`FETCH_PARTITIONS_PER_SECOND`] partition entries are asked a second (no spacing to speak of below a few
//! hundred partitions; at 10,000, one fetch per 50 ms at most, what `ListOffsets` polling cost). A KIP-227 fetch
//! session (incremental requests and answers naming only the partitions that moved) would lift that spacing.
//!
//! Limits: a partition first looked up after the start waits for the fetch in flight (at most [`FETCH_MAX_WAIT`])
//! before it is asked for; only the bootstrap broker is asked, over PLAINTEXT, as [`super::list_offsets`] says.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::bound_hw::{HighWatermark, HighWatermarkSource};
use super::list_offsets::{error_name, BrokerClient, ListOffsetsConfig, PartitionAnswer};
use super::list_offsets::{MAX_FETCH_VERSION, MIN_FETCH_VERSION};
use crate::Result;

/// Longest a fetch stays parked at the broker without news (500 ms, `max_wait_ms`): the cost of an idle source
/// (two small requests a second), and how long a partition first looked up while a fetch is parked waits for it.
pub const FETCH_MAX_WAIT: Duration = Duration::from_millis(500);

/// Pause of the long poll after a fetch failed (1 s), `ListOffsets` polling meanwhile: long enough that a
/// reconnect after a broker restart settles on `ListOffsets` first, short enough that latency is back in a second.
pub const FETCH_RETRY: Duration = Duration::from_secs(1);

/// Longest pause of the long poll after fetches failed in a row (30 s): the pause doubles from [`FETCH_RETRY`].
pub const MAX_FETCH_RETRY: Duration = Duration::from_secs(30);

/// Most partition entries asked a second by the long poll (200,000): a fetch lists every partition and the broker
/// answers every one, so with many partitions whose high watermarks keep moving, fetches answered back to back
/// would cost far more than polling; spacing them by `partitions / this` keeps the cost at or under what
/// `ListOffsets` every 50 ms cost at 10,000 partitions, and changes nothing below a few hundred partitions (1,000:
/// 5 ms between fetches at most).
pub const FETCH_PARTITIONS_PER_SECOND: u32 = 200_000;

/// `max_bytes` and `partition_max_bytes` of the fetch (1 byte): the records are not wanted, but a parked fetch
/// completes only once `min_bytes` (1) of them are available, counted up to `partition_max_bytes`.
pub const FETCH_BYTES: i32 = 1;

/// `ReplicaId` of a client that is not a broker.
const CONSUMER_REPLICA_ID: i32 = -1;

/// Isolation level `READ_UNCOMMITTED`: a parked fetch waits for the high watermark (not the last stable offset).
const READ_UNCOMMITTED: i8 = 0;

/// `session_epoch` of a sessionless fetch (Kafka's `FetchMetadata.FINAL_EPOCH`, with session id 0).
const SESSIONLESS_EPOCH: i32 = -1;

/// Timeouts and pacing (the named constants by default).
#[derive(Debug, Clone, Copy)]
pub struct FetchHwConfig {
    /// [`FETCH_MAX_WAIT`]; kept under half the request timeout.
    pub max_wait: Duration,
    /// [`FETCH_RETRY`].
    pub fetch_retry: Duration,
    /// [`FETCH_PARTITIONS_PER_SECOND`] (at least 1).
    pub partitions_per_second: u32,
    /// [`MAX_FETCH_RETRY`].
    pub max_fetch_retry: Duration,
    /// The `ListOffsets` interval (first learning, relearning, fallback), request timeout and reconnect backoff.
    pub list_offsets: ListOffsetsConfig,
}

impl Default for FetchHwConfig {
    fn default() -> Self {
        FetchHwConfig {
            max_wait: FETCH_MAX_WAIT,
            fetch_retry: FETCH_RETRY,
            partitions_per_second: FETCH_PARTITIONS_PER_SECOND,
            max_fetch_retry: MAX_FETCH_RETRY,
            list_offsets: ListOffsetsConfig::default(),
        }
    }
}

/// How the high watermarks are being learned now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Learning {
    /// No answer yet.
    #[default]
    Starting,
    /// A fetch parked at the high watermarks answers as they move.
    LongPoll,
    /// `ListOffsets` every interval: the broker speaks no usable `Fetch` version, or the last fetch failed.
    Polling,
}

/// The fetch of `partitions`, each `((topic, partition), offset)` at its offset, sorted by topic (consecutive
/// partitions of a topic share its entry), parked for at most `max_wait`.
pub fn fetch_request(partitions: &[((String, i32), i64)], max_wait: Duration) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((topic, partition), offset) in partitions {
        let entry = FetchPartition::default()
            .with_partition(*partition)
            .with_fetch_offset(*offset)
            .with_partition_max_bytes(FETCH_BYTES);
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == topic => t.partitions.push(entry),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![entry]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(CONSUMER_REPLICA_ID))
        .with_max_wait_ms(i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES)
        .with_isolation_level(READ_UNCOMMITTED)
        .with_session_id(0)
        .with_session_epoch(SESSIONLESS_EPOCH)
        .with_topics(topics)
}

/// Each partition's answer in `response` (same order as `partitions`): its high watermark, its error code (a
/// negative high watermark without one reads as error -1), or missing. Answers for partitions not asked for, and
/// every answer after the first for a partition, are ignored. Error: the response's own error code.
pub fn fetch_answers(
    partitions: &[((String, i32), i64)],
    response: &FetchResponse,
) -> std::result::Result<Vec<PartitionAnswer>, String> {
    if response.error_code != 0 {
        return Err(format!("Fetch answered {}", error_name(response.error_code)));
    }
    let mut answered: HashMap<(&str, i32), &PartitionData> = HashMap::new();
    for topic in &response.responses {
        for p in &topic.partitions {
            answered.entry((topic.topic.0.as_str(), p.partition_index)).or_insert(p);
        }
    }
    Ok(partitions
        .iter()
        .map(
            |((topic, partition), _)| match answered.get(&(topic.as_str(), *partition)) {
                None => PartitionAnswer::Missing,
                Some(p) if p.error_code != 0 => PartitionAnswer::Error(p.error_code),
                Some(p) if p.high_watermark < 0 => PartitionAnswer::Error(-1),
                Some(p) => PartitionAnswer::HighWatermark(p.high_watermark),
            },
        )
        .collect())
}

/// One fetch over `client` (which must speak `version`).
async fn fetch(
    client: &mut BrokerClient,
    version: i16,
    partitions: &[((String, i32), i64)],
    max_wait: Duration,
) -> Result<Vec<PartitionAnswer>> {
    let request = fetch_request(partitions, max_wait);
    let response: FetchResponse = client.call(ApiKey::Fetch, &request, version).await?;
    fetch_answers(partitions, &response).map_err(|reason| client.error(reason))
}

/// What the learning task shares with readers.
#[derive(Debug, Default)]
struct Known {
    high_watermarks: HashMap<(String, i32), HighWatermark>,
    /// The last failure, until an answer comes.
    last_error: Option<String>,
    /// Fetches answered.
    fetch_answers: u64,
    /// `ListOffsets` answered.
    list_answers: u64,
    learning: Learning,
    /// The partitions asked for: those given at the start and every one looked up since.
    wanted: BTreeSet<(String, i32)>,
}

/// High watermarks learned by a long-polling fetch (see the module doc). Dropping it stops the learning.
pub struct FetchHighWatermarks {
    known: Arc<RwLock<Known>>,
    /// Moves whenever a high watermark moves ([`HighWatermarkSource::changes`]).
    changed: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl FetchHighWatermarks {
    /// Start learning the high watermarks of `partitions` from `bootstrap` (HOST:PORT), on `runtime`.
    pub fn spawn(
        runtime: &tokio::runtime::Handle,
        bootstrap: String,
        partitions: Vec<(String, i32)>,
        mut config: FetchHwConfig,
    ) -> Self {
        // A parked fetch must be answered well within the request timeout, or it would read as a stuck broker.
        config.max_wait = config.max_wait.min(config.list_offsets.request_timeout / 2);
        let known = Arc::new(RwLock::new(Known {
            wanted: partitions.into_iter().collect(),
            ..Known::default()
        }));
        let (changes, changed) = tokio::sync::watch::channel(0u64);
        let task = runtime.spawn(learn(bootstrap, config, known.clone(), changes));
        FetchHighWatermarks { known, changed, task }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the last attempt failed, while no answer has come since.
    pub fn last_error(&self) -> Option<String> {
        self.read().last_error.clone()
    }

    /// How many fetches were answered so far.
    pub fn fetch_answers(&self) -> u64 {
        self.read().fetch_answers
    }

    /// How many `ListOffsets` were answered so far.
    pub fn list_answers(&self) -> u64 {
        self.read().list_answers
    }

    /// How the high watermarks are being learned now.
    pub fn learning(&self) -> Learning {
        self.read().learning
    }
}

impl Drop for FetchHighWatermarks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HighWatermarkSource for FetchHighWatermarks {
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changed.clone())
    }

    fn high_watermark(&self, topic: &str, partition: i32) -> Option<HighWatermark> {
        let key = (topic.to_string(), partition);
        {
            let known = self.read();
            if let Some(hw) = known.high_watermarks.get(&key) {
                return Some(*hw);
            }
            if known.wanted.contains(&key) {
                return None;
            }
        }
        // Not asked for yet: from the next round on (unknown until then, so nothing of it ships).
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        known.wanted.insert(key);
        None
    }
}

/// Which request an answer came from (for the counters and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    ListOffsets,
    Fetch,
}

/// What one answer did.
#[derive(Debug, Default)]
struct Taken {
    /// A high watermark moved.
    moved: bool,
    /// The partitions answered with a high watermark, and it (where their next fetch parks).
    learned: Vec<((String, i32), i64)>,
    /// The partitions answered without one (relearned by `ListOffsets`).
    failed: Vec<(String, i32)>,
}

/// Take one answer's high watermarks (the rule of the module doc), log the partition errors that changed, and
/// move the change counter if any high watermark moved.
fn take(
    known: &RwLock<Known>,
    changes: &tokio::sync::watch::Sender<u64>,
    partition_errors: &mut HashMap<(String, i32), i16>,
    keys: impl Iterator<Item = (String, i32)>,
    answers: Vec<PartitionAnswer>,
    via: Via,
) -> Taken {
    let as_of = SystemTime::now();
    let mut taken = Taken::default();
    let mut k = known.write().unwrap_or_else(|p| p.into_inner());
    k.last_error = None;
    match via {
        Via::ListOffsets => k.list_answers += 1,
        Via::Fetch => k.fetch_answers += 1,
    }
    for (key, answer) in keys.zip(answers) {
        let code = match answer {
            PartitionAnswer::HighWatermark(offset) => {
                if partition_errors.remove(&key).is_some() {
                    tracing::info!(topic = %key.0, partition = key.1, offset, "high watermark known again");
                }
                let previous = k.high_watermarks.insert(key.clone(), HighWatermark { offset, as_of });
                taken.moved |= previous.is_none_or(|p| p.offset != offset);
                taken.learned.push((key, offset));
                continue;
            }
            PartitionAnswer::Error(code) => code,
            PartitionAnswer::Missing => i16::MIN,
        };
        if partition_errors.insert(key.clone(), code) != Some(code) {
            let error = if code == i16::MIN {
                "not in the answer".to_string()
            } else {
                error_name(code)
            };
            tracing::warn!(topic = %key.0, partition = key.1, %error, ?via, "no high watermark for a partition: its last known one stays in force");
        }
        taken.failed.push(key);
    }
    drop(k);
    if taken.moved {
        changes.send_modify(|n| *n = n.wrapping_add(1));
    }
    taken
}

fn note_error(known: &RwLock<Known>, message: String, retry_in: Duration) {
    let mut k = known.write().unwrap_or_else(|p| p.into_inner());
    if k.last_error.as_deref() != Some(message.as_str()) {
        tracing::warn!(error = %message, ?retry_in, "learning the source broker's high watermarks failed: the last known ones stay in force");
    }
    k.last_error = Some(message);
}

fn set_learning(known: &RwLock<Known>, learning: Learning) {
    known.write().unwrap_or_else(|p| p.into_inner()).learning = learning;
}

/// The learning loop: runs until the source is dropped.
async fn learn(
    bootstrap: String,
    config: FetchHwConfig,
    known: Arc<RwLock<Known>>,
    changes: tokio::sync::watch::Sender<u64>,
) {
    let interval = config.list_offsets.interval;
    let mut client: Option<BrokerClient> = None;
    let mut backoff = interval;
    // Where each partition's fetch parks: the last high watermark answered (none: to be learned by ListOffsets).
    let mut parked_at: HashMap<(String, i32), i64> = HashMap::new();
    let mut last_list: Option<Instant> = None;
    let mut last_fetch: Option<Instant> = None;
    let mut fetch_retry = config.fetch_retry;
    let mut fetch_paused_until: Option<Instant> = None;
    let mut partition_errors: HashMap<(String, i32), i16> = HashMap::new();
    loop {
        let wanted: Vec<(String, i32)> = {
            let k = known.read().unwrap_or_else(|p| p.into_inner());
            k.wanted.iter().cloned().collect()
        };
        if wanted.is_empty() {
            tokio::time::sleep(interval).await;
            continue;
        }
        if client.is_none() {
            match BrokerClient::connect(&bootstrap, config.list_offsets.request_timeout).await {
                Ok(c) => {
                    match c.fetch_version() {
                        Some(version) => {
                            tracing::info!(broker = %bootstrap, version, "learning the source broker's high watermarks by a long-polling Fetch")
                        }
                        None => {
                            tracing::warn!(broker = %bootstrap, "the source broker speaks no Fetch version {MIN_FETCH_VERSION}..={MAX_FETCH_VERSION}: high watermarks by ListOffsets every {interval:?}")
                        }
                    }
                    client = Some(c);
                }
                Err(e) => {
                    note_error(&known, e.to_string(), backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.list_offsets.max_backoff);
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };
        let version = c
            .fetch_version()
            .filter(|_| fetch_paused_until.is_none_or(|until| Instant::now() >= until));
        // ListOffsets: the partitions the fetch cannot park yet; every partition while polling.
        let pending: Vec<(String, i32)> = wanted
            .iter()
            .filter(|key| version.is_none() || !parked_at.contains_key(*key))
            .cloned()
            .collect();
        if !pending.is_empty() && last_list.is_none_or(|at| at.elapsed() >= interval) {
            last_list = Some(Instant::now());
            match c.high_watermarks(&pending).await {
                Ok(answers) => {
                    let taken = take(
                        &known,
                        &changes,
                        &mut partition_errors,
                        pending.iter().cloned(),
                        answers,
                        Via::ListOffsets,
                    );
                    parked_at.extend(taken.learned);
                }
                Err(e) => {
                    client = None;
                    note_error(&known, e.to_string(), backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.list_offsets.max_backoff);
                    continue;
                }
            }
        }
        backoff = interval;
        let Some(version) = version else {
            set_learning(&known, Learning::Polling);
            tokio::time::sleep(interval).await;
            continue;
        };
        let fetchable: Vec<((String, i32), i64)> = wanted
            .iter()
            .filter_map(|key| parked_at.get(key).map(|offset| (key.clone(), *offset)))
            .collect();
        if fetchable.is_empty() {
            tokio::time::sleep(interval).await;
            continue;
        }
        // While some partition waits to be learned, park only for an interval so that it is retried at that pace.
        let max_wait = if fetchable.len() < wanted.len() {
            interval.min(config.max_wait)
        } else {
            config.max_wait
        };
        // Spaced by the partition budget (FETCH_PARTITIONS_PER_SECOND) from the previous fetch's start.
        let gap = Duration::from_secs_f64(fetchable.len() as f64 / f64::from(config.partitions_per_second.max(1)));
        if let Some(due) = last_fetch.map(|at| at + gap) {
            tokio::time::sleep_until(due.into()).await;
        }
        let started = Instant::now();
        last_fetch = Some(started);
        match fetch(c, version, &fetchable, max_wait).await {
            Ok(answers) => {
                fetch_retry = config.fetch_retry;
                set_learning(&known, Learning::LongPoll);
                let taken = take(
                    &known,
                    &changes,
                    &mut partition_errors,
                    fetchable.iter().map(|(key, _)| key.clone()),
                    answers,
                    Via::Fetch,
                );
                for key in &taken.failed {
                    parked_at.remove(key);
                }
                tracing::trace!(elapsed_us = started.elapsed().as_micros() as u64, moved = taken.moved, learned = ?taken.learned, "fetch answered");
                parked_at.extend(taken.learned);
                if !taken.moved && taken.failed.is_empty() && started.elapsed() < max_wait / 2 {
                    // Answered at once without news: not parked (a preferred read replica, a misbehaving peer).
                    tokio::time::sleep(interval).await;
                }
            }
            Err(e) => {
                client = None;
                fetch_paused_until = Some(Instant::now() + fetch_retry);
                set_learning(&known, Learning::Polling);
                note_error(
                    &known,
                    format!("{e} (high watermarks by ListOffsets every {interval:?}, Fetch again in {fetch_retry:?})"),
                    fetch_retry,
                );
                fetch_retry = (fetch_retry * 2).min(config.max_fetch_retry);
            }
        }
    }
}

#[cfg(test)]
#[path = "fetch_hw_tests.rs"]
mod tests;
