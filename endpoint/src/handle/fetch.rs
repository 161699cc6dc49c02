//! Fetch: whole batches from the replica, byte for byte, long-polling until `min_bytes` or `max_wait_ms`.
//!
//! What bounds the work: the bytes of records held for responses, over all clients, are taken from one
//! semaphore before any is read and given back once the response is written (the permit travels with the
//! response to the connection), so a thousand clients each asking for 50 MiB wait their turn instead of
//! holding 50 GB. A fetch reserves at most its `max_bytes` and at most a sixteenth of that memory, and keeps only
//! what it read once it has read; the first batch of a response is returned whole even when larger (as a broker
//! does, so a client can always make progress), later ones only when they fit. A client that stops reading its
//! answers holds their share until the connection's write timeout ends it: sixteen such clients at once would
//! make the others wait that long, never grow the memory.
//!
//! Sessions (`sessions`): a request is looked up first (full, incremental, or refused), the partitions it stands
//! for are read as any fetch reads them, and the answer is made from the session (an incremental answer only
//! carries partitions with something new). The session's lock is never held while reading or waiting.
//!
//! Long polling: the replica's change signal (new installs) wakes a waiting fetch, which reads again; the wait
//! never exceeds `max_wait_ms` nor the endpoint's own cap, and holds no memory permit while it waits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::offsets::code;
use super::sessions::{Asked, Closed, Context, Keying, TopicKey};
use super::zero_copy::Placeholders;
use super::Endpoint;
use crate::replica::{Isolation, ReadError, Replica, SpannedRecords, TopicView};

const UNKNOWN_TOPIC_ID: i16 = 100;

/// One partition to read, resolved to a topic name (`None`: not served).
struct Wanted {
    topic: Option<String>,
    partition: i32,
    offset: i64,
    max_bytes: usize,
}

/// The answer and the memory permit of its records, to be dropped once written.
pub(super) struct Answer {
    pub response: FetchResponse,
    pub permit: Option<OwnedSemaphorePermit>,
    /// The records to send from files, when the client takes them that way (see `zero_copy`).
    pub placeholders: Placeholders,
}

pub(super) async fn answer(endpoint: &Endpoint, request: FetchRequest, version: i16, zero_copy: bool) -> Answer {
    let views = endpoint.replica.topics();
    let served = views.iter().map(|v| v.partitions.len()).sum();
    let (context, asked) = endpoint.sessions.open(version, &request, served, Instant::now());
    if let Context::Refused(error_code) = context {
        let mut response = FetchResponse::default();
        response.error_code = error_code;
        return Answer {
            response,
            permit: None,
            placeholders: Placeholders::default(),
        };
    }
    let by_id = Keying::of(version) == Keying::ById;
    let isolation = Isolation::from_wire(request.isolation_level);
    let names = Names::new(&views);
    let wanted: Vec<Wanted> = asked
        .iter()
        .map(|a| Wanted {
            topic: names.resolve(&a.topic),
            partition: a.partition,
            offset: a.offset,
            max_bytes: usize::try_from(a.max_bytes).unwrap_or(0),
        })
        .collect();
    let limits = *endpoint.limits();
    // One response takes at most a sixteenth of the fetch memory, so that a few clients that stop reading their
    // answers cannot hold all of it (and the write timeout frees what they hold).
    let max_bytes = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min((limits.fetch_memory_bytes / 16).max(1 << 20))
        .min(limits.fetch_memory_bytes)
        .max(1);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(limits.max_fetch_wait);
    let deadline = Instant::now() + wait;
    let wanted = Arc::new(wanted);
    let mut changes = endpoint.replica.changes();
    changes.borrow_and_update();
    loop {
        let permit = endpoint
            .fetch_memory
            .clone()
            .acquire_many_owned(u32::try_from(max_bytes).unwrap_or(u32::MAX))
            .await
            .ok();
        let replica = endpoint.replica.clone();
        let job = wanted.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut placeholders = zero_copy.then(Placeholders::default);
            let read = read_all(
                replica.as_ref(),
                &job,
                max_bytes,
                isolation,
                by_id,
                placeholders.as_mut(),
            );
            (read, placeholders.unwrap_or_default())
        })
        .await;
        let ((partitions, total, buffered, errors), placeholders) = match read {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!("a fetch's read failed: {e}");
                let mut response = FetchResponse::default();
                response.error_code = -1;
                return Answer {
                    response,
                    permit: None,
                    placeholders: Placeholders::default(),
                };
            }
        };
        let now = Instant::now();
        if total >= min_bytes || errors || now >= deadline {
            // Keep only the share the answer holds: what was read into memory (the reservation was for the most it
            // could be; records sent from files hold none).
            let mut permit = permit;
            if let Some(held) = permit.as_mut() {
                let unused = held.num_permits().saturating_sub(buffered.max(1));
                drop(held.split(unused));
            }
            let closed = endpoint.sessions.close(context, &asked, partitions, served, now);
            return Answer {
                response: respond(closed, &asked),
                permit,
                placeholders,
            };
        }
        drop(permit);
        // Nothing (or too little) yet: wait for the replica to move, or the deadline.
        if tokio::time::timeout(deadline - now, changes.changed()).await.is_err() {
            // Deadline: read once more (cheap) so the answer carries the latest ends.
            continue;
        }
    }
}

