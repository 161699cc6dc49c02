//! Keys and values of the records in `__consumer_offsets` partitions: committed offsets, classic group metadata,
//! and the KIP-848 / share / streams group records, as Kafka 3.x and 4.x write them.
//!
//! Why: consumer groups fail over without offset translation only if their committed offsets reach the target; a
//! source broker's own `__consumer_offsets` segments hold them, readable without a client or a running cluster.
//!
//! # Format (Kafka 4.4's `group-coordinator` `common/message/*.json`, `CoordinatorRecordSerde`; the same bytes
//! Kafka 3.x's `GroupMetadataManager` writes)
//! - Key: `int16 record type` (what older Kafka calls the key version: 0 and 1 = offset commit, 2 = classic group
//!   metadata, 3..=8 and 16 = consumer group (KIP-848), 9..=15 = share group, 17..=23 = streams group), then the
//!   key's fields in the non-flexible encoding (strings: `int16` length + UTF-8). Every key of type 3 and above
//!   starts with the group id; member keys follow it with the member id, type 16 with the regular expression.
//! - Value: `int16 version`, then the value's fields; `null` is a tombstone (deletes what the key names).
//!   `OffsetCommitValue` v0..=4 (v1 adds `expireTimestamp`, v3 `leaderEpoch`, v4 is flexible: compact strings and
//!   tagged fields, among them `topicId`); `GroupMetadataValue` v0..=4 (v1 `rebalanceTimeout`, v2
//!   `currentStateTimestamp`, v3 `groupInstanceId`, v4 flexible).
//! - The values of the other group records are not needed for offsets and are not decoded, only their version
//!   prefix checked: decoding them partly would risk misreading them. A record type Kafka does not define is
//!   skipped, as Kafka's coordinator loader skips it ("a left over from an aborted upgrade").
//!
//! Decoding is strict: a key or value with bytes left over, a version this reader does not know, or a length past
//! the end is an error naming the field and the byte in the key or value; nothing is allocated from an unchecked
//! length (every length is checked against the bytes that remain first).

/// Record types (key `int16` prefix).
pub const TYPE_LEGACY_OFFSET_COMMIT: i16 = 0;
pub const TYPE_OFFSET_COMMIT: i16 = 1;
pub const TYPE_GROUP_METADATA: i16 = 2;
/// Newest `OffsetCommitValue` / `GroupMetadataValue` version known.
pub const MAX_OFFSET_COMMIT_VALUE_VERSION: i16 = 4;
pub const MAX_GROUP_METADATA_VALUE_VERSION: i16 = 4;

/// The other group records: their key layout (group id, then maybe a second string) and the group type they belong
/// to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupType {
    /// The classic protocol (JoinGroup/SyncGroup), `GroupMetadataValue`; also a group that only commits offsets.
    Classic,
    /// KIP-848 (`group.protocol=consumer`).
    Consumer,
    /// KIP-932 share groups.
    Share,
    /// KIP-1071 streams groups.
    Streams,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
            GroupType::Share => "share",
            GroupType::Streams => "streams",
        }
    }
}

/// What a record type of 3 and above is: its name, its group type, the name of its second key field (if any), and
/// whether it is the group's own metadata record (a tombstone of it deletes the group of that type).
struct GroupRecordType {
    name: &'static str,
    group_type: GroupType,
    second_field: Option<&'static str>,
    is_group_metadata: bool,
}

