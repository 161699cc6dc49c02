//! Reading a KRaft broker's metadata log (`__cluster_metadata-0`) from disk: topic names, topic ids, partition
//! counts, topic configs and dynamic broker configs, as the cluster last committed them.
//!
//! Why: `segmirror promote` works on a *stopped* target broker, so it cannot ask the cluster what a topic's
//! `retention.ms` is; the broker's own copy of the metadata log answers it. The same reader will let a seeder learn
//! a source's topic configs and partition counts without a running cluster.
//!
//! # Format (established against Kafka 4.4's `metadata/src/main/resources/common/metadata/*.json` and
//! `AbstractApiMessageSerde`, and against a real broker's log in `tests/tests/metadata_log.rs`)
//! - The directory holds ordinary log segments (`<20-digit base offset>.log`, magic-2 record batches) and snapshots
//!   `<20-digit end offset>-<10-digit epoch>.checkpoint` (the same batch format; a snapshot holds the state of every
//!   record below its end offset). The state is the newest snapshot, then every segment record at or after the
//!   snapshot's end offset, in log order.
//! - Control batches (leader change, snapshot header/footer, voters) carry no metadata and are skipped.
//! - A record value is a frame: `frameVersion` (unsigned varint, must be 1), `apiKey` (unsigned varint), `version`
//!   (unsigned varint), then the message in Kafka's flexible encoding (compact strings: unsigned varint length + 1,
//!   0 = null; UUIDs as 16 bytes; trailing tagged fields).
//! - Used here: `TopicRecord` (apiKey 2, v0: Name, TopicId), `PartitionRecord` (apiKey 3, v0-2: PartitionId int32,
//!   TopicId — the leading fields of every version), `ConfigRecord` (apiKey 4, v0: ResourceType int8 (2 = topic,
//!   4 = broker), ResourceName, Name, Value nullable — null deletes the key), `RemoveTopicRecord` (apiKey 9, v0:
//!   TopicId; it also drops the topic's configs, as Kafka's `ConfigurationsDelta` does). Other records are skipped.
//!   A version of these records this reader does not know is an error: guessing would misread its fields.
//!
//! # Bounds
//! Files are mapped and scanned frame by frame ([`crate::log::LogFile`]); records of compressed batches stream
//! through [`crate::record::for_each_record`]'s bounded buffer. The state kept is capped at [`MAX_ENTRIES`] topics,
//! partitions and config keys together, so a hostile log cannot grow it without bound. A frame cut short at the end
//! of the last segment (a broker killed mid-write) ends the read, as Kafka's recovery truncates it; a corrupt frame
//! or record anywhere is an error naming the file, position and offset. The tail of a multi-controller quorum's log
//! may hold records not yet committed; on a stopped single broker every record on disk is what it serves.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::batch::parse_header;
use crate::error::{Defect, Error};
use crate::log::LogFile;
use crate::partition_metadata::Uuid;
use crate::record::{for_each_record, DeepLimits};

/// Name of the metadata log's partition directory, in `metadata.log.dir` (by default the first of `log.dirs`).
pub const METADATA_DIR: &str = "__cluster_metadata-0";
/// Extension of a KRaft snapshot file.
pub const SNAPSHOT_SUFFIX: &str = ".checkpoint";
/// The only metadata record frame version Kafka writes and reads (`AbstractApiMessageSerde`).
pub const FRAME_VERSION: u32 = 1;
/// `ConfigRecord.ResourceType` of a topic (`ConfigResource.Type.TOPIC`).
pub const RESOURCE_TOPIC: i8 = 2;
/// `ConfigRecord.ResourceType` of a broker (`ConfigResource.Type.BROKER`); resource name `""` is the cluster-wide
/// default, otherwise the node id.
pub const RESOURCE_BROKER: i8 = 4;
/// Most topics, partitions and config keys kept together: real clusters stay below a few hundred thousand
/// partitions; four million entries (a few hundred MiB at worst) stops a hostile log long before memory runs out.
pub const MAX_ENTRIES: usize = 1 << 22;

/// Record types this reader applies.
pub const API_TOPIC_RECORD: u32 = 2;
pub const API_PARTITION_RECORD: u32 = 3;
pub const API_CONFIG_RECORD: u32 = 4;
pub const API_REMOVE_TOPIC_RECORD: u32 = 9;

/// One topic as the metadata log describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub topic_id: Uuid,
    /// Partition ids with a `PartitionRecord`.
    pub partitions: BTreeSet<i32>,
    /// Topic-level config overrides (`retention.ms`, ...); keys absent here take the broker's values.
    pub configs: BTreeMap<String, String>,
}

