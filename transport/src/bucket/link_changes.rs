//! Writing the link's change notice (`segmirror_contract::link_changes`, re-exported here, where the module doc says
//! what a follower relies on): one small object rewritten after a writer's commits.

pub use segmirror_contract::link_changes::*;

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::bucket::traits::SegmentSink;
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::KeyPrefix;

/// Notices written by this process: each write's document differs from the one before.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// Rewrite the change notice of `link` under `prefix`, as `writer`. Call it after the commits it announces have
/// returned; a failure costs followers at most their next full run (the caller logs it), never data.
pub async fn announce(sink: &dyn SegmentSink, prefix: &KeyPrefix, link: &str, writer: &str) -> Result<()> {
    let key = link_changes_key(prefix, link);
    let sequence = WRITTEN.fetch_add(1, Ordering::Relaxed) + 1;
    let doc = LinkChanges::new(link, writer, sequence, segment_format::now_ms());
    let bytes = serde_json::to_vec(&doc).map_err(|e| Error::bad_key(&key, e.to_string()))?;
    sink.stage_bytes(&key, Bytes::from(bytes)).await.map(|_| ())
}

/// [`announce`], a failure logged as a warning: what was committed stays committed, and followers see it at their
/// next full run.
pub async fn announce_or_warn(sink: &dyn SegmentSink, prefix: &KeyPrefix, link: &str, writer: &str) {
    if let Err(e) = announce(sink, prefix, link, writer).await {
        tracing::warn!(link, error = %e, "the link's change notice was not written: followers see this writer's commits at their next full run");
    }
}
