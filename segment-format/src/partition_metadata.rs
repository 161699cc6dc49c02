//! `partition.metadata` and Kafka's `Uuid`.
//!
//! The file ties a partition directory to a topic id: exactly
//! `version: 0\ntopic_id: <uuid>` with no trailing newline
//! (`PartitionMetadata.encode`). A KRaft broker whose metadata has no partition
//! with that id moves the directory aside as `-stray`, so a replicator must write
//! the **target** cluster's id here. Reading follows `PartitionMetadataReadBuffer`:
//! each line is split on `:\s+` into exactly two parts (the key itself is not
//! checked), the version must be >= 0, and the id must decode to 16 bytes and not
//! be the zero id.
//!
//! `Uuid` text is URL-safe base64 without padding (22 characters). Parsing follows
//! `Uuid.fromString`: at most 24 characters, padding optional.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine, GeneralPurpose, GeneralPurposeConfig};

use crate::durable::write_atomically;
use crate::error::{Defect, ParseError, Result};
use crate::java_text::java_split;

/// The only version Kafka writes.
pub const PARTITION_METADATA_VERSION: i32 = 0;

/// Kafka's `Uuid`: 128 bits, shown as 22 characters of URL-safe base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

/// A topic id is a [`Uuid`].
pub type TopicId = Uuid;

/// Encoder: URL-safe, no padding (`Base64.getUrlEncoder().withoutPadding()`).
const ENCODER: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_encode_padding(false),
);
/// Decoder as lenient as `Base64.getUrlDecoder()`: padding optional, unused
/// trailing bits ignored.
const DECODER: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

impl Uuid {
    /// `Uuid.ZERO_UUID`; never a valid topic id.
    pub const ZERO: Uuid = Uuid([0; 16]);
    /// `Uuid.ONE_UUID`, also `METADATA_TOPIC_ID` (the `__cluster_metadata` topic).
    pub const ONE: Uuid = Uuid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

    /// `Uuid.RESERVED`: ids `randomUuid` never returns.
    pub fn is_reserved(&self) -> bool {
        *self == Self::ZERO || *self == Self::ONE
    }

    /// A random version-4 id as `Uuid.randomUuid` makes it: drawn from
    /// `java.util.UUID.randomUUID` bits, redrawn while reserved or while its text
    /// starts with `-` (which would look like a command-line flag).
    pub fn random() -> std::io::Result<Uuid> {
        loop {
            let mut bytes = [0u8; 16];
            getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
            if let Some(id) = Self::from_random_bytes(bytes) {
                return Ok(id);
            }
        }
    }

    /// Stamp version 4 / IETF variant bits on 16 random bytes and apply
    /// `randomUuid`'s rejection rule; `None` means draw again.
    pub fn from_random_bytes(mut bytes: [u8; 16]) -> Option<Uuid> {
        if let Some(b) = bytes.get_mut(6) {
            *b = (*b & 0x0f) | 0x40;
        }
        if let Some(b) = bytes.get_mut(8) {
            *b = (*b & 0x3f) | 0x80;
        }
        let id = Uuid(bytes);
        // The first base64 character encodes the top 6 bits; '-' is index 62.
        let starts_with_dash = bytes.first().is_some_and(|b| b >> 2 == 62);
        (!id.is_reserved() && !starts_with_dash).then_some(id)
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&ENCODER.encode(self.0))
    }
}

/// Why a string is not a `Uuid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UuidParseError(String);

impl fmt::Display for UuidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UuidParseError {}

impl FromStr for Uuid {
    type Err = UuidParseError;

    /// `Uuid.fromString`.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        if s.chars().count() > 24 {
            return Err(UuidParseError(format!(
                "'{s}' is too long to be decoded as a base64 UUID"
            )));
        }
        let bytes = DECODER
            .decode(s)
            .map_err(|e| UuidParseError(format!("'{s}' is not URL-safe base64: {e}")))?;
        let bytes: [u8; 16] = bytes.as_slice().try_into().map_err(|_| {
            UuidParseError(format!(
                "'{s}' decoded as {} bytes, not the 16 bytes of a UUID",
                bytes.len()
            ))
        })?;
        Ok(Uuid(bytes))
    }
}