fn group_record_type(record_type: i16) -> Option<GroupRecordType> {
    use GroupType::*;
    let t = |name, group_type, second_field, is_group_metadata| {
        Some(GroupRecordType {
            name,
            group_type,
            second_field,
            is_group_metadata,
        })
    };
    match record_type {
        3 => t("ConsumerGroupMetadataKey", Consumer, None, true),
        4 => t("ConsumerGroupPartitionMetadataKey", Consumer, None, false),
        5 => t("ConsumerGroupMemberMetadataKey", Consumer, Some("MemberId"), false),
        6 => t("ConsumerGroupTargetAssignmentMetadataKey", Consumer, None, false),
        7 => t(
            "ConsumerGroupTargetAssignmentMemberKey",
            Consumer,
            Some("MemberId"),
            false,
        ),
        8 => t(
            "ConsumerGroupCurrentMemberAssignmentKey",
            Consumer,
            Some("MemberId"),
            false,
        ),
        9 => t("ShareGroupPartitionMetadataKey", Share, None, false),
        10 => t("ShareGroupMemberMetadataKey", Share, Some("MemberId"), false),
        11 => t("ShareGroupMetadataKey", Share, None, true),
        12 => t("ShareGroupTargetAssignmentMetadataKey", Share, None, false),
        13 => t("ShareGroupTargetAssignmentMemberKey", Share, Some("MemberId"), false),
        14 => t("ShareGroupCurrentMemberAssignmentKey", Share, Some("MemberId"), false),
        15 => t("ShareGroupStatePartitionMetadataKey", Share, None, false),
        16 => t(
            "ConsumerGroupRegularExpressionKey",
            Consumer,
            Some("RegularExpression"),
            false,
        ),
        17 => t("StreamsGroupMetadataKey", Streams, None, true),
        19 => t("StreamsGroupMemberMetadataKey", Streams, Some("MemberId"), false),
        20 => t("StreamsGroupTargetAssignmentMetadataKey", Streams, None, false),
        21 => t(
            "StreamsGroupTargetAssignmentMemberKey",
            Streams,
            Some("MemberId"),
            false,
        ),
        22 => t(
            "StreamsGroupCurrentMemberAssignmentKey",
            Streams,
            Some("MemberId"),
            false,
        ),
        23 => t("StreamsGroupTopologyKey", Streams, None, false),
        _ => None,
    }
}

/// `OffsetCommitKey` (record types 0 and 1).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetCommitKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

/// `OffsetCommitValue` of any version; fields a version lacks are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub version: i16,
    pub offset: i64,
    /// v3+; `None` also for the `-1` Kafka writes when the client sent none.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// v1 only; `None` also for `-1`.
    pub expire_timestamp: Option<i64>,
    /// v4+ tagged field 0.
    pub topic_id: Option<[u8; 16]>,
}

/// `GroupMetadataValue` of any version (the classic protocol's group state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub version: i16,
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// v2+; `None` also for `-1`.
    pub current_state_timestamp: Option<i64>,
    pub members: Vec<MemberMetadata>,
}

/// One member of a classic group (subscription and assignment bytes are checked, not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
}

/// One decoded `__consumer_offsets` record. A `None` value is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    OffsetCommit {
        key: OffsetCommitKey,
        value: Option<OffsetCommitValue>,
    },
    GroupMetadata {
        group: String,
        value: Option<GroupMetadataValue>,
    },
    /// A KIP-848, share or streams group record; its value (if any) is not decoded, `value_version` is its prefix.
    Group {
        record_type: i16,
        name: &'static str,
        group_type: GroupType,
        group: String,
        /// The member id or regular expression of keys that have one.
        second: Option<String>,
        /// The group's own metadata record (a tombstone of it deletes that group).
        is_group_metadata: bool,
        value_version: Option<i16>,
    },
    /// A record type Kafka does not define (skipped, as Kafka's loader does).
    Unknown { record_type: i16 },
}

impl GroupRecord {
    /// The group the record belongs to (`None` for an unknown record type).
    pub fn group(&self) -> Option<&str> {
        match self {
            GroupRecord::OffsetCommit { key, .. } => Some(&key.group),
            GroupRecord::GroupMetadata { group, .. } | GroupRecord::Group { group, .. } => Some(group),
            GroupRecord::Unknown { .. } => None,
        }
    }
}

