//! The link a run applies: chosen from the listing, gated on its catalog state, its bucket's identity checked, and
//! its metadata (topic configs, committed offsets) recorded after the installs.

use segmirror_catalog::{LinkSpec, LinkState};
use segmirror_transport::bucket::link_meta;

use super::{Applier, APPLIER_TOPICS_REGEX};
use crate::bucket::read::{self, LinkObjects};
use crate::error::{Error, Result};
use crate::report::{ApplyReport, LinkMetaOutcome, SkipReason};

/// The link a run applies, as listed.
pub(super) struct ListedLink {
    pub name: String,
    /// Its partitions in the store (none when the catalog knows a link the store no longer holds).
    pub objects: LinkObjects,
    /// The store holds its metadata manifest (`<link>/_meta/manifest.json`).
    pub has_meta: bool,
    /// The store holds its identity object (`segmirror_transport::bucket::link_identity`).
    pub has_identity: bool,
}

impl Applier {
    /// List the store and choose the link: the named one, or the store's only link. `None` when no link was named
    /// and the prefix holds nothing of segmirror's (noted in `report`).
    pub(super) async fn list_link(&self, report: &mut ApplyReport) -> Result<Option<ListedLink>> {
        let mut listing = read::list(
            self.config.store.as_ref(),
            &self.config.prefix,
            self.config.link.as_deref(),
        )
        .await?;
        report.ignored_keys = std::mem::take(&mut listing.ignored);
        let link = match &self.config.link {
            Some(link) => link.clone(),
            None => match listing.links.keys().collect::<Vec<_>>().as_slice() {
                [] => {
                    report.notes.push(format!(
                        "nothing to apply: no segmirror objects under prefix '{}'",
                        self.config.prefix
                    ));
                    return Ok(None);
                }
                [one] => (*one).clone(),
                many => {
                    return Err(Error::AmbiguousLink {
                        prefix: self.config.prefix.to_string(),
                        links: many.iter().map(|s| s.to_string()).collect(),
                    })
                }
            },
        };
        report.link = Some(link.clone());
        let has_meta = listing.meta_links.contains(&link);
        let objects = match listing.links.remove(&link) {
            Some(objects) => objects,
            None => {
                self.refuse_unknown_link(&link).await?;
                Default::default()
            }
        };
        Ok(Some(ListedLink {
            has_identity: listing.identities.contains_key(&link),
            name: link,
            objects,
            has_meta,
        }))
    }

    /// A named link the store does not hold: fine if the catalog knows it (everything was cleaned up from the
    /// store), a typo otherwise, which must not create a link.
    async fn refuse_unknown_link(&self, link: &str) -> Result<()> {
        let name = link.to_string();
        let known = self
            .catalog
            .call("link", move |c| match c.link(&name) {
                Ok(_) => Ok(None),
                Err(segmirror_catalog::Error::NotFound { .. }) => {
                    Ok(Some(c.links()?.into_iter().map(|l| l.name).collect::<Vec<_>>()))
                }
                Err(e) => Err(e),
            })
            .await?;
        match known {
            Some(known) => Err(Error::UnknownLink {
                link: link.to_string(),
                prefix: self.config.prefix.to_string(),
                known,
            }),
            None => Ok(()),
        }
    }

    /// Step 1 for the link: `Some(reason)` when its state (paused, promoted, deleted) means the run installs nothing.
    pub(super) async fn gate_link(&self, link: &str, report: &mut ApplyReport) -> Result<Option<SkipReason>> {
        Ok(match self.ensure_link(link, report).await? {
            LinkState::Active => None,
            LinkState::Paused => Some(SkipReason::LinkPaused),
            LinkState::Promoted => Some(SkipReason::LinkPromoted),
            LinkState::Deleted => Some(SkipReason::LinkDeleted),
        })
    }

    /// Record the link's newest metadata if the catalog has an older version (see `segmirror_transport::bucket::link_meta`;
    /// what may be committed is computed against the installed data when read, so recording it after the installs
    /// or before makes no difference to what a target may commit). A refused or unreadable version is reported, not
    /// a reason to fail the run.
    pub(super) async fn record_link_meta(&self, link: &str) -> Result<Option<LinkMetaOutcome>> {
        let store = self.config.store.as_ref();
        let manifest = match link_meta::read_manifest(store, &self.config.prefix, link).await {
            Ok(None) => return Ok(None),
            Ok(Some(manifest)) => manifest,
            Err(e) => return Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() })),
        };
        let name = link.to_string();
        let recorded = self.catalog.call("link metadata", move |c| c.link_meta(&name)).await?;
        if recorded.as_ref().is_some_and(|r| r.version >= manifest.version) {
            return Ok(Some(LinkMetaOutcome::Unchanged {
                version: manifest.version,
            }));
        }
        let meta = match link_meta::read_version(store, &manifest).await {
            Ok(meta) => meta,
            Err(e) => return Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() })),
        };
        let (version, topics, offsets) = (
            meta.topics.version,
            meta.topics.topics.len(),
            meta.offsets.offsets.len(),
        );
        match self
            .catalog
            .try_call("link metadata", move |c| c.record_link_meta(&meta))
            .await?
        {
            Ok(_) => Ok(Some(LinkMetaOutcome::Recorded {
                version,
                topics,
                offsets,
            })),
            Err(e @ segmirror_catalog::Error::Invalid { .. }) => {
                Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() }))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The link's state, creating the link (active) if the catalog does not know it.
    async fn ensure_link(&self, link: &str, report: &mut ApplyReport) -> Result<LinkState> {
        let spec = LinkSpec {
            name: link.to_string(),
            store_url: self.config.store_url.clone(),
            topics_regex: APPLIER_TOPICS_REGEX.to_string(),
            groups_regex: None,
        };
        let recorded = self
            .catalog
            .call("link", move |c| match c.link(&spec.name) {
                Err(segmirror_catalog::Error::NotFound { .. }) => c.create_link(&spec),
                other => other,
            })
            .await?;
        if recorded.store_url != self.config.store_url {
            report.notes.push(format!(
                "link {link} was recorded with store {}; applying from {}",
                recorded.store_url, self.config.store_url
            ));
        }
        Ok(recorded.state)
    }

    /// Reads the store's link identity object and checks it against (or, the first time, records it as) the id
    /// the catalog's link follows: a bucket of a recreated link of the same name is refused, naming both ids.
    pub(super) async fn check_link_identity(&self, link: &str) -> Result<()> {
        use segmirror_transport::bucket::link_identity::{
            link_identity_key, parse_link_identity, MAX_LINK_IDENTITY_BYTES,
        };
        let key = link_identity_key(&self.config.prefix, link);
        let bytes = self.config.store.read_document(&key, MAX_LINK_IDENTITY_BYTES).await?;
        let identity = parse_link_identity(&key, link, &bytes)?;
        let (name, id) = (link.to_string(), identity.id.clone());
        let found = self
            .catalog
            .call("link identity", move |c| c.adopt_peer_link_id(&name, &id))
            .await?;
        match found {
            segmirror_catalog::PeerLink::Adopted | segmirror_catalog::PeerLink::Same => Ok(()),
            segmirror_catalog::PeerLink::Other { recorded } => Err(Error::ForeignLinkBucket {
                link: link.to_string(),
                key,
                bucket_id: identity.id,
                recorded_id: recorded,
            }),
        }
    }
}
