//! The consumer groups' offsets as `segmirror offsets` reads them and `segmirror offsets commit` commits them: from
//! a broker's `__consumer_offsets` segments on disk, from a JSON file, or (on the applier's host) from what a link
//! shipped into the catalog, each clamped to what is installed on the target.
//!
//! Why here: the reading and the committing are the work; the command line only parses its flags, prints tables
//! and CSV and chooses the exit status. The readers are `segment_format::consumer_offsets` and the catalog's
//! `LinkOffset`; the commit is `cluster_client::offsets_commit`, which the failover runs too.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use cluster_client::admin::AdminClient;
use cluster_client::offsets_commit::{commit_planned, GroupReport};
use cluster_client::offsets_plan::{installed_log_ends, plan, InstalledEnds};
use segment_format::consumer_offsets::{read_log_dir, ConsumerOffsets, OffsetsFilter};
use segment_format::failover_source::{FailoverSource, GroupOffset};
use segment_format::Error as FormatError;
use segmirror_applier::direct::tail_lags;
use segmirror_catalog::{Catalog, LinkOffset, RecordedMeta};

use crate::runtime::Runtime;

/// `pattern` matching a whole name (as `promote --topics` and the links' regexes do).
pub fn whole_name_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

/// Which groups and topics a command keeps (`--groups`, `--topics`: whole names); none given keeps all.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    groups: Option<regex::Regex>,
    topics: Option<regex::Regex>,
}

impl Selection {
    /// Compiles `--groups` and `--topics`; an invalid one is an error naming its flag.
    pub fn new(groups: Option<&str>, topics: Option<&str>) -> anyhow::Result<Selection> {
        let groups = groups
            .map(whole_name_regex)
            .transpose()
            .context("--groups is not a valid regular expression")?;
        let topics = topics
            .map(whole_name_regex)
            .transpose()
            .context("--topics is not a valid regular expression")?;
        Ok(Selection { groups, topics })
    }

    pub fn keeps_group(&self, g: &str) -> bool {
        self.groups.as_ref().is_none_or(|r| r.is_match(g))
    }

    pub fn keeps_topic(&self, t: &str) -> bool {
        self.topics.as_ref().is_none_or(|r| r.is_match(t))
    }
}

/// The committed offsets of each log dir (`--log-dir`), replayed as Kafka's group coordinator loads them; the
/// first log dir that cannot be read ends the reading with its error.
pub fn read_log_dirs(dirs: &[PathBuf], selection: &Selection) -> Result<Vec<ConsumerOffsets>, FormatError> {
    let filter = OffsetsFilter {
        group: Box::new(|g| selection.keeps_group(g)),
        topic: Box::new(|t| selection.keeps_topic(t)),
    };
    let mut all = Vec::new();
    for dir in dirs {
        all.push(read_log_dir(dir, &filter)?);
    }
    Ok(all)
}

/// `--link`: the catalog's offsets of the link, clamped to the installed data, and the link's recorded metadata.
/// With the mirror root, what the direct applier holds durable beyond its sealed segments counts as installed.
pub fn link_offsets(
    catalog: &Catalog,
    mirror: Option<&Path>,
    link: &str,
    selection: &Selection,
) -> anyhow::Result<(Vec<LinkOffset>, Option<RecordedMeta>)> {
    // A mirror fed over the direct transport holds durable records beyond its sealed segments (the tail state):
    // they count as installed, by the catalog's own clamping rule.
    let durable_ends: HashMap<(String, i32), i64> = match mirror {
        Some(mirror) => {
            let status = catalog.status()?;
            tail_lags(mirror, &status, 0)
                .into_iter()
                .filter_map(|l| Some(((l.topic, l.partition), l.installed_end_offset?)))
                .collect()
        }
        None => Default::default(),
    };
    let rows: Vec<LinkOffset> = catalog
        .link_offsets(link)?
        .into_iter()
        .map(|o| {
            let end = durable_ends.get(&(o.topic.clone(), o.partition)).copied();
            o.with_durable_end(end)
        })
        .filter(|o| selection.keeps_group(&o.group))
        .filter(|o| selection.keeps_topic(&o.topic))
        .collect();
    let recorded = catalog.link_meta(link)?;
    Ok((rows, recorded))
}