/// The contents of `partition.metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub version: i32,
    pub topic_id: TopicId,
}

fn corrupt(position: u64, message: String) -> ParseError {
    ParseError::Corrupt {
        position,
        offset: None,
        defect: Defect::Checkpoint { message },
    }
}

impl PartitionMetadata {
    /// Version 0 metadata for `topic_id`.
    pub fn new(topic_id: TopicId) -> Self {
        PartitionMetadata {
            version: PARTITION_METADATA_VERSION,
            topic_id,
        }
    }

    /// Exactly what Kafka writes: `version: 0\ntopic_id: <id>`, no trailing newline.
    pub fn encode(&self) -> String {
        format!("version: {}\ntopic_id: {}", self.version, self.topic_id)
    }

    /// Parse as `PartitionMetadataReadBuffer.read` does. Lines after the second are
    /// ignored, as there.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Self, ParseError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| corrupt(e.valid_up_to() as u64, "file is not valid UTF-8".into()))?;
        // BufferedReader.readLine: \n, \r or \r\n.
        let mut lines = Vec::new();
        let mut start = 0usize;
        let mut rest = text;
        while let Some(i) = rest.find(['\n', '\r']) {
            lines.push((start, &rest[..i]));
            let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
            start += i + skip;
            rest = &rest[i + skip..];
            if lines.len() == 2 {
                break;
            }
        }
        if lines.len() < 2 && !rest.is_empty() {
            lines.push((start, rest));
        }
        let Some(&(vpos, vline)) = lines.first() else {
            return Err(corrupt(0, "line 1: missing version line".into()));
        };
        let version = match java_split(vline, Some(':')).as_slice() {
            [_, v] => v
                .parse::<i32>()
                .map_err(|_| corrupt(vpos as u64, format!("line 1: malformed line '{vline}'")))?,
            _ => return Err(corrupt(vpos as u64, format!("line 1: malformed line '{vline}'"))),
        };
        if version < PARTITION_METADATA_VERSION {
            return Err(corrupt(vpos as u64, format!("line 1: unrecognized version {version}")));
        }
        let Some(&(tpos, tline)) = lines.get(1) else {
            return Err(corrupt(text.len() as u64, "line 2: missing topic_id line".into()));
        };
        let topic_id = match java_split(tline, Some(':')).as_slice() {
            [_, id] => id
                .parse::<Uuid>()
                .map_err(|e| corrupt(tpos as u64, format!("line 2: invalid topic id: {e}")))?,
            _ => return Err(corrupt(tpos as u64, format!("line 2: malformed line '{tline}'"))),
        };
        if topic_id == Uuid::ZERO {
            return Err(corrupt(tpos as u64, "line 2: invalid topic id (the zero id)".into()));
        }
        Ok(PartitionMetadata { version, topic_id })
    }

    pub fn read(path: &Path) -> Result<Self> {
        let bytes = crate::open::read_capped(path, "partition.metadata", crate::open::MAX_TEXT_FILE_BYTES)?;
        Self::parse(&bytes).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn uuid_text_matches_kafka() {
        // Uuid(0, 1).toString() in Kafka is "AAAAAAAAAAAAAAAAAAAAAQ".
        assert_eq!(Uuid::ONE.to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        let id = Uuid([0xfb; 16]);
        assert_eq!(id.to_string(), "-_v7-_v7-_v7-_v7-_v7-w");
        assert_eq!("-_v7-_v7-_v7-_v7-_v7-w".parse::<Uuid>(), Ok(id));
        // Padding accepted, as by Java's URL decoder.
        assert_eq!("AAAAAAAAAAAAAAAAAAAAAQ==".parse::<Uuid>(), Ok(Uuid::ONE));
        assert!("AAAAAAAAAAAAAAAAAAAAAQ===".parse::<Uuid>().is_err(), "25 chars");
        assert!("AAAAAAAAAAAAAAAAAAAA".parse::<Uuid>().is_err(), "15 bytes");
        assert!("AAAAAAAAAAAAAAAAAAAAA+".parse::<Uuid>().is_err(), "not URL-safe");
    }

    #[test]
    fn random_ids_follow_random_uuid_rules() {
        for _ in 0..200 {
            let id = Uuid::random().expect("random");
            let text = id.to_string();
            assert_eq!(text.len(), 22);
            assert!(!text.starts_with('-'));
            assert!(!id.is_reserved());
            assert_eq!(id.0[6] >> 4, 4, "version 4");
            assert_eq!(id.0[8] >> 6, 2, "IETF variant");
        }
        let mut dash = [0u8; 16];
        dash[0] = 0xf8;
        assert_eq!(Uuid::from_random_bytes(dash), None);
        assert!(Uuid::from_random_bytes([0x11; 16]).is_some());
    }

    #[test]
    fn exact_file_bytes() {
        let m = PartitionMetadata::new(Uuid::ONE);
        assert_eq!(m.encode(), "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(PartitionMetadata::parse(m.encode().as_bytes()), Ok(m));
    }

    #[test]
    fn parse_follows_kafka_rules() {
        let id = "J8aAPcfLQt2bqs1JT_rMgQ";
        let ok = |s: &str| PartitionMetadata::parse(s.as_bytes());
        assert!(ok(&format!("version: 0\ntopic_id: {id}\n")).is_ok(), "trailing newline");
        assert!(
            ok(&format!("version:   1\r\ntopic_id:\t{id}\nextra")).is_ok(),
            "any whitespace, CRLF"
        );
        assert!(ok(&format!("anything: 0\nelse: {id}")).is_ok(), "keys are not checked");
        let err_at = |s: &str| match PartitionMetadata::parse(s.as_bytes()) {
            Err(ParseError::Corrupt { position, .. }) => position,
            other => panic!("{s:?} gave {other:?}"),
        };
        assert_eq!(err_at(&format!("version:0\ntopic_id: {id}")), 0);
        assert_eq!(err_at(&format!("version: -1\ntopic_id: {id}")), 0);
        assert_eq!(err_at(&format!("version: x\ntopic_id: {id}")), 0);
        assert_eq!(err_at("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA"), 11);
        assert_eq!(err_at("version: 0\ntopic_id: nope"), 11);
        assert_eq!(err_at("version: 0\ntopic_id: a: b"), 11);
        assert_eq!(err_at("version: 0"), 10);
        assert_eq!(err_at(""), 0);
    }

    #[test]
    fn file_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("partition.metadata");
        let m = PartitionMetadata::new(Uuid::random().expect("random"));
        m.write(&path).expect("write");
        assert_eq!(PartitionMetadata::read(&path).expect("read"), m);
        assert!(!std::fs::read(&path).expect("bytes").ends_with(b"\n"));
    }

    proptest! {
        #[test]
        fn uuid_round_trip(bytes in any::<[u8; 16]>()) {
            let id = Uuid(bytes);
            let text = id.to_string();
            prop_assert_eq!(text.len(), 22);
            prop_assert_eq!(text.parse::<Uuid>(), Ok(id));
        }

        #[test]
        fn metadata_round_trip(bytes in any::<[u8; 16]>(), version in 0i32..1000) {
            prop_assume!(Uuid(bytes) != Uuid::ZERO);
            let m = PartitionMetadata { version, topic_id: Uuid(bytes) };
            prop_assert_eq!(PartitionMetadata::parse(m.encode().as_bytes()), Ok(m));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = PartitionMetadata::parse(&bytes);
            let _ = std::str::from_utf8(&bytes).map(|s| s.parse::<Uuid>());
        }

        #[test]
        fn parse_text_never_panics(s in "[a-z_ :\\n\\r0-9A-Z-]{0,60}") {
            let _ = PartitionMetadata::parse(s.as_bytes());
        }
    }
}
