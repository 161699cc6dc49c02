//! The source's topics on the target cluster, as `segmirror topics plan|create|check` runs it: the source's topics
//! read without a client (its broker's metadata log on disk, a JSON file, or what a link shipped into the catalog),
//! then planned, created or checked on the target by `cluster_client::topics_sync`, which the failover runs too.
//!
//! Why here: reading the source and talking to the target are the work; the command line parses its flags, prints
//! the checks and chooses the exit status.

use std::path::Path;
use std::time::Duration;

use cluster_client::admin::AdminClient;
use cluster_client::topics_plan::TopicCheck;
use cluster_client::topics_sync::{sync_topics, TopicsMode};
use segment_format::failover_source::{FailoverSource, TopicMeta};
use segment_format::metadata_log::{read_metadata_dir, METADATA_DIR};
use segment_format::Error as FormatError;
use segmirror_catalog::Catalog;

use crate::offsets::Selection;
use crate::runtime::Runtime;

/// Where the source's topics are read from.
pub enum TopicsSource<'a> {
    /// What link `link` shipped, as the catalog recorded it.
    Link { catalog: Catalog, link: &'a str },
    /// A JSON file `{"topics": [...]}`.
    File(&'a Path),
    /// The source broker's metadata log: its `__cluster_metadata-0` directory, or the log dir holding it.
    MetadataLog(&'a Path),
}

/// The source topics (blocking reads, before the runtime starts). A corrupt metadata log is `Err(FormatError)`
/// inside `Ok`, for its own exit status.
pub fn read_source_topics(source: TopicsSource<'_>) -> anyhow::Result<Result<Vec<TopicMeta>, FormatError>> {
    let dir = match source {
        TopicsSource::Link { catalog, link } => {
            if catalog.link_meta(link)?.is_none() {
                anyhow::bail!(
                    "no metadata of link {link} recorded yet (is the shipper sending it? `--metadata-log-dir`)"
                );
            }
            return Ok(Ok(catalog.link_topics(link)?));
        }
        TopicsSource::File(file) => return Ok(FailoverSource::read_json(file).map(|s| s.topics)),
        TopicsSource::MetadataLog(dir) => dir,
    };
    let dir = if dir.join(METADATA_DIR).is_dir() {
        dir.join(METADATA_DIR)
    } else {
        dir.to_path_buf()
    };
    Ok(read_metadata_dir(&dir).map(|m| FailoverSource::topics_from_metadata(&m)))
}

/// The topics `selection` keeps (its `--topics`; compiled before the source is read, so a bad pattern is refused
/// first).
pub fn select(source: Vec<TopicMeta>, selection: &Selection) -> Vec<TopicMeta> {
    source.into_iter().filter(|t| selection.keeps_topic(&t.name)).collect()
}

/// Plans, creates or checks `source` on the target cluster at `bootstrap`: one check per topic.
pub fn sync(
    runtime: &Runtime,
    bootstrap: &str,
    timeout: Duration,
    mode: TopicsMode,
    source: &[TopicMeta],
    replication_factor: Option<i16>,
) -> anyhow::Result<Vec<TopicCheck>> {
    runtime
        .block_on(async {
            let mut admin = AdminClient::connect(bootstrap, timeout).await?;
            sync_topics(&mut admin, mode, source, replication_factor, timeout).await
        })?
        .map_err(Into::into)
}

#[cfg(test)]
#[path = "topics_tests.rs"]
mod tests;
