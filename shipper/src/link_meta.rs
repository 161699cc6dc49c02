//! What a link carries besides segments, read from the source broker's own disk: its topics (partition counts,
//! topic-level configs, topic ids: the KRaft metadata log `__cluster_metadata-0`) and its consumer groups' committed
//! offsets (`__consumer_offsets-*`), filtered to the link's topics and groups ([`segmirror_transport::bucket::link_meta`]
//! has the shapes).
//!
//! Why from disk: the shipper runs beside the source broker and reads its log dirs already; asking the cluster
//! would need client credentials and a reachable listener, and the broker's files are what the cluster committed.
//!
//! Why polled, incrementally: `__consumer_offsets` is not one of the link's topics (the log-dir watcher does not
//! report it), groups commit every few seconds, and a target must see a commit within about that. Each
//! [`MetaReader::read`] costs a `stat` of the metadata log's files (the log is read again only when one changed) and
//! the offsets appended since the last read ([`IncrementalOffsets`]); a new version is published only when the
//! content changed ([`LinkMeta::same_content`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use regex::Regex;
use segment_format::consumer_offsets::{IncrementalOffsets, OffsetsFilter};
use segment_format::metadata_log::{read_metadata_dir, ClusterMetadata, METADATA_DIR};
use segmirror_transport::bucket::link_meta::{self, GroupOffset, LinkMeta, TopicMeta};
use segmirror_transport::direct::link_meta::EncodedLinkMeta;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::Transport;

use crate::error::{Error, Result};
use crate::source::TopicFilter;

/// Default time between reads of the metadata log and `__consumer_offsets` (1 s): a group commit reaches the
/// bucket within about this plus one upload.
pub const DEFAULT_META_INTERVAL: Duration = Duration::from_secs(1);

/// Every group.
pub const ALL_GROUPS: &str = ".*";

/// What to read and how to filter it.
#[derive(Debug, Clone)]
pub struct MetaConfig {
    /// The `__cluster_metadata-0` directory.
    pub metadata_dir: PathBuf,
    /// Log dirs holding `__consumer_offsets-*` partitions.
    pub offsets_log_dirs: Vec<PathBuf>,
    /// Groups whose offsets are carried: a regular expression matching whole group ids.
    pub groups: String,
    pub topics: TopicFilter,
    pub link: String,
    pub interval: Duration,
}

impl MetaConfig {
    /// For `log_dirs`, with the metadata log in `metadata_log_dir` (the broker's `metadata.log.dir`) or, when not
    /// given, in the first log dir that holds `__cluster_metadata-0`. `None` when there is none: a source that is
    /// not a KRaft broker's log dir has no metadata to ship.
    pub fn find(
        log_dirs: &[PathBuf],
        metadata_log_dir: Option<&Path>,
        groups: &str,
        topics: TopicFilter,
        link: &str,
    ) -> Result<Option<MetaConfig>> {
        compile_groups(groups)?;
        let metadata_dir = match metadata_log_dir {
            Some(dir) => {
                let inner = dir.join(METADATA_DIR);
                if !inner.is_dir() {
                    return Err(Error::InvalidSetting {
                        setting: "metadata-log-dir",
                        reason: format!("{} has no {METADATA_DIR} directory", dir.display()),
                    });
                }
                inner
            }
            None => match log_dirs.iter().map(|d| d.join(METADATA_DIR)).find(|d| d.is_dir()) {
                Some(dir) => dir,
                None => return Ok(None),
            },
        };
        Ok(Some(MetaConfig {
            metadata_dir,
            offsets_log_dirs: log_dirs.to_vec(),
            groups: groups.to_string(),
            topics,
            link: link.to_string(),
            interval: DEFAULT_META_INTERVAL,
        }))
    }
}

fn compile_groups(groups: &str) -> Result<Regex> {
    Regex::new(&format!("^(?:{groups})$")).map_err(|e| Error::InvalidSetting {
        setting: "groups",
        reason: format!("'{groups}' is not a regular expression: {e}"),
    })
}

/// Names, sizes and modification times of a directory's files: the metadata log is read again only when this
/// changed.
type Fingerprint = Vec<(std::ffi::OsString, u64, Duration)>;