/// Decode one `__consumer_offsets` record from its key and value. Errors name the part (key or value), the field
/// and the byte in that part.
pub fn decode_record(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<GroupRecord, String> {
    let key = key.ok_or("record has a null key (every __consumer_offsets record has one)")?;
    let mut k = Cursor::new(key, "key");
    let record_type = k.i16("record type")?;
    if record_type < 0 {
        return Err(format!("key: record type {record_type} is negative"));
    }
    let record = match record_type {
        TYPE_LEGACY_OFFSET_COMMIT | TYPE_OFFSET_COMMIT => {
            let key = OffsetCommitKey {
                group: k.string("OffsetCommitKey.group")?,
                topic: k.string("OffsetCommitKey.topic")?,
                partition: k.i32("OffsetCommitKey.partition")?,
            };
            k.finish("OffsetCommitKey")?;
            GroupRecord::OffsetCommit {
                key,
                value: value.map(decode_offset_commit_value).transpose()?,
            }
        }
        TYPE_GROUP_METADATA => {
            let group = k.string("GroupMetadataKey.group")?;
            k.finish("GroupMetadataKey")?;
            GroupRecord::GroupMetadata {
                group,
                value: value.map(decode_group_metadata_value).transpose()?,
            }
        }
        other => {
            let Some(t) = group_record_type(other) else {
                return Ok(GroupRecord::Unknown { record_type: other });
            };
            let group = k.string(&format!("{}.GroupId", t.name))?;
            let second = match t.second_field {
                Some(field) => Some(k.string(&format!("{}.{field}", t.name))?),
                None => None,
            };
            k.finish(t.name)?;
            let value_version = match value {
                Some(v) => {
                    let version = Cursor::new(v, "value").i16("version")?;
                    if version < 0 {
                        return Err(format!("value: version {version} of a {} is negative", t.name));
                    }
                    Some(version)
                }
                None => None,
            };
            GroupRecord::Group {
                record_type: other,
                name: t.name,
                group_type: t.group_type,
                group,
                second,
                is_group_metadata: t.is_group_metadata,
                value_version,
            }
        }
    };
    Ok(record)
}

/// `OffsetCommitValue` v0..=4.
pub fn decode_offset_commit_value(value: &[u8]) -> Result<OffsetCommitValue, String> {
    let mut c = Cursor::new(value, "value");
    let version = c.i16("OffsetCommitValue version")?;
    if !(0..=MAX_OFFSET_COMMIT_VALUE_VERSION).contains(&version) {
        return Err(format!(
            "value: OffsetCommitValue version {version} is not one this reader knows (0..={MAX_OFFSET_COMMIT_VALUE_VERSION})"
        ));
    }
    let flexible = version >= 4;
    let offset = c.i64("OffsetCommitValue.offset")?;
    let leader_epoch = if version >= 3 {
        Some(c.i32("OffsetCommitValue.leaderEpoch")?).filter(|e| *e >= 0)
    } else {
        None
    };
    let metadata = c.string_in("OffsetCommitValue.metadata", flexible)?;
    let commit_timestamp = c.i64("OffsetCommitValue.commitTimestamp")?;
    let expire_timestamp = if version == 1 {
        Some(c.i64("OffsetCommitValue.expireTimestamp")?).filter(|t| *t >= 0)
    } else {
        None
    };
    let mut topic_id = None;
    if flexible {
        c.tagged_fields("OffsetCommitValue", |tag, bytes, at| {
            if tag == 0 {
                let id: [u8; 16] = bytes.try_into().map_err(|_| {
                    format!(
                        "value: OffsetCommitValue.topicId (tag 0) at byte {at} is {} bytes, a UUID is 16",
                        bytes.len()
                    )
                })?;
                topic_id = Some(id);
            }
            Ok(())
        })?;
    }
    c.finish("OffsetCommitValue")?;
    Ok(OffsetCommitValue {
        version,
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
        expire_timestamp,
        topic_id,
    })
}

/// `GroupMetadataValue` v0..=4.
pub fn decode_group_metadata_value(value: &[u8]) -> Result<GroupMetadataValue, String> {
    let mut c = Cursor::new(value, "value");
    let version = c.i16("GroupMetadataValue version")?;
    if !(0..=MAX_GROUP_METADATA_VALUE_VERSION).contains(&version) {
        return Err(format!(
            "value: GroupMetadataValue version {version} is not one this reader knows (0..={MAX_GROUP_METADATA_VALUE_VERSION})"
        ));
    }
    let flex = version >= 4;
    let protocol_type = c.string_in("GroupMetadataValue.protocolType", flex)?;
    let generation = c.i32("GroupMetadataValue.generation")?;
    let protocol = c.nullable_string_in("GroupMetadataValue.protocol", flex)?;
    let leader = c.nullable_string_in("GroupMetadataValue.leader", flex)?;
    let current_state_timestamp = if version >= 2 {
        Some(c.i64("GroupMetadataValue.currentStateTimestamp")?).filter(|t| *t >= 0)
    } else {
        None
    };
    // Each member takes at least 2 (member id) + 2 + 2 + 4 + 4 + 4 bytes (flexible: fewer, at least 7): the count
    // is checked against what remains before anything is reserved.
    let count = c.array_len("GroupMetadataValue.members", flex, 7)?;
    let mut members = Vec::with_capacity(count);
    for i in 0..count {
        let field = |name: &str| format!("GroupMetadataValue.members[{i}].{name}");
        let member_id = c.string_in(&field("memberId"), flex)?;
        let group_instance_id = if version >= 3 {
            c.nullable_string_in(&field("groupInstanceId"), flex)?
        } else {
            None
        };
        let client_id = c.string_in(&field("clientId"), flex)?;
        let client_host = c.string_in(&field("clientHost"), flex)?;
        if version >= 1 {
            c.i32(&field("rebalanceTimeout"))?;
        }
        c.i32(&field("sessionTimeout"))?;
        c.bytes_in(&field("subscription"), flex)?;
        c.bytes_in(&field("assignment"), flex)?;
        if flex {
            c.tagged_fields(&field("_tagged"), |_, _, _| Ok(()))?;
        }
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
        });
    }
    if flex {
        c.tagged_fields("GroupMetadataValue", |_, _, _| Ok(()))?;
    }
    c.finish("GroupMetadataValue")?;
    Ok(GroupMetadataValue {
        version,
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
    })
}