impl TopicMetadata {
    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }
}

/// The cluster state a metadata log describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// Live topics by name.
    pub topics: BTreeMap<String, TopicMetadata>,
    /// Dynamic broker configs by resource name: `""` = cluster-wide default, `"<node id>"` = one broker.
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Snapshot the state started from, if any.
    pub snapshot: Option<PathBuf>,
    /// Offset after the last record applied (0 for an empty log).
    pub end_offset: i64,
    /// Topic configs of topics not created (yet): Kafka accepts none, but a log read from the middle could hold them.
    topic_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Topic id -> name.
    ids: BTreeMap<Uuid, String>,
    entries: usize,
}

impl ClusterMetadata {
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.get(name)
    }

    /// The dynamic config `key` for broker `node_id`: its own override, else the cluster-wide default.
    pub fn broker_config(&self, node_id: i32, key: &str) -> Option<&str> {
        self.broker_configs
            .get(&node_id.to_string())
            .and_then(|c| c.get(key))
            .or_else(|| self.broker_configs.get("").and_then(|c| c.get(key)))
            .map(String::as_str)
    }

    fn grow(&mut self, by: usize) -> Result<(), String> {
        self.entries = self.entries.saturating_add(by);
        if self.entries > MAX_ENTRIES {
            return Err(format!(
                "more than {MAX_ENTRIES} topics, partitions and config keys: refusing to keep more"
            ));
        }
        Ok(())
    }

    /// Apply one metadata record value (the frame). Unknown record types are skipped.
    pub fn replay(&mut self, value: &[u8]) -> Result<(), String> {
        let mut r = Reader { buf: value, pos: 0 };
        let frame = r.uvarint("frame version")?;
        if frame != FRAME_VERSION {
            return Err(format!(
                "metadata record frame version {frame}, expected {FRAME_VERSION}"
            ));
        }
        let api_key = r.uvarint("record type")?;
        let version = r.uvarint("record version")?;
        let known = |max: u32, name: &str| {
            if version > max {
                Err(format!(
                    "{name} version {version} is newer than this reader knows ({max})"
                ))
            } else {
                Ok(())
            }
        };
        match api_key {
            API_TOPIC_RECORD => {
                known(0, "TopicRecord")?;
                let name = r.string("TopicRecord.Name")?;
                let id = r.uuid("TopicRecord.TopicId")?;
                self.add_topic(name, id)
            }
            API_PARTITION_RECORD => {
                known(2, "PartitionRecord")?;
                let partition = r.i32("PartitionRecord.PartitionId")?;
                let id = r.uuid("PartitionRecord.TopicId")?;
                if partition < 0 {
                    return Err(format!("PartitionRecord.PartitionId {partition} is negative"));
                }
                let Some(name) = self.ids.get(&id) else {
                    return Err(format!("PartitionRecord for unknown topic id {id}"));
                };
                let topic = self.topics.get_mut(name).ok_or("topic index out of step")?;
                if topic.partitions.insert(partition) {
                    self.grow(1)?;
                }
                Ok(())
            }
            API_CONFIG_RECORD => {
                known(0, "ConfigRecord")?;
                let resource_type = r.i8("ConfigRecord.ResourceType")?;
                let resource = r.string("ConfigRecord.ResourceName")?;
                let key = r.string("ConfigRecord.Name")?;
                let value = r.nullable_string("ConfigRecord.Value")?;
                self.set_config(resource_type, resource, key, value)
            }
            API_REMOVE_TOPIC_RECORD => {
                known(0, "RemoveTopicRecord")?;
                let id = r.uuid("RemoveTopicRecord.TopicId")?;
                let Some(name) = self.ids.remove(&id) else {
                    return Err(format!("RemoveTopicRecord for unknown topic id {id}"));
                };
                if let Some(t) = self.topics.remove(&name) {
                    self.entries = self.entries.saturating_sub(1 + t.partitions.len() + t.configs.len());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn add_topic(&mut self, name: String, id: Uuid) -> Result<(), String> {
        if self.ids.contains_key(&id) {
            return Err(format!("TopicRecord repeats topic id {id}"));
        }
        if let Some(old) = self.topics.get(&name) {
            return Err(format!(
                "TopicRecord for {name:?} (id {id}) while topic id {} of that name exists",
                old.topic_id
            ));
        }
        self.grow(1)?;
        let configs = self.topic_configs.remove(&name).unwrap_or_default();
        self.ids.insert(id, name.clone());
        self.topics.insert(
            name.clone(),
            TopicMetadata {
                name,
                topic_id: id,
                partitions: BTreeSet::new(),
                configs,
            },
        );
        Ok(())
    }

    fn set_config(
        &mut self,
        resource_type: i8,
        resource: String,
        key: String,
        value: Option<String>,
    ) -> Result<(), String> {
        let map = match resource_type {
            RESOURCE_TOPIC => match self.topics.get_mut(&resource) {
                Some(t) => &mut t.configs,
                None => self.topic_configs.entry(resource).or_default(),
            },
            RESOURCE_BROKER => self.broker_configs.entry(resource).or_default(),
            _ => return Ok(()),
        };
        let added = match value {
            Some(v) => map.insert(key, v).is_none(),
            None => {
                if map.remove(&key).is_some() {
                    self.entries = self.entries.saturating_sub(1);
                }
                false
            }
        };
        if added {
            self.grow(1)?;
        }
        Ok(())
    }
}

/// A cursor over one metadata record value.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, field: &str) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        match end {
            Some(end) => {
                let bytes = self
                    .buf
                    .get(self.pos..end)
                    .ok_or_else(|| format!("{field}: out of bounds"))?;
                self.pos = end;
                Ok(bytes)
            }
            None => Err(format!(
                "{field}: needs {n} byte(s) at byte {} of the record value, {} left",
                self.pos,
                self.buf.len().saturating_sub(self.pos)
            )),
        }
    }

    /// Kafka's unsigned varint (at most 5 bytes, fits in 32 bits).
    fn uvarint(&mut self, field: &str) -> Result<u32, String> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| format!("{field}: record value ends inside a varint"))?;
            self.pos += 1;
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(format!("{field}: varint overflows 32 bits"));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!("{field}: varint longer than 5 bytes"))
    }

    fn i8(&mut self, field: &str) -> Result<i8, String> {
        Ok(self.take(1, field)?.first().map_or(0, |b| *b as i8))
    }

    fn i32(&mut self, field: &str) -> Result<i32, String> {
        let b = self.take(4, field)?;
        let arr: [u8; 4] = b.try_into().map_err(|_| format!("{field}: short"))?;
        Ok(i32::from_be_bytes(arr))
    }

    fn uuid(&mut self, field: &str) -> Result<Uuid, String> {
        let b = self.take(16, field)?;
        let arr: [u8; 16] = b.try_into().map_err(|_| format!("{field}: short"))?;
        Ok(Uuid(arr))
    }

    fn nullable_string(&mut self, field: &str) -> Result<Option<String>, String> {
        let len = self.uvarint(field)?;
        if len == 0 {
            return Ok(None);
        }
        let bytes = self.take((len - 1) as usize, field)?;
        let s = std::str::from_utf8(bytes).map_err(|e| format!("{field}: not UTF-8: {e}"))?;
        Ok(Some(s.to_string()))
    }

    fn string(&mut self, field: &str) -> Result<String, String> {
        self.nullable_string(field)?
            .ok_or_else(|| format!("{field} is null, which this field does not allow"))
    }
}

