//! The figures `segmirror status` prints, per catalog: every link and mirror partition with what is installed and
//! the last thing that happened to it, the tail lag of a directly fed mirror, the truncations followed, and with
//! `--bucket` each bucket link's newest versions and the lag behind them. Read-only: it never creates or changes a
//! catalog, and (SQLite WAL) never blocks a running applier.
//!
//! Why here: these are the figures, read through the catalog's, the direct applier's (`segmirror_applier::direct`) and
//! the bucket's (`crate::bucket_ends`) own readers; the command line only chooses the catalogs and prints the
//! [`StatusDoc`] as a table or JSON, so another front end reads exactly the same figures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use segmirror_applier::direct::{tail_lags, TailLag};
use segmirror_catalog::{
    catalogs_in, Catalog, Event, LinkStatus, PartitionKey, PartitionState, PartitionStatus, Status, Subject,
};
use segmirror_transport::S3Options;
use serde::Serialize;

use crate::bucket_ends::{newest_versions, open_link_store};
use crate::catalog::{catalog_path, data_dir, mirror_catalog_path};
use crate::runtime::Runtime;

/// The catalogs `status` reads: `catalog`; else `mirror`'s default catalog, which must exist; else every catalog
/// in the data directory (one per mirror root, see `segmirror_catalog::default_catalog_for_mirror`), so that a host
/// with several mirrors shows them all without the user knowing where each catalog lives.
pub fn catalog_paths(catalog: Option<PathBuf>, mirror: Option<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    Ok(match (catalog, mirror) {
        (Some(path), _) => vec![catalog_path(Some(path))?],
        (None, Some(mirror)) => {
            let (path, _) = mirror_catalog_path(None, &mirror)?;
            if !path.exists() {
                bail!(
                    "no catalog for mirror root {} (expected {}; nothing applied there yet?)",
                    mirror.display(),
                    path.display()
                );
            }
            vec![path]
        }
        (None, None) => {
            let dir = data_dir()?;
            let found = catalogs_in(&dir).with_context(|| format!("listing catalogs in {}", dir.display()))?;
            if found.is_empty() {
                bail!(
                    "no catalog in {} (nothing applied yet? `segmirror apply` creates it)",
                    dir.display()
                );
            }
            found
        }
    })
}

/// Opens an existing catalog for reading its status (never creates one).
pub fn open(path: &Path) -> anyhow::Result<Catalog> {
    if !path.exists() {
        bail!(
            "no catalog at {} (nothing applied yet? `segmirror apply` creates it)",
            path.display()
        );
    }
    Catalog::open(path).with_context(|| format!("opening catalog {}", path.display()))
}

/// One bucket link's newest versions against what is installed (`--bucket`).
#[derive(Serialize, Debug)]
pub struct BucketLink {
    pub link: String,
    pub store_url: String,
    /// Why the store could not be read (the catalog's figures above still hold).
    pub error: Option<String>,
    pub partitions: Vec<BucketLag>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct BucketLag {
    pub topic: String,
    pub partition: i32,
    /// The newest version's end in the bucket (its manifest's `next_offset`).
    pub shipped_end_offset: i64,
    pub installed_end_offset: Option<i64>,
    pub lag_offsets: i64,
    /// Seconds since the newest version was uploaded, while anything of it is not installed; else 0.
    pub lag_seconds: u64,
    pub uploaded_at_ms: i64,
}

/// The JSON document: the catalog's status with each partition's last event.
#[derive(Serialize)]
pub struct StatusDoc<'a> {
    pub catalog: &'a Path,
    /// The mirror root the catalog records (none until `apply` has used it).
    pub mirror_root: Option<PathBuf>,
    pub schema_version: u32,
    pub generated_at_ms: i64,
    pub links: Vec<LinkDoc<'a>>,
    /// Tail replication lag per tailed partition of the mirror root (see `status --help`).
    pub tail: Vec<TailLag>,
    /// Source truncations the tail applier followed (offset ranges and archive files) or refused to follow (a
    /// source that lost committed records), oldest first.
    pub truncations: Vec<segmirror_catalog::TruncationRecord>,
    /// With `--bucket`: each bucket link's newest versions and the lag behind them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Vec<BucketLink>>,
}

/// A link: the fields of [`LinkStatus`] (its partitions with their last events) and its own last event.
#[derive(Serialize)]
pub struct LinkDoc<'a> {
    #[serde(skip)]
    pub link: &'a LinkStatus,
    pub name: &'a str,
    pub state: segmirror_catalog::LinkState,
    pub store_url: &'a str,
    pub topics_regex: &'a str,
    pub groups_regex: Option<&'a str>,
    pub created_at_ms: i64,
    pub last_event_at_ms: Option<i64>,
    pub last_event: Option<Event>,
    #[serde(rename = "partitions")]
    pub partition_docs: Vec<PartitionDoc<'a>>,
}

impl<'a> LinkDoc<'a> {
    pub fn new(link: &'a LinkStatus, last_event: Option<Event>, partition_docs: Vec<PartitionDoc<'a>>) -> Self {
        LinkDoc {
            link,
            name: &link.name,
            state: link.state,
            store_url: &link.store_url,
            topics_regex: &link.topics_regex,
            groups_regex: link.groups_regex.as_deref(),
            created_at_ms: link.created_at_ms,
            last_event_at_ms: link.last_event_at_ms,
            last_event,
            partition_docs,
        }
    }
}