/// A bounds-checked reader over one key or value; `part` ("key" or "value") prefixes its errors.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    part: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], part: &'static str) -> Self {
        Cursor { buf, pos: 0, part }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], String> {
        let at = self.pos;
        let bytes = at.checked_add(n).and_then(|end| self.buf.get(at..end)).ok_or_else(|| {
            format!(
                "{}: {field} needs {n} byte(s) at byte {at}, {} left",
                self.part,
                self.remaining()
            )
        })?;
        self.pos = at + n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], String> {
        let b = self.take(N, field)?;
        b.try_into().map_err(|_| format!("{}: {field}: short read", self.part))
    }

    fn i16(&mut self, field: &str) -> Result<i16, String> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &str) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &str) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Kafka's unsigned varint, at most 5 bytes and 32 bits.
    fn uvarint(&mut self, field: &str) -> Result<u32, String> {
        let at = self.pos;
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| format!("{}: {field}: ends inside the varint starting at byte {at}", self.part))?;
            self.pos += 1;
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(format!("{}: {field}: varint at byte {at} overflows 32 bits", self.part));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "{}: {field}: varint at byte {at} is longer than 5 bytes",
            self.part
        ))
    }

    fn utf8(&self, bytes: &'a [u8], field: &str, at: usize) -> Result<String, String> {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|e| format!("{}: {field} at byte {at} is not UTF-8: {e}", self.part))
    }

    /// A nullable string: `int16` length (-1 = null), or compact (`uvarint` length + 1, 0 = null) when `flexible`.
    fn nullable_string_in(&mut self, field: &str, flexible: bool) -> Result<Option<String>, String> {
        let at = self.pos;
        let len = if flexible {
            match self.uvarint(field)? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i16(field)? {
                -1 => return Ok(None),
                n if n < 0 => return Err(format!("{}: {field} at byte {at} has length {n}", self.part)),
                n => n as usize,
            }
        };
        let bytes = self.take(len, field)?;
        self.utf8(bytes, field, at).map(Some)
    }

    fn string_in(&mut self, field: &str, flexible: bool) -> Result<String, String> {
        let at = self.pos;
        self.nullable_string_in(field, flexible)?
            .ok_or_else(|| format!("{}: {field} at byte {at} is null, which it may not be", self.part))
    }

    /// A non-flexible, non-nullable string (every key field).
    fn string(&mut self, field: &str) -> Result<String, String> {
        self.string_in(field, false)
    }

    /// Bytes (`int32` length, or compact when `flexible`), checked and skipped.
    fn bytes_in(&mut self, field: &str, flexible: bool) -> Result<&'a [u8], String> {
        let at = self.pos;
        let len = if flexible {
            match self.uvarint(field)? {
                0 => {
                    return Err(format!(
                        "{}: {field} at byte {at} is null, which it may not be",
                        self.part
                    ))
                }
                n => (n - 1) as usize,
            }
        } else {
            let n = self.i32(field)?;
            usize::try_from(n).map_err(|_| format!("{}: {field} at byte {at} has length {n}", self.part))?
        };
        self.take(len, field)
    }

    /// An array's element count, each element taking at least `min_element` bytes, checked against what remains.
    fn array_len(&mut self, field: &str, flexible: bool, min_element: usize) -> Result<usize, String> {
        let at = self.pos;
        let count = if flexible {
            match self.uvarint(field)? {
                0 => {
                    return Err(format!(
                        "{}: {field} at byte {at} is null, which it may not be",
                        self.part
                    ))
                }
                n => (n - 1) as usize,
            }
        } else {
            let n = self.i32(field)?;
            usize::try_from(n).map_err(|_| format!("{}: {field} at byte {at} has {n} elements", self.part))?
        };
        if count.saturating_mul(min_element) > self.remaining() {
            return Err(format!(
                "{}: {field} at byte {at} claims {count} elements, more than the {} bytes left can hold",
                self.part,
                self.remaining()
            ));
        }
        Ok(count)
    }

    /// Tagged fields: `uvarint` count, then `uvarint tag`, `uvarint size`, bytes; tags strictly increasing.
    fn tagged_fields(
        &mut self,
        owner: &str,
        mut each: impl FnMut(u32, &[u8], usize) -> Result<(), String>,
    ) -> Result<(), String> {
        let field = format!("{owner} tagged fields");
        let count = self.uvarint(&field)?;
        let mut last: Option<u32> = None;
        for _ in 0..count {
            let at = self.pos;
            let tag = self.uvarint(&field)?;
            if last.is_some_and(|l| tag <= l) {
                return Err(format!(
                    "{}: {field}: tag {tag} at byte {at} does not follow tag {} in increasing order",
                    self.part,
                    last.unwrap_or_default()
                ));
            }
            last = Some(tag);
            let size = self.uvarint(&field)? as usize;
            let bytes_at = self.pos;
            let bytes = self.take(size, &field)?;
            each(tag, bytes, bytes_at)?;
        }
        Ok(())
    }

    /// Everything read: bytes left over mean the layout was not what this reader assumed.
    fn finish(&self, what: &str) -> Result<(), String> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(format!(
                "{}: {n} byte(s) left after the {what} ended at byte {}",
                self.part, self.pos
            )),
        }
    }
}