fn fingerprint(dir: &Path) -> Result<Fingerprint> {
    let io = |e| Error::Io {
        path: dir.to_path_buf(),
        source: e,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        // A file deleted between the listing and the stat (a snapshot cleaned up) changes the fingerprint anyway.
        if let Ok(meta) = entry.metadata() {
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .unwrap_or_default();
            out.push((entry.file_name(), meta.len(), mtime));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a link's metadata again and again, cheaply (see the module doc). Synchronous: run it in
/// `spawn_blocking`.
#[derive(Debug)]
pub struct MetaReader {
    config: MetaConfig,
    groups: Regex,
    metadata: Option<(Fingerprint, ClusterMetadata)>,
    offsets: IncrementalOffsets,
}

impl MetaReader {
    pub fn new(config: MetaConfig) -> Result<MetaReader> {
        Ok(MetaReader {
            groups: compile_groups(&config.groups)?,
            config,
            metadata: None,
            offsets: IncrementalOffsets::default(),
        })
    }

    pub fn config(&self) -> &MetaConfig {
        &self.config
    }

    /// The link's metadata as the source's disk holds it now, as version `version`.
    pub fn read(&mut self, version: u64) -> Result<LinkMeta> {
        let dir = &self.config.metadata_dir;
        let now = fingerprint(dir)?;
        if self.metadata.as_ref().is_none_or(|(seen, _)| *seen != now) {
            let metadata = read_metadata_dir(dir)?;
            self.metadata = Some((now, metadata));
        }
        let (_, metadata) = self.metadata.as_ref().expect("read above");
        let topics: Vec<TopicMeta> = metadata
            .topics
            .values()
            .filter(|t| !t.name.starts_with("__") && self.config.topics.matches(&t.name) && !t.partitions.is_empty())
            .map(TopicMeta::from_metadata)
            .collect();
        let topic_filter = &self.config.topics;
        let groups = &self.groups;
        let filter = OffsetsFilter {
            group: Box::new(|g| groups.is_match(g)),
            topic: Box::new(|t| topic_filter.matches(t)),
        };
        self.offsets.refresh(&self.config.offsets_log_dirs, &filter)?;
        let offsets: Vec<GroupOffset> = self
            .offsets
            .offsets()
            .into_iter()
            .map(|(key, committed)| GroupOffset::from_committed(&key, &committed))
            .collect();
        Ok(LinkMeta::new(
            &self.config.link,
            version,
            metadata.end_offset,
            topics,
            &self.config.groups,
            offsets,
        ))
    }
}

/// Publishes a link's metadata to a bucket whenever it changed: versions continue after the one the bucket holds.
#[derive(Debug)]
pub struct MetaPublisher {
    reader: Option<MetaReader>,
    prefix: KeyPrefix,
    shipper_id: String,
    last: Option<LinkMeta>,
    next_version: Option<u64>,
}

/// What one [`MetaPublisher::publish_if_changed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// A new version went up.
    Version {
        version: u64,
        topics: usize,
        offsets: usize,
    },
    /// Nothing changed since the last version.
    Unchanged,
}

impl MetaPublisher {
    pub fn new(reader: MetaReader, prefix: KeyPrefix, shipper_id: &str) -> MetaPublisher {
        MetaPublisher {
            reader: Some(reader),
            prefix,
            shipper_id: shipper_id.to_string(),
            last: None,
            next_version: None,
        }
    }

    /// Read the source (off the runtime) and publish a new version if anything changed.
    pub async fn publish_if_changed(&mut self, store: &dyn Transport) -> Result<Published> {
        let link = self
            .reader
            .as_ref()
            .map(|r| r.config.link.clone())
            .ok_or_else(|| Error::Task {
                what: "link metadata".into(),
                message: "reader lost by an earlier failure".into(),
            })?;
        let next = match self.next_version {
            Some(v) => v,
            None => match link_meta::read_manifest(store, &self.prefix, &link).await? {
                Some(manifest) => {
                    // What the bucket holds already is not uploaded again (a rerun of `seed`, a restart); a version
                    // that cannot be read is simply replaced.
                    self.last = link_meta::read_version(store, &manifest).await.ok();
                    manifest.version + 1
                }
                None => 1,
            },
        };
        let mut reader = self.reader.take().expect("checked above");
        let (reader, read) = tokio::task::spawn_blocking(move || {
            let read = reader.read(next);
            (reader, read)
        })
        .await
        .map_err(|e| Error::Task {
            what: "link metadata".into(),
            message: e.to_string(),
        })?;
        self.reader = Some(reader);
        let meta = read?;
        if self.last.as_ref().is_some_and(|last| last.same_content(&meta)) {
            self.next_version = Some(next);
            return Ok(Published::Unchanged);
        }
        link_meta::publish(store, &self.prefix, &meta, &self.shipper_id).await?;
        self.next_version = Some(next + 1);
        let published = Published::Version {
            version: next,
            topics: meta.topics.topics.len(),
            offsets: meta.offsets.offsets.len(),
        };
        self.last = Some(meta);
        Ok(published)
    }
}

#[cfg(test)]
mod tests;

/// The newest version of the link's metadata for the direct protocol's sessions (`ShipperSession::with_link_meta`).
pub type DirectMetaSender = tokio::sync::watch::Sender<Option<std::sync::Arc<EncodedLinkMeta>>>;

/// Reads the link's metadata every `reader.config().interval` and announces each version whose content changed on
/// `tx`, serialised and hashed for the direct protocol (off the runtime, like the read). Versions count from 1 in
/// each process: the applier records each as its catalog's next (`Catalog::record_link_meta_as_next`). A read that
/// fails (a metadata log being rewritten under it, an unreadable `__consumer_offsets` segment) is logged and tried
/// again at the next interval: segments keep shipping. Returns when no session listens any more.
pub async fn announce_direct(mut reader: MetaReader, tx: DirectMetaSender) {
    let interval = reader.config.interval;
    let mut last: Option<LinkMeta> = None;
    let mut next = 1u64;
    loop {
        let previous = last.take();
        let joined = tokio::task::spawn_blocking(move || {
            let read = reader.read(next).map_err(|e| e.to_string()).and_then(|meta| {
                if previous.as_ref().is_some_and(|p| p.same_content(&meta)) {
                    return Ok((meta, None));
                }
                let encoded = EncodedLinkMeta::encode(&meta)?;
                Ok((meta, Some(encoded)))
            });
            (reader, previous, read)
        })
        .await;
        let (back, previous, read) = match joined {
            Ok(triple) => triple,
            Err(e) => {
                tracing::error!(error = %e, "the link metadata reader failed; the link carries no more metadata");
                return;
            }
        };
        reader = back;
        match read {
            Ok((meta, Some(encoded))) => {
                tracing::info!(
                    version = next,
                    topics = meta.topics.topics.len(),
                    offsets = meta.offsets.offsets.len(),
                    "link metadata changed: sending it"
                );
                next += 1;
                last = Some(meta);
                tx.send_replace(Some(std::sync::Arc::new(encoded)));
            }
            Ok((meta, None)) => last = Some(meta),
            Err(reason) => {
                tracing::warn!(%reason, "reading the link's metadata; trying again");
                last = previous;
            }
        }
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}
