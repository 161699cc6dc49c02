//! The lifecycle of a link's record in a catalog, as the operator drives it: create, alter, pause, resume, promote,
//! delete, reset a partition, describe. `segmirror link` parses and prints around these functions; the admin HTTP
//! API (`crate::admin_port::admin`) pauses, resumes and sets the topics regex through the same ones.
//!
//! Why here: the two front ends change the same records, and a rule written twice drifts (a regex one accepts and
//! the shipper refuses, a transition one allows and the other does not). The transitions themselves are
//! `segmirror_catalog::link_lifecycle`; what is added here is what both front ends check before calling it.

use std::path::Path;

use anyhow::{bail, Context as _};
use segmirror_catalog::{
    Catalog, Error as CatalogError, Event, Link, LinkEnds, LinkSpec, LinkState, MirrorPartition, PartitionKey, Subject,
    Transport, DIRECT_URL_PREFIX,
};
use segmirror_shipper::source::discover::TopicFilter;
use segmirror_transport::manifest::validate_link_name;

/// Opens the catalog a link operation works on. Only a creation may create the catalog: every other operation on
/// a catalog that does not exist is refused (no link can be recorded there).
pub fn open(path: &Path, creates: bool) -> anyhow::Result<Catalog> {
    if !creates && !path.is_file() {
        bail!(
            "catalog {} does not exist: no link is recorded there (create one with `segmirror link create`, or give \
             --catalog/--mirror)",
            path.display()
        );
    }
    Catalog::open(path).with_context(|| format!("opening catalog {}", path.display()))
}

/// What a new link is: its name, ends, transport and address, and its regexes.
#[derive(Clone, Debug)]
pub struct NewLink {
    /// The link's name ([A-Za-z0-9._-], as in bucket keys and on the direct protocol).
    pub name: String,
    /// The source end as the operator names it; shown, never interpreted.
    pub source: String,
    /// The target end as the operator names it.
    pub target: String,
    pub transport: Transport,
    /// The applier's HOST:PORT (direct) or the store URL (store).
    pub address: String,
    pub topics_regex: String,
    pub groups_regex: Option<String>,
}

/// Records `new` (state active, a new id) after checking its name, regexes and address.
pub fn create(catalog: &mut Catalog, new: NewLink) -> anyhow::Result<Link> {
    let NewLink {
        name,
        source,
        target,
        transport,
        address,
        topics_regex,
        groups_regex,
    } = new;
    validate_link_name(&name).map_err(|reason| anyhow::anyhow!("link name {name:?}: {reason}"))?;
    check_topics_arg(&topics_regex)?;
    if let Some(groups) = &groups_regex {
        check_groups_regex(groups)?;
    }
    let store_url = match transport {
        Transport::Direct => {
            if !address.contains(':') {
                bail!("--address {address:?}: a direct link needs the applier's HOST:PORT");
            }
            format!("{DIRECT_URL_PREFIX}{address}")
        }
        Transport::Store => {
            if address.is_empty() || address.starts_with(DIRECT_URL_PREFIX) {
                bail!("--address {address:?}: a store link needs a store URL (a path, file:///..., s3://...)");
            }
            address
        }
    };
    let spec = LinkSpec {
        name,
        store_url,
        topics_regex,
        groups_regex,
    };
    match catalog.create_link_with_ends(&spec, &LinkEnds { source, target }) {
        Ok(link) => Ok(link),
        // The existing link's state is in the message; where to look at the rest of it, too.
        Err(e @ CatalogError::AlreadyExists { .. }) => {
            bail!("{e}; `segmirror link describe {}` shows it", spec.name)
        }
        Err(e) => Err(e.into()),
    }
}

/// Changes a live link's regexes: `topics_regex` when given; `groups_regex` when given (`Some(None)`: carry no
/// consumer groups' offsets any more). At least one of the two.
pub fn alter(
    catalog: &mut Catalog,
    name: &str,
    topics_regex: Option<&str>,
    groups_regex: Option<Option<&str>>,
) -> anyhow::Result<Link> {
    if let Some(topics) = topics_regex {
        check_topics_arg(topics)?;
    }
    if let Some(Some(groups)) = groups_regex {
        check_groups_regex(groups)?;
    }
    if topics_regex.is_none() && groups_regex.is_none() {
        bail!("nothing to change: give --topics-regex, --consumer-groups-regex or --no-consumer-groups");
    }
    Ok(catalog.set_link_regexes(name, topics_regex, groups_regex)?)
}

/// Moves link `name` to state `to` through the catalog's lifecycle (which refuses a transition it does not allow,
/// naming the link's state); the link as it is afterwards.
pub fn set_state(catalog: &mut Catalog, name: &str, to: LinkState) -> Result<Link, CatalogError> {
    match to {
        LinkState::Active => catalog.resume_link(name),
        LinkState::Paused => catalog.pause_link(name),
        LinkState::Promoted => catalog.promote_link(name),
        LinkState::Deleted => catalog.delete_link(name),
    }
}

/// [`set_state`], with the state the link was in before.
pub fn transition(catalog: &mut Catalog, name: &str, to: LinkState) -> anyhow::Result<(LinkState, Link)> {
    let from = catalog.link(name)?.state;
    Ok((from, set_state(catalog, name, to)?))
}

/// Archives the mirror's copy of a partition whose source topic was recreated and mirrors the new topic from its
/// start: the partition as it was, and the pending source topic id now accepted.
pub fn reset_partition(
    catalog: &mut Catalog,
    catalog_path: &Path,
    key: &PartitionKey,
) -> anyhow::Result<(MirrorPartition, String)> {
    catalog
        .accept_lineage(key)
        .with_context(|| format!("resetting {key} in catalog {}", catalog_path.display()))
}

/// One link with how many partitions it has and its last `events` events.
pub fn describe(catalog: &Catalog, name: &str, events: usize) -> anyhow::Result<(Link, usize, Vec<Event>)> {
    let link = catalog.link(name)?;
    let partitions = catalog.partitions(name)?.len();
    let events = catalog.events(Some(Subject::Link(name)), events)?;
    Ok((link, partitions, events))
}

/// The topics regex as the shipper will read it (a comma-separated list of whole-name regexes): `Err` holds why it
/// is refused.
pub fn check_topics_regex(list: &str) -> Result<(), String> {
    TopicFilter::new(list).map(|_| ()).map_err(|e| e.to_string())
}

fn check_topics_arg(list: &str) -> anyhow::Result<()> {
    check_topics_regex(list).map_err(|e| anyhow::anyhow!("--topics-regex {list:?}: {e}"))
}

fn check_groups_regex(re: &str) -> anyhow::Result<()> {
    regex::Regex::new(re)
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("--consumer-groups-regex {re:?}: {e}"))
}

#[cfg(test)]
#[path = "link_records_tests.rs"]
mod tests;
