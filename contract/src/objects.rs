//! What a transport lists and moves, as plain values: listed objects, entries that are not objects, and the
//! digests of bytes that went through. A leaf: the traits and the bucket index both speak of these, and neither
//! needs the other for it.

use crate::manifest::Sha256Digest;

/// Size and checksums of bytes that went through a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub size: u64,
    /// CRC-32C (Castagnoli) of the whole object.
    pub crc32c: u32,
    pub sha256: Sha256Digest,
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Relative to the transport's root.
    pub key: String,
    pub size: u64,
    pub last_modified_ms: i64,
    pub e_tag: Option<String>,
}

/// An entry of a transport that is not an object segmirror can read, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedEntry {
    /// The key (for a name that is not UTF-8, its lossy form).
    pub key: String,
    pub reason: String,
}

/// Everything a listing found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Objects, sorted by key.
    pub objects: Vec<ObjectInfo>,
    /// Entries that are not objects (reported, skipped).
    pub skipped: Vec<SkippedEntry>,
    /// In-progress upload files (`<key>#<n>`) of a local folder, sorted by key: leftovers of an upload that was
    /// killed, unless one is under way.
    pub temporary: Vec<ObjectInfo>,
}