/// The served topics by name and by id.
struct Names<'a> {
    by_name: HashMap<&'a str, &'a TopicView>,
    by_id: HashMap<uuid::Uuid, &'a TopicView>,
}

impl<'a> Names<'a> {
    fn new(views: &'a [TopicView]) -> Self {
        Self {
            by_name: views.iter().map(|v| (v.name.as_str(), v)).collect(),
            by_id: views
                .iter()
                .map(|v| (uuid::Uuid::from_bytes(v.id), v))
                .filter(|(id, _)| !id.is_nil())
                .collect(),
        }
    }

    fn resolve(&self, topic: &TopicKey) -> Option<String> {
        match topic {
            TopicKey::Name(name) => self.by_name.get(name.as_str()).map(|v| v.name.clone()),
            TopicKey::Id(id) => self.by_id.get(id).map(|v| v.name.clone()),
        }
    }
}

/// The response: the session's fields, its partitions grouped by topic in the order asked.
fn respond(closed: Closed, asked: &[Asked]) -> FetchResponse {
    let mut response = FetchResponse::default();
    response.error_code = closed.error_code;
    response.session_id = closed.session_id;
    let mut last: Option<&TopicKey> = None;
    for (i, data) in closed.partitions {
        let topic = &asked[i].topic;
        if last != Some(topic) {
            let (name, id) = topic.wire();
            let mut out = FetchableTopicResponse::default();
            out.topic = name;
            out.topic_id = id;
            response.responses.push(out);
            last = Some(topic);
        }
        if let Some(out) = response.responses.last_mut() {
            out.partitions.push(data);
        }
    }
    response
}

/// Read every partition asked, in order; their answers, the record bytes read, and whether any partition erred.
/// Read every partition asked: the answers, the record bytes in all, those read into memory (not sent from
/// files), and whether any partition erred. With `placeholders`, records are located in their files rather than
/// read, where the replica can (`zero_copy`).
fn read_all(
    replica: &dyn Replica,
    wanted: &[Wanted],
    max_bytes: usize,
    isolation: Isolation,
    by_id: bool,
    mut placeholders: Option<&mut Placeholders>,
) -> (Vec<PartitionData>, usize, usize, bool) {
    let mut total = 0usize;
    let mut buffered = 0usize;
    let mut errors = false;
    let partitions = wanted
        .iter()
        .map(|w| {
            let budget = w.max_bytes.min(max_bytes.saturating_sub(total));
            let (data, in_memory) = read_one(
                replica,
                w,
                budget,
                total == 0,
                isolation,
                by_id,
                placeholders.as_deref_mut(),
            );
            if data.error_code != 0 {
                errors = true;
            }
            total += data.records.as_ref().map_or(0, Bytes::len);
            buffered += in_memory;
            data
        })
        .collect();
    (partitions, total, buffered, errors)
}

