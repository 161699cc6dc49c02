//! A link's metadata through a bucket: publish a version (both documents, then the manifest naming them) and read
//! the newest one back, each document size-capped and checked against the manifest before it is parsed.
//!
//! The shapes, the key scheme and every check are the contract's (`segmirror_contract::link_meta`, re-exported
//! here); this module adds only the reads and writes through a [`SegmentSink`] or [`SegmentSource`].

use bytes::Bytes;

pub use segmirror_contract::link_meta::*;

use crate::bucket::traits::{SegmentSink, SegmentSource};
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::KeyPrefix;

/// Publish `meta` as version `meta.topics.version` of its link: both data objects, then the manifest naming them.
pub async fn publish(sink: &dyn SegmentSink, prefix: &KeyPrefix, meta: &LinkMeta, shipper_id: &str) -> Result<()> {
    let link = &meta.topics.link;
    let version = meta.topics.version;
    let manifest_at = manifest_key(prefix, link);
    meta.validate(link).map_err(|m| invalid(&manifest_at, m))?;
    let mut objects = Vec::new();
    for (name, json) in [
        (TOPICS_NAME, serde_json::to_vec(&meta.topics)),
        (OFFSETS_NAME, serde_json::to_vec(&meta.offsets)),
    ] {
        let key = data_key(prefix, link, version, name);
        let bytes = Bytes::from(json.map_err(|e| invalid(&key, e.to_string()))?);
        let staged = sink.stage_bytes(&key, bytes).await?;
        objects.push(MetaObject {
            key,
            size: staged.digest.size,
            sha256: staged.digest.sha256,
        });
    }
    let offsets = objects.pop().expect("two objects");
    let topics = objects.pop().expect("two objects");
    let manifest = MetaManifest {
        format: META_MANIFEST_FORMAT.into(),
        link: link.clone(),
        version,
        shipper_id: shipper_id.into(),
        created_at_ms: segment_format::now_ms(),
        topics,
        offsets,
    };
    manifest.validate(prefix, link).map_err(|m| invalid(&manifest_at, m))?;
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| invalid(&manifest_at, e.to_string()))?;
    sink.stage_bytes(&manifest_at, Bytes::from(json)).await?;
    crate::bucket::link_changes::announce_or_warn(sink, prefix, link, shipper_id).await;
    Ok(())
}

/// The version the link's metadata manifest names now, if there is one (a shipper continues after it).
pub async fn read_manifest(source: &dyn SegmentSource, prefix: &KeyPrefix, link: &str) -> Result<Option<MetaManifest>> {
    let key = manifest_key(prefix, link);
    let bytes = match source.read_document(&key, MAX_META_MANIFEST_BYTES).await {
        Ok(bytes) => bytes,
        Err(Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(parse_manifest(prefix, link, &key, &bytes)?))
}

/// Read the version `manifest` names: each object size-capped, compared with the manifest's size and SHA-256,
/// parsed and validated. A refusal names the key and the field.
pub async fn read_version(source: &dyn SegmentSource, manifest: &MetaManifest) -> Result<LinkMeta> {
    let fetch = |object: &MetaObject| {
        let object = object.clone();
        async move {
            let bytes = source.read_document(&object.key, object.size).await?;
            check_object(&object, &bytes)?;
            Ok::<_, Error>(bytes)
        }
    };
    let topics = fetch(&manifest.topics).await?;
    let offsets = fetch(&manifest.offsets).await?;
    parse_version(manifest, &topics, &offsets)
}

/// The link's newest metadata, if any was shipped.
pub async fn read_latest(source: &dyn SegmentSource, prefix: &KeyPrefix, link: &str) -> Result<Option<LinkMeta>> {
    match read_manifest(source, prefix, link).await? {
        Some(manifest) => Ok(Some(read_version(source, &manifest).await?)),
        None => Ok(None),
    }
}

#[cfg(test)]
pub(crate) mod tests;
