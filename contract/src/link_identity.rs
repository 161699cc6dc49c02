//! The link identity object: `<prefix>/<link>/link@identity.json`, written once by the first shipper of a managed
//! link (`seed`, `ship --store`) with the id of its link record, and checked by every later shipper and by the
//! appliers. Its key and document are here; the create-if-absent write is the bucket's
//! (`segmirror_transport::bucket::link_identity::claim_link_identity`).
//!
//! Why: a link name says nothing about which link wrote a bucket. A link deleted and created again under the same
//! name (or another source host's link of that name) gets a new id; a shipper of it finds the old id here and is
//! refused, and an applier that adopted one id refuses a bucket holding another, so nothing of one link's bucket is
//! installed as another's.
//!
//! The name is no Kafka topic name (`@` is not a legal topic character), so it can never collide with a topic
//! directory of the layout; the bucket index recognises it ([`crate::index::BucketIndex::link_identities`]) rather
//! than reporting it as a foreign key. The document is small, size-capped when read, and strict: an unknown
//! `format`, another link's name or an id that is not 32 hex digits is refused naming the key.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::manifest::KeyPrefix;

/// The object's name under `<prefix>/<link>/`.
pub const LINK_IDENTITY_FILE: &str = "link@identity.json";
/// The document's `format`.
pub const LINK_IDENTITY_FORMAT: &str = "segmirror.link-identity.v1";
/// Largest identity document read (a real one is about 150 bytes).
pub const MAX_LINK_IDENTITY_BYTES: u64 = 4096;

/// What the identity object says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkIdentity {
    pub format: String,
    /// The link's name (the key's link component).
    pub link: String,
    /// The id of the shipper's link record (32 lowercase hex digits).
    pub id: String,
}

impl LinkIdentity {
    pub fn new(link: &str, id: &str) -> LinkIdentity {
        LinkIdentity {
            format: LINK_IDENTITY_FORMAT.to_string(),
            link: link.to_string(),
            id: id.to_string(),
        }
    }
}

/// `<prefix>/<link>/link@identity.json`.
pub fn link_identity_key(prefix: &KeyPrefix, link: &str) -> String {
    link_object_key(prefix, link, LINK_IDENTITY_FILE)
}

/// The link whose identity object `key` is, if it is one (a valid link name, under `prefix`).
pub fn link_of_identity_key<'a>(prefix: &KeyPrefix, key: &'a str) -> Option<&'a str> {
    link_of_object_key(prefix, key, LINK_IDENTITY_FILE)
}

/// `<prefix>/<link>/<name>`: an object of the link itself (its name holds `@`, so no topic directory has it).
pub(crate) fn link_object_key(prefix: &KeyPrefix, link: &str, name: &str) -> String {
    prefix.join(&format!("{link}/{name}"))
}

/// The link whose object `name` `key` is, if it is one (a valid link name, under `prefix`).
pub(crate) fn link_of_object_key<'a>(prefix: &KeyPrefix, key: &'a str, name: &str) -> Option<&'a str> {
    let rest = prefix.strip(key)?;
    let link = rest.strip_suffix(name)?.strip_suffix('/')?;
    crate::manifest::validate_link_name(link).ok()?;
    Some(link)
}

/// Parses and checks an identity document found at `key` for `link`.
pub fn parse_link_identity(key: &str, link: &str, bytes: &[u8]) -> Result<LinkIdentity> {
    let bad = |reason: String| Error::bad_key(key, format!("link identity: {reason}"));
    let doc: LinkIdentity = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a link identity: {e}")))?;
    if doc.format != LINK_IDENTITY_FORMAT {
        return Err(bad(format!(
            "format {:?}, expected {LINK_IDENTITY_FORMAT:?}",
            doc.format
        )));
    }
    if doc.link != link {
        return Err(bad(format!("names link {:?}, found under link {link:?}", doc.link)));
    }
    if doc.id.len() != 32 || !doc.id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(format!("id {:?} is not 32 hex digits", doc.id)));
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_document_that_is_not_this_links_identity_is_refused_naming_the_key() {
        let ok = serde_json::to_vec(&LinkIdentity::new("dr", A)).unwrap();
        assert_eq!(parse_link_identity("k", "dr", &ok).unwrap().id, A);
        for (bytes, needle) in [
            (
                serde_json::to_vec(&LinkIdentity::new("other", A)).unwrap(),
                "names link",
            ),
            (
                serde_json::to_vec(&LinkIdentity::new("dr", "xyz")).unwrap(),
                "32 hex digits",
            ),
            (
                br#"{"format":"v9","link":"dr","id":"0123456789abcdef0123456789abcdef"}"#.to_vec(),
                "format",
            ),
            (b"not json".to_vec(), "not a link identity"),
        ] {
            let err = parse_link_identity("the/key", "dr", &bytes).unwrap_err().to_string();
            assert!(err.contains("the/key") && err.contains(needle), "{err}");
        }
    }
}