#[derive(Serialize)]
pub struct PartitionDoc<'a> {
    /// The catalog's record, except `installed_end_offset`: the offset after the mirror's last durable record
    /// whatever delivered it ([`true_end`]).
    #[serde(flatten)]
    pub partition: std::borrow::Cow<'a, PartitionStatus>,
    pub last_event: Option<Event>,
    /// The broker log dirs a promoted partition was installed into (one per replica; absent when none recorded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub promoted_into: Vec<String>,
}

/// `p` with its true `installed_end_offset`. The catalog records a segment when it is installed whole: a bucket
/// version (sealed or not) or a segment the tail applier sealed. The tail applier appends to the active segment
/// between seals, durably, and records that end in the mirror's tail state only; its row in `tail` has it. One
/// figure per partition that holds for every delivery mode: the greater of the two.
pub fn true_end<'a>(p: &'a PartitionStatus, tail: Option<&TailLag>) -> std::borrow::Cow<'a, PartitionStatus> {
    let appended = tail.and_then(|t| t.installed_end_offset);
    match appended {
        Some(end) if Some(end) > p.installed_end_offset => {
            let mut p = p.clone();
            p.installed_end_offset = Some(end);
            std::borrow::Cow::Owned(p)
        }
        _ => std::borrow::Cow::Borrowed(p),
    }
}

/// One catalog's document: its status with each link's and partition's last event.
pub fn status_doc<'a>(catalog: &Catalog, path: &'a Path, status: &'a Status) -> anyhow::Result<StatusDoc<'a>> {
    let mirror_root = catalog.mirror_root()?;
    let now = u64::try_from(status.generated_at_ms).unwrap_or(0);
    let tail = mirror_root
        .as_deref()
        .map_or_else(Vec::new, |root| tail_lags(root, status, now));
    // Looked up per partition below: by key, not by a scan each (10,000 partitions made that quadratic).
    let tail_by_partition: HashMap<(&str, i32), &TailLag> =
        tail.iter().map(|t| ((t.topic.as_str(), t.partition), t)).collect();
    let mut links = Vec::new();
    for link in &status.links {
        let last_event = catalog.events(Some(Subject::Link(&link.name)), 1)?.into_iter().next();
        let mut last_events = catalog.last_partition_events(&link.name)?;
        let mut partition_docs = Vec::new();
        for p in &link.partitions {
            let last_event = last_events.remove(&(p.topic.clone(), p.partition));
            let promoted_into = if p.state == PartitionState::Promoted {
                let key = PartitionKey::new(link.name.clone(), p.topic.clone(), p.partition);
                catalog.promoted_replicas(catalog.partition(&key)?.id)?
            } else {
                Vec::new()
            };
            let tail = tail_by_partition.get(&(p.topic.as_str(), p.partition)).copied();
            partition_docs.push(PartitionDoc {
                partition: true_end(p, tail),
                last_event,
                promoted_into,
            });
        }
        links.push(LinkDoc::new(link, last_event, partition_docs));
    }
    Ok(StatusDoc {
        catalog: path,
        mirror_root,
        schema_version: status.schema_version,
        generated_at_ms: status.generated_at_ms,
        links,
        tail,
        truncations: catalog.truncations(None)?,
        bucket: None,
    })
}

/// Per active or paused bucket link of `status`, the bucket's newest versions against the installed ends. A store
/// that cannot be read is reported on its link, not as a failure of `status`.
pub fn bucket_lags(s3: &S3Options, prefix: &str, status: &Status, runtime: &Runtime) -> Vec<BucketLink> {
    use segmirror_catalog::LinkState;
    let now_ms = status.generated_at_ms;
    let mut out = Vec::new();
    for link in &status.links {
        if !matches!(link.state, LinkState::Active | LinkState::Paused) {
            continue;
        }
        let read = open_link_store(s3, prefix, &link.name, &link.store_url).and_then(|store| {
            store
                .map(|(store, prefix)| runtime.block_on(newest_versions(&store, &prefix, &link.name))?)
                .transpose()
        });
        let mut entry = BucketLink {
            link: link.name.clone(),
            store_url: link.store_url.clone(),
            error: None,
            partitions: Vec::new(),
        };
        match read {
            Ok(None) => continue,
            Ok(Some(ends)) => {
                for ((topic, partition), newest) in ends {
                    let installed = link
                        .partitions
                        .iter()
                        .find(|p| p.topic == topic && p.partition == partition)
                        .and_then(|p| p.installed_end_offset);
                    let (lag, lag_seconds) = newest.lag(installed, now_ms);
                    entry.partitions.push(BucketLag {
                        topic,
                        partition,
                        shipped_end_offset: newest.end_offset,
                        installed_end_offset: installed,
                        lag_offsets: lag,
                        lag_seconds,
                        uploaded_at_ms: newest.uploaded_at_ms,
                    });
                }
            }
            Err(e) => entry.error = Some(crate::error_line(&e)),
        }
        out.push(entry);
    }
    out
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