/// The records of one read: in memory, or located in files (sent with `sendfile`).
enum Got {
    Memory(crate::replica::Records),
    Files(SpannedRecords),
}

/// One partition's answer, and the bytes of it read into memory.
fn read_one(
    replica: &dyn Replica,
    wanted: &Wanted,
    budget: usize,
    first: bool,
    isolation: Isolation,
    by_id: bool,
    placeholders: Option<&mut Placeholders>,
) -> (PartitionData, usize) {
    let mut data = PartitionData::default();
    data.partition_index = wanted.partition;
    data.high_watermark = -1;
    data.last_stable_offset = -1;
    data.log_start_offset = -1;
    data.aborted_transactions = None;
    data.records = Some(Bytes::new());
    let Some(topic) = &wanted.topic else {
        data.error_code = if by_id {
            UNKNOWN_TOPIC_ID
        } else {
            code(&ReadError::UnknownPartition)
        };
        return (data, 0);
    };
    // A partition past the response's budget is answered with its ends only (a broker does the same).
    let max = if budget == 0 && !first { 0 } else { budget.max(1) };
    let from_files = placeholders.as_ref().is_some_and(|p| max <= p.room());
    let read = if max == 0 {
        replica.ends(topic, wanted.partition).map(|ends| {
            Got::Memory(crate::replica::Records {
                ends,
                bytes: Bytes::new(),
                aborted: Vec::new(),
            })
        })
    } else {
        let spans = if from_files {
            replica.read_spans(topic, wanted.partition, wanted.offset, max, isolation)
        } else {
            None
        };
        match spans {
            Some(spans) => spans.map(Got::Files),
            None => replica
                .read(topic, wanted.partition, wanted.offset, max, isolation)
                .map(Got::Memory),
        }
    };
    let mut in_memory = 0;
    match read {
        Ok(got) => {
            let (ends, aborted) = match &got {
                Got::Memory(r) => (r.ends, &r.aborted),
                Got::Files(r) => (r.ends, &r.aborted),
            };
            data.high_watermark = ends.high_watermark;
            data.last_stable_offset = ends.last_stable;
            data.log_start_offset = ends.log_start;
            if isolation == Isolation::ReadCommitted {
                data.aborted_transactions = Some(
                    aborted
                        .iter()
                        .map(|a| {
                            let mut t = AbortedTransaction::default();
                            t.producer_id = ProducerId(a.producer_id);
                            t.first_offset = a.first_offset;
                            t
                        })
                        .collect(),
                );
            }
            // Later partitions get a batch only when it fits what is left (the first may exceed it).
            match got {
                Got::Memory(records) => {
                    if first || records.bytes.len() <= budget {
                        in_memory = records.bytes.len();
                        data.records = Some(records.bytes);
                    }
                }
                Got::Files(records) => {
                    let len = usize::try_from(records.len()).unwrap_or(usize::MAX);
                    if first || len <= budget {
                        // Without room left to send more from files, this partition's records wait for the next
                        // fetch (its ends are in the answer).
                        if let Some(placeholder) = placeholders.and_then(|p| p.hold(records.spans, len)) {
                            data.records = Some(placeholder);
                        }
                    }
                }
            }
        }
        Err(ReadError::OutOfRange { ends, .. }) => {
            data.error_code = 1;
            data.high_watermark = ends.high_watermark;
            data.last_stable_offset = ends.last_stable;
            data.log_start_offset = ends.log_start;
        }
        Err(e) => data.error_code = code(&e),
    }
    (data, in_memory)
}
