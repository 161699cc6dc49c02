//! The link's change notice: `<prefix>/<link>/link@changes.json`, rewritten by every writer of the link (a `seed`
//! or `ship --store` round that committed a version, a publication of the link's metadata) after what it wrote is
//! committed, so that a follower can tell "nothing was committed since I last looked" from one small request.
//!
//! Why: a follower has no notification from a bucket and polls it four times a second. Listing every partition's
//! manifests at each poll costs work in proportion to the partitions (with 10,000 of them, tens of thousands of
//! directory entries on a local folder, ten LIST requests of 1,000 keys on S3), to learn, almost always, that
//! nothing changed. With the notice, a follower whose last run left every partition complete reads the notice's
//! size, entity tag and time (a `stat`, or one HEAD request) and lists again only when it changed.
//!
//! What a reader may rely on, and what it must not:
//! - the notice is written **after** the commits it announces, so a listing made after seeing a notice holds them;
//! - it carries no data: the follower compares only what the store says of the object (size, entity tag, time),
//!   never trusts its content, so a forged or stale notice can delay what a follower sees, never change it;
//! - a writer that does not write it (an older segmirror, a writer that crashed between a commit and the notice)
//!   is seen by the follower's full run, which ignores the notice (every 30 s);
//! - no notice at all means the follower lists at every poll, as it did before notices existed.
//!
//! The name is no Kafka topic name (`@` is not a legal topic character), so it can never collide with a topic
//! directory; the bucket index recognises it rather than reporting it as a foreign key.

use serde::{Deserialize, Serialize};

use crate::manifest::KeyPrefix;

/// The object's name under `<prefix>/<link>/`.
pub const LINK_CHANGES_FILE: &str = "link@changes.json";
/// The document's `format`.
pub const LINK_CHANGES_FORMAT: &str = "segmirror.link-changes.v1";

/// What a notice says, for a person reading the bucket: who wrote it last, and when. Every write differs (the time
/// and a per-process count), so the store gives every write a new entity tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkChanges {
    pub format: String,
    pub link: String,
    /// The writer's shipper id.
    pub writer: String,
    /// How many notices this writer's process has written, this one included.
    pub sequence: u64,
    /// Milliseconds since the Unix epoch when it was written.
    pub written_at_ms: i64,
}

impl LinkChanges {
    pub fn new(link: &str, writer: &str, sequence: u64, written_at_ms: i64) -> LinkChanges {
        LinkChanges {
            format: LINK_CHANGES_FORMAT.to_string(),
            link: link.to_string(),
            writer: writer.to_string(),
            sequence,
            written_at_ms,
        }
    }
}

/// `<prefix>/<link>/link@changes.json`.
pub fn link_changes_key(prefix: &KeyPrefix, link: &str) -> String {
    crate::link_identity::link_object_key(prefix, link, LINK_CHANGES_FILE)
}

/// The link whose change notice `key` is, if it is one (a valid link name, under `prefix`).
pub fn link_of_changes_key<'a>(prefix: &KeyPrefix, key: &'a str) -> Option<&'a str> {
    crate::link_identity::link_of_object_key(prefix, key, LINK_CHANGES_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_built_and_recognised_only_where_it_belongs() {
        let prefix = KeyPrefix::new("p/q").unwrap();
        let key = link_changes_key(&prefix, "dr");
        assert_eq!(key, "p/q/dr/link@changes.json");
        assert_eq!(link_of_changes_key(&prefix, &key), Some("dr"));
        assert_eq!(
            link_of_changes_key(&KeyPrefix::root(), "dr/link@changes.json"),
            Some("dr")
        );
        // Under a topic, under another prefix, or with a link name that is not one: not a notice.
        assert_eq!(link_of_changes_key(&prefix, "p/q/dr/orders/link@changes.json"), None);
        assert_eq!(link_of_changes_key(&prefix, "x/dr/link@changes.json"), None);
        assert_eq!(link_of_changes_key(&prefix, "p/q/../link@changes.json"), None);
        assert_eq!(link_of_changes_key(&prefix, "p/q/dr/link@identity.json"), None);
    }

    #[test]
    fn two_writes_of_one_writer_differ() {
        let a = serde_json::to_vec(&LinkChanges::new("dr", "s", 1, 5)).unwrap();
        let b = serde_json::to_vec(&LinkChanges::new("dr", "s", 2, 5)).unwrap();
        assert_ne!(a, b);
    }
}