/// Where `offsets commit` takes the source groups' offsets from.
pub enum CommitSource<'a> {
    /// What a link shipped, read from the catalog by [`shipped_offsets`].
    Link(Vec<GroupOffset>),
    /// A JSON file `{"offsets": [...]}`.
    File(&'a Path),
    /// A source broker's log dirs holding `__consumer_offsets-N`.
    LogDirs(&'a [PathBuf]),
}

/// The offsets link `link` shipped, as the catalog recorded them; refused while no metadata of the link is
/// recorded (the shipper has not sent any).
pub fn shipped_offsets(catalog: &Catalog, link: &str) -> anyhow::Result<Vec<GroupOffset>> {
    if catalog.link_meta(link)?.is_none() {
        anyhow::bail!("no metadata of link {link} recorded yet (is the shipper sending it? `--groups`)");
    }
    Ok(catalog.link_offsets(link)?.iter().map(|o| o.source()).collect())
}

/// The offsets a failover commits on the target: the source groups' offsets the link carried, and those of the
/// groups that consumed from `segmirror serve` (the catalog's served offsets), so a consumer that read the replica
/// resumes on the target where it left off. One per (group, topic, partition): when a group name committed both on
/// the source and on the endpoint, the later commit wins (an application that moved from one to the other).
pub fn failover_offsets(catalog: &Catalog, link: &str) -> anyhow::Result<Vec<GroupOffset>> {
    let shipped = catalog
        .link_offsets(link)?
        .iter()
        .map(|o| o.source())
        .collect::<Vec<_>>();
    let mut served = Vec::new();
    for group in catalog.served_groups(link)? {
        served.extend(served_offsets(catalog, link, &group)?);
    }
    Ok(later_commit_wins(shipped.into_iter().chain(served)))
}

/// [`failover_offsets`] of one group: what `segmirror serve` answers its OffsetFetch with. Reads only that group's
/// served offsets.
pub fn group_offsets(catalog: &Catalog, link: &str, group: &str) -> anyhow::Result<Vec<GroupOffset>> {
    let shipped = catalog
        .link_offsets(link)?
        .iter()
        .map(|o| o.source())
        .filter(|o| o.group == group)
        .collect::<Vec<_>>();
    Ok(later_commit_wins(
        shipped.into_iter().chain(served_offsets(catalog, link, group)?),
    ))
}

/// `group`'s offsets committed through `segmirror serve`, as group offsets.
fn served_offsets(catalog: &Catalog, link: &str, group: &str) -> anyhow::Result<Vec<GroupOffset>> {
    Ok(catalog
        .served_offsets(link, group)?
        .into_iter()
        .map(|o| GroupOffset {
            group: group.to_string(),
            topic: o.topic,
            partition: o.partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata,
            commit_timestamp: o.committed_at_ms,
        })
        .collect())
}

/// One offset per (group, topic, partition): the one committed last (the first seen on a tie).
fn later_commit_wins(offsets: impl Iterator<Item = GroupOffset>) -> Vec<GroupOffset> {
    let mut by_key: BTreeMap<(String, String, i32), GroupOffset> = BTreeMap::new();
    for offset in offsets {
        let key = (offset.group.clone(), offset.topic.clone(), offset.partition);
        match by_key.get(&key) {
            Some(kept) if kept.commit_timestamp >= offset.commit_timestamp => {}
            _ => {
                by_key.insert(key, offset);
            }
        }
    }
    by_key.into_values().collect()
}

/// The selected offsets of `source` and the log ends installed under `installed` (blocking reads, before any
/// async work). A corrupt segment is `Err`, for its own exit status.
pub fn read_commit_inputs(
    source: &CommitSource<'_>,
    installed: &Path,
    selection: &Selection,
) -> Result<(Vec<GroupOffset>, InstalledEnds), FormatError> {
    let keep_group = |g: &str| selection.keeps_group(g);
    let keep_topic = |t: &str| selection.keeps_topic(t);
    let offsets = match source {
        CommitSource::Link(offsets) => offsets
            .iter()
            .filter(|o| keep_group(&o.group) && keep_topic(&o.topic))
            .cloned()
            .collect(),
        CommitSource::File(file) => FailoverSource::read_json(file)?
            .offsets
            .into_iter()
            .filter(|o| keep_group(&o.group) && keep_topic(&o.topic))
            .collect(),
        CommitSource::LogDirs(dirs) => {
            let filter = OffsetsFilter {
                group: Box::new(keep_group),
                topic: Box::new(keep_topic),
            };
            let mut all = Vec::new();
            for dir in *dirs {
                all.extend(FailoverSource::offsets_from_replay(&read_log_dir(dir, &filter)?));
            }
            all
        }
    };
    let installed = installed_log_ends(installed, &keep_topic)?;
    Ok((offsets, installed))
}

/// Commits `offsets` on the target cluster at `bootstrap`, each clamped to `installed` (with `dry_run`, only
/// what would be committed and which groups would be refused); one report per group.
pub fn commit(
    runtime: &Runtime,
    bootstrap: &str,
    timeout: Duration,
    offsets: &[GroupOffset],
    installed: &InstalledEnds,
    dry_run: bool,
) -> anyhow::Result<Vec<GroupReport>> {
    let planned = plan(offsets, installed);
    runtime.block_on(async {
        let mut admin = AdminClient::connect(bootstrap, timeout).await?;
        anyhow::Ok(commit_planned(&mut admin, planned, dry_run).await)
    })?
}

#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