/// A segment or snapshot file of the metadata directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MetadataFile {
    offset: i64,
    epoch: i32,
    path: PathBuf,
}

fn parse_digits<T: std::str::FromStr>(s: &str, len: usize) -> Option<T> {
    (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Read the metadata directory `dir` (normally `<metadata.log.dir>/__cluster_metadata-0`).
pub fn read_metadata_dir(dir: &Path) -> Result<ClusterMetadata, Error> {
    let mut segments = Vec::new();
    let mut snapshots = Vec::new();
    let listing = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        let wanted = name.ends_with(".log") || name.ends_with(SNAPSHOT_SUFFIX);
        // Checked before opening: opening a FIFO or device for reading could block or never end.
        if wanted && !std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.is_file() {
            return Err(Error::corrupt(
                &path,
                0,
                None,
                Defect::Other {
                    message: "not a regular file".to_string(),
                },
            ));
        }
        if let Some(base) = name.strip_suffix(".log").and_then(|s| parse_digits::<i64>(s, 20)) {
            segments.push(MetadataFile {
                offset: base,
                epoch: 0,
                path,
            });
        } else if let Some((offset, epoch)) = name
            .strip_suffix(SNAPSHOT_SUFFIX)
            .and_then(|s| s.split_once('-'))
            .and_then(|(o, e)| Some((parse_digits::<i64>(o, 20)?, parse_digits::<i32>(e, 10)?)))
        {
            snapshots.push(MetadataFile { offset, epoch, path });
        }
    }
    segments.sort();
    snapshots.sort();
    let mut state = ClusterMetadata::default();
    let mut from = 0;
    if let Some(snapshot) = snapshots.last() {
        apply_file(&mut state, &snapshot.path, None, false)?;
        from = snapshot.offset;
        state.snapshot = Some(snapshot.path.clone());
        state.end_offset = snapshot.offset;
    }
    // Segments holding only records below the snapshot's end are superseded by it.
    let first_needed = segments.iter().rposition(|s| s.offset <= from).unwrap_or(0);
    let needed = segments.get(first_needed..).unwrap_or_default();
    if let Some(first) = needed.first() {
        if first.offset > from {
            return Err(Error::corrupt(
                &first.path,
                0,
                Some(first.offset),
                Defect::Other {
                    message: format!(
                        "the metadata log starts at offset {} but {} ends at offset {from}: records {from}..{} are \
                         missing",
                        first.offset,
                        snapshots
                            .last()
                            .map_or_else(|| "no snapshot".to_string(), |s| s.path.display().to_string()),
                        first.offset
                    ),
                },
            ));
        }
    }
    let last = needed.len().saturating_sub(1);
    for (i, segment) in needed.iter().enumerate() {
        apply_file(&mut state, &segment.path, Some(from), i == last)?;
    }
    Ok(state)
}

/// Apply every data record of `path` at or after `from` (all of them for `None`, a snapshot). A partial last frame
/// is tolerated only in the newest segment (`tail`).
fn apply_file(state: &mut ClusterMetadata, path: &Path, from: Option<i64>, tail: bool) -> Result<(), Error> {
    let mut file = LogFile::open(path)?;
    let limits = DeepLimits::default();
    let mut failure: Option<Error> = None;
    let scan = file.scan(|frame| {
        let info = &frame.info;
        let fail =
            |message: String| Error::corrupt(path, info.position, Some(info.base_offset), Defect::Other { message });
        if let Some(defect) = frame.crc_defect() {
            failure = Some(Error::corrupt(
                path,
                frame.crc_position(),
                Some(info.base_offset),
                defect,
            ));
            return ControlFlow::Break(());
        }
        if info.magic != 2 {
            failure = Some(fail(format!(
                "magic {} batch in a metadata log (only magic 2 exists there)",
                info.magic
            )));
            return ControlFlow::Break(());
        }
        if info.is_control || from.is_some_and(|f| info.last_offset < f) {
            return ControlFlow::Continue(());
        }
        let body = frame.bytes;
        let header = match parse_header(body) {
            Ok(h) => h,
            Err(e) => {
                failure = Some(e.shifted(info.position).at(path));
                return ControlFlow::Break(());
            }
        };
        let mut record_error = None;
        let walked = for_each_record(body, &header, &limits, |record| {
            if from.is_some_and(|f| record.offset < f) {
                return ControlFlow::Continue(());
            }
            let Some(value) = record.value else {
                record_error = Some((record.offset, "metadata record without a value".to_string()));
                return ControlFlow::Break(());
            };
            if let Err(message) = state.replay(value) {
                record_error = Some((record.offset, message));
                return ControlFlow::Break(());
            }
            state.end_offset = state.end_offset.max(record.offset.saturating_add(1));
            ControlFlow::Continue(())
        });
        if let Some((offset, message)) = record_error {
            failure = Some(Error::corrupt(
                path,
                info.position,
                Some(offset),
                Defect::Other { message },
            ));
            return ControlFlow::Break(());
        }
        if let Err(e) = walked {
            failure = Some(e.shifted(info.position).at(path));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    match scan {
        Ok(_) => Ok(()),
        Err(Error::Incomplete { .. }) if tail => Ok(()),
        Err(e) => Err(e),
    }
}

/// Largest `server.properties` read: real ones are a few KiB; 16 MiB keeps a wrong path (a segment, a device) from
/// being read whole.
pub const MAX_PROPERTIES_BYTES: u64 = 16 << 20;

/// A broker's `server.properties` (Java `Properties` syntax), later keys winning as in Java.
pub fn read_server_properties(path: &Path) -> Result<BTreeMap<String, String>, Error> {
    // Checked before opening: opening a FIFO for reading would block.
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() || meta.len() > MAX_PROPERTIES_BYTES {
        return Err(Error::corrupt(
            path,
            0,
            None,
            Defect::Other {
                message: format!(
                    "not a properties file: {} (a properties file is a regular file of at most \
                     {MAX_PROPERTIES_BYTES} bytes)",
                    if meta.is_file() {
                        format!("{} bytes", meta.len())
                    } else {
                        "not a regular file".to_string()
                    }
                ),
            },
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_PROPERTIES_BYTES), &mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(crate::java_text::parse_java_properties(&bytes).into_iter().collect())
}

/// Encoders of the records this reader applies, for tests and for building fixtures (the way Kafka writes them).
pub mod encode {
    use super::*;

    fn uvarint(out: &mut Vec<u8>, mut v: u32) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn string(out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            None => uvarint(out, 0),
            Some(s) => {
                uvarint(out, u32::try_from(s.len()).unwrap_or(u32::MAX - 1).saturating_add(1));
                out.extend_from_slice(s.as_bytes());
            }
        }
    }

    fn frame(api_key: u32, version: u32) -> Vec<u8> {
        let mut out = Vec::new();
        uvarint(&mut out, FRAME_VERSION);
        uvarint(&mut out, api_key);
        uvarint(&mut out, version);
        out
    }

    /// `TopicRecord` v0.
    pub fn topic_record(name: &str, id: Uuid) -> Vec<u8> {
        let mut out = frame(API_TOPIC_RECORD, 0);
        string(&mut out, Some(name));
        out.extend_from_slice(&id.0);
        out.push(0); // no tagged fields
        out
    }

    /// `PartitionRecord` v0 with this broker (node 1) as the only replica and leader.
    pub fn partition_record(partition: i32, id: Uuid) -> Vec<u8> {
        let mut out = frame(API_PARTITION_RECORD, 0);
        out.extend_from_slice(&partition.to_be_bytes());
        out.extend_from_slice(&id.0);
        for array in [&[1i32][..], &[1], &[], &[]] {
            uvarint(&mut out, array.len() as u32 + 1);
            for r in array {
                out.extend_from_slice(&r.to_be_bytes());
            }
        }
        out.extend_from_slice(&1i32.to_be_bytes()); // leader
        out.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
        out.extend_from_slice(&0i32.to_be_bytes()); // partition epoch
        out.push(0);
        out
    }

    /// `ConfigRecord` v0; `value` `None` deletes the key.
    pub fn config_record(resource_type: i8, resource: &str, key: &str, value: Option<&str>) -> Vec<u8> {
        let mut out = frame(API_CONFIG_RECORD, 0);
        out.push(resource_type as u8);
        string(&mut out, Some(resource));
        string(&mut out, Some(key));
        string(&mut out, value);
        out.push(0);
        out
    }

    /// `RemoveTopicRecord` v0.
    pub fn remove_topic_record(id: Uuid) -> Vec<u8> {
        let mut out = frame(API_REMOVE_TOPIC_RECORD, 0);
        out.extend_from_slice(&id.0);
        out.push(0);
        out
    }
    /// One topic for [`write_metadata_log`].
    #[derive(Debug, Clone)]
    pub struct TopicSpec<'a> {
        pub name: &'a str,
        pub id: Uuid,
        pub partitions: i32,
        pub configs: &'a [(&'a str, &'a str)],
    }

    /// Write `<log_dir>/__cluster_metadata-0/00000000000000000000.log` describing `topics`, one batch per topic, the
    /// way a broker-shaped test log dir needs it (no control records, no snapshot).
    pub fn write_metadata_log(log_dir: &Path, topics: &[TopicSpec<'_>]) -> Result<(), Error> {
        use crate::record::{BatchBuilder, RecordSpec};
        let dir = log_dir.join(METADATA_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let mut bytes = Vec::new();
        let mut offset = 0i64;
        for t in topics {
            let mut values = vec![topic_record(t.name, t.id)];
            values.extend((0..t.partitions).map(|p| partition_record(p, t.id)));
            values.extend(
                t.configs
                    .iter()
                    .map(|(k, v)| config_record(RESOURCE_TOPIC, t.name, k, Some(v))),
            );
            let mut batch = BatchBuilder::new(offset);
            for (i, v) in values.iter().enumerate() {
                batch = batch.record(RecordSpec::new(i as i32, 0).with_value(v.clone()));
            }
            offset += values.len() as i64;
            bytes.extend_from_slice(&batch.build());
        }
        let path = dir.join(format!("{:020}.log", 0));
        std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))
    }
}

#[cfg(test)]
mod tests;