/// Encoders of these records the way Kafka writes them, for tests and fixtures.
pub mod encode {
    use super::*;

    fn uvarint(out: &mut Vec<u8>, mut v: u32) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn string(out: &mut Vec<u8>, s: Option<&str>, flexible: bool) {
        match (s, flexible) {
            (None, true) => uvarint(out, 0),
            (None, false) => out.extend_from_slice(&(-1i16).to_be_bytes()),
            (Some(s), true) => {
                uvarint(out, s.len() as u32 + 1);
                out.extend_from_slice(s.as_bytes());
            }
            (Some(s), false) => {
                out.extend_from_slice(&(s.len() as i16).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }

    fn bytes(out: &mut Vec<u8>, b: &[u8], flexible: bool) {
        if flexible {
            uvarint(out, b.len() as u32 + 1);
        } else {
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
        }
        out.extend_from_slice(b);
    }

    /// `OffsetCommitKey` with record type `record_type` (0 or 1).
    pub fn offset_commit_key(record_type: i16, group: &str, topic: &str, partition: i32) -> Vec<u8> {
        let mut out = record_type.to_be_bytes().to_vec();
        string(&mut out, Some(group), false);
        string(&mut out, Some(topic), false);
        out.extend_from_slice(&partition.to_be_bytes());
        out
    }

    /// `OffsetCommitValue` of `value.version`, the fields that version has.
    pub fn offset_commit_value(value: &OffsetCommitValue) -> Vec<u8> {
        let v = value.version;
        let flexible = v >= 4;
        let mut out = v.to_be_bytes().to_vec();
        out.extend_from_slice(&value.offset.to_be_bytes());
        if v >= 3 {
            out.extend_from_slice(&value.leader_epoch.unwrap_or(-1).to_be_bytes());
        }
        string(&mut out, Some(&value.metadata), flexible);
        out.extend_from_slice(&value.commit_timestamp.to_be_bytes());
        if v == 1 {
            out.extend_from_slice(&value.expire_timestamp.unwrap_or(-1).to_be_bytes());
        }
        if flexible {
            match value.topic_id {
                Some(id) => {
                    uvarint(&mut out, 1);
                    uvarint(&mut out, 0);
                    uvarint(&mut out, 16);
                    out.extend_from_slice(&id);
                }
                None => uvarint(&mut out, 0),
            }
        }
        out
    }

    /// `GroupMetadataKey` (record type 2).
    pub fn group_metadata_key(group: &str) -> Vec<u8> {
        let mut out = TYPE_GROUP_METADATA.to_be_bytes().to_vec();
        string(&mut out, Some(group), false);
        out
    }

    /// `GroupMetadataValue` of `value.version`.
    pub fn group_metadata_value(value: &GroupMetadataValue) -> Vec<u8> {
        let v = value.version;
        let flex = v >= 4;
        let mut out = v.to_be_bytes().to_vec();
        string(&mut out, Some(&value.protocol_type), flex);
        out.extend_from_slice(&value.generation.to_be_bytes());
        string(&mut out, value.protocol.as_deref(), flex);
        string(&mut out, value.leader.as_deref(), flex);
        if v >= 2 {
            out.extend_from_slice(&value.current_state_timestamp.unwrap_or(-1).to_be_bytes());
        }
        if flex {
            uvarint(&mut out, value.members.len() as u32 + 1);
        } else {
            out.extend_from_slice(&(value.members.len() as i32).to_be_bytes());
        }
        for m in &value.members {
            string(&mut out, Some(&m.member_id), flex);
            if v >= 3 {
                string(&mut out, m.group_instance_id.as_deref(), flex);
            }
            string(&mut out, Some(&m.client_id), flex);
            string(&mut out, Some(&m.client_host), flex);
            if v >= 1 {
                out.extend_from_slice(&30_000i32.to_be_bytes());
            }
            out.extend_from_slice(&10_000i32.to_be_bytes());
            bytes(&mut out, b"subscription", flex);
            bytes(&mut out, b"assignment", flex);
            if flex {
                uvarint(&mut out, 0);
            }
        }
        if flex {
            uvarint(&mut out, 0);
        }
        out
    }

    /// The key of a group record of type 3 and above: group id, then `second` (member id or regular expression).
    pub fn group_record_key(record_type: i16, group: &str, second: Option<&str>) -> Vec<u8> {
        let mut out = record_type.to_be_bytes().to_vec();
        string(&mut out, Some(group), false);
        if let Some(s) = second {
            string(&mut out, Some(s), false);
        }
        out
    }
}

#[cfg(test)]
mod tests;
