//! Links: one source mirrored into this catalog's partitions (the applier's side), or shipped from this host (the
//! shipper's side keeps its own record of the same link, under the same name).
//!
//! A link names where data travels (a store URL, or `direct:ADDR` for the direct protocol), which topics (and
//! consumer groups) are mirrored, its two ends, and an id of its own. Its state gates shippers and appliers:
//! `active` links move data, `paused` ones move nothing until resumed, `promoted` is terminal (the mirror became a
//! real cluster) and `deleted` is a tombstone. The allowed moves are in [`crate::link_lifecycle`]. The regexes are
//! stored as given; the tools validate them before calling [`Catalog::create_link`].

use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};
use segment_format::now_ms;
use serde::Serialize;

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::link_state::LinkState;
use crate::Catalog;

/// How a link carries data, derived from its recorded address ([`Link::store_url`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// The direct protocol (`segmirror ship` ↔ `segmirror apply --listen|--connect`).
    Direct,
    /// An object store (`seed`/`ship --store` → `apply`/`apply --follow`).
    Store,
}

/// The `store_url` prefix of a direct link: `direct:` followed by the peer's address (`direct:` alone when the
/// address is not known, as for a link the tail applier created itself).
pub const DIRECT_URL_PREFIX: &str = "direct:";

/// What [`Catalog::create_link`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// Unique name, used in object keys and on the command line.
    pub name: String,
    /// Where the shipper writes (`file:///...`, a plain path, or `s3://bucket/prefix`), or `direct:HOST:PORT` for
    /// the direct transport ([`DIRECT_URL_PREFIX`]).
    pub store_url: String,
    /// Which source topics are mirrored (a regular expression over topic names).
    pub topics_regex: String,
    /// Which consumer groups' offsets are mirrored; `None` mirrors none.
    pub groups_regex: Option<String>,
}

/// The two ends of a link as the operator names them (free text: a cluster name, a bootstrap address); shown by
/// `segmirror link list|describe`, never interpreted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkEnds {
    pub source: String,
    pub target: String,
}

/// A link as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    pub name: String,
    /// This link's identity: 32 hex digits drawn when it was created (or migrated). A link deleted and created
    /// again under the same name gets a new one.
    pub id: String,
    pub store_url: String,
    pub topics_regex: String,
    pub groups_regex: Option<String>,
    pub state: LinkState,
    pub created_at_ms: i64,
    pub source: String,
    pub target: String,
    /// When the link was deleted (state `deleted`).
    pub deleted_at_ms: Option<i64>,
    /// The id of the shipper's link record whose bucket this record follows: adopted from the first link identity
    /// object seen ([`Catalog::adopt_peer_link_id`]), never changed after.
    pub peer_link_id: Option<String>,
}

/// What [`Catalog::adopt_peer_link_id`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerLink {
    /// None was recorded: this one is now.
    Adopted,
    /// The recorded one.
    Same,
    /// Another one is recorded: the offered bucket belongs to another link of the same name.
    Other { recorded: String },
}

impl Link {
    /// How the link carries data.
    pub fn transport(&self) -> Transport {
        if self.store_url.starts_with(DIRECT_URL_PREFIX) {
            Transport::Direct
        } else {
            Transport::Store
        }
    }

    /// The peer address (direct) or the store URL (store); empty for a direct link with no address recorded.
    pub fn address(&self) -> &str {
        self.store_url
            .strip_prefix(DIRECT_URL_PREFIX)
            .unwrap_or(&self.store_url)
    }
}

/// The `state` column keeps the state a link was deleted in; the tombstone (`deleted_at_ms`) wins.
pub(crate) const LINK_COLUMNS: &str = "name, link_id, store_url, topics_regex, groups_regex, \
    CASE WHEN deleted_at_ms IS NULL THEN state ELSE 'deleted' END, created_at_ms, source, target, deleted_at_ms, \
    peer_link_id";

/// How many columns [`LINK_COLUMNS`] selects.
pub(crate) const LINK_COLUMN_COUNT: usize = 11;

pub(crate) fn link_from_row(row: &Row<'_>) -> rusqlite::Result<Link> {
    Ok(Link {
        name: row.get(0)?,
        id: row.get(1)?,
        store_url: row.get(2)?,
        topics_regex: row.get(3)?,
        groups_regex: row.get(4)?,
        state: row.get(5)?,
        created_at_ms: row.get(6)?,
        source: row.get(7)?,
        target: row.get(8)?,
        deleted_at_ms: row.get(9)?,
        peer_link_id: row.get(10)?,
    })
}

/// Reads a link inside any transaction or connection; `NotFound` if absent.
pub(crate) fn load_link(conn: &rusqlite::Connection, name: &str) -> Result<Link> {
    conn.query_row(
        &format!("SELECT {LINK_COLUMNS} FROM links WHERE name = ?1"),
        [name],
        link_from_row,
    )
    .optional()?
    .ok_or_else(|| Error::NotFound {
        entity: Entity::Link(name.to_owned()),
    })
}

/// What a deleted link still holds in this catalog (its name can be reused only when both are zero).
fn tombstone_holdings(tx: &rusqlite::Transaction<'_>, name: &str) -> Result<(i64, i64)> {
    let partitions: i64 = tx.query_row("SELECT count(*) FROM mirror_partitions WHERE link = ?1", [name], |r| {
        r.get(0)
    })?;
    let truncations: i64 = tx.query_row("SELECT count(*) FROM truncations WHERE link = ?1", [name], |r| r.get(0))?;
    Ok((partitions, truncations))
}

impl Catalog {
    /// Appends an event and returns its id. `NotFound` if the subject's link does not exist (the partition itself
    /// need not be recorded: an event may explain why it was not).
    pub fn append_event(&mut self, subject: Subject<'_>, kind: EventKind, detail: &str) -> Result<i64> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, subject.link())?;
        let id = insert_event(&tx, subject, kind, detail)?;
        tx.commit()?;
        Ok(id)
    }

    /// Records a new link in state `active`, with no named ends. See [`Catalog::create_link_with_ends`].
    pub fn create_link(&mut self, spec: &LinkSpec) -> Result<Link> {
        self.create_link_with_ends(spec, &LinkEnds::default())
    }

    /// Records a new link in state `active` with a new random id. `AlreadyExists` if the name is taken by a live
    /// link, or by a deleted one that still holds mirror partitions or truncation records
    /// ([`Error::NameOfDeletedLink`]): those would be taken over by the new link. A tombstone that holds nothing
    /// (a shipper-side record, or a link deleted before anything was mirrored) is replaced, events and all; the new
    /// link's id differs, so a bucket or peer of the old link is still refused.
    pub fn create_link_with_ends(&mut self, spec: &LinkSpec, ends: &LinkEnds) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut reused = None;
        match load_link(&tx, &spec.name) {
            Ok(old) if old.state == LinkState::Deleted => {
                let (partitions, truncations) = tombstone_holdings(&tx, &spec.name)?;
                if partitions > 0 || truncations > 0 {
                    return Err(Error::NameOfDeletedLink {
                        name: spec.name.clone(),
                        partitions,
                        truncations,
                    });
                }
                tx.execute("DELETE FROM events WHERE link = ?1", [&spec.name])?;
                // Group offsets committed through `segmirror serve` belong to the old link's partitions: never
                // handed to the new one.
                tx.execute("DELETE FROM served_offsets WHERE link = ?1", [&spec.name])?;
                tx.execute("DELETE FROM links WHERE name = ?1", [&spec.name])?;
                reused = Some(old.id);
            }
            Ok(existing) => {
                return Err(Error::AlreadyExists {
                    entity: Entity::Link(spec.name.clone()),
                    state: Some(existing.state),
                })
            }
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        tx.execute(
            "INSERT INTO links (name, link_id, store_url, topics_regex, groups_regex, state, created_at_ms, source, \
             target) VALUES (?1, lower(hex(randomblob(16))), ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                spec.name,
                spec.store_url,
                spec.topics_regex,
                spec.groups_regex,
                LinkState::Active,
                now_ms(),
                ends.source,
                ends.target
            ],
        )?;
        let link = load_link(&tx, &spec.name)?;
        let mut detail = format!(
            "id {}, store {}, topics {:?}",
            link.id, link.store_url, link.topics_regex
        );
        if let Some(old) = reused {
            detail.push_str(&format!(" (name reused: deleted link {old} held no partitions)"));
        }
        insert_event(&tx, Subject::Link(&link.name), EventKind::LinkCreated, &detail)?;
        tx.commit()?;
        Ok(link)
    }

    /// The link called `name` (a deleted one too: its state says so).
    pub fn link(&self, name: &str) -> Result<Link> {
        load_link(&self.conn, name)
    }

    /// Every link, by name, deleted ones included.
    pub fn links(&self) -> Result<Vec<Link>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {LINK_COLUMNS} FROM links ORDER BY name"))?;
        let links = stmt.query_map([], link_from_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(links)
    }

    /// Records `peer_id` (the shipper's link id, from the bucket's link identity object) as the one this link
    /// follows, if none is recorded yet; says whether it is the recorded one. An event records the adoption.
    pub fn adopt_peer_link_id(&mut self, name: &str, peer_id: &str) -> Result<PeerLink> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let link = load_link(&tx, name)?;
        match link.peer_link_id {
            Some(recorded) if recorded == peer_id => Ok(PeerLink::Same),
            Some(recorded) => Ok(PeerLink::Other { recorded }),
            None => {
                tx.execute(
                    "UPDATE links SET peer_link_id = ?2 WHERE name = ?1",
                    params![name, peer_id],
                )?;
                let detail = format!("follows the shipper's link id {peer_id} (the bucket's link identity)");
                insert_event(&tx, Subject::Link(name), EventKind::Note, &detail)?;
                tx.commit()?;
                Ok(PeerLink::Adopted)
            }
        }
    }

    /// Records `cluster_id` (a shipper's source cluster, its `meta.properties` cluster.id) as the one this link
    /// follows, if none is recorded yet; says whether it is the recorded one. An event records the adoption. The
    /// applier refuses a shipper of another cluster on this answer: a link mirrors one source cluster.
    pub fn adopt_source_cluster_id(&mut self, name: &str, cluster_id: &str) -> Result<PeerLink> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, name)?;
        let recorded: Option<String> =
            tx.query_row("SELECT source_cluster_id FROM links WHERE name = ?1", [name], |row| {
                row.get(0)
            })?;
        match recorded {
            Some(recorded) if recorded == cluster_id => Ok(PeerLink::Same),
            Some(recorded) => Ok(PeerLink::Other { recorded }),
            None => {
                tx.execute(
                    "UPDATE links SET source_cluster_id = ?2 WHERE name = ?1",
                    params![name, cluster_id],
                )?;
                let detail = format!("follows source cluster {cluster_id} (named by the link's first shipper)");
                insert_event(&tx, Subject::Link(name), EventKind::Note, &detail)?;
                tx.commit()?;
                Ok(PeerLink::Adopted)
            }
        }
    }

    /// The source cluster `name` follows ([`Catalog::adopt_source_cluster_id`]), if one was recorded.
    pub fn source_cluster_id(&self, name: &str) -> Result<Option<String>> {
        load_link(&self.conn, name)?;
        Ok(self
            .conn
            .query_row("SELECT source_cluster_id FROM links WHERE name = ?1", [name], |row| {
                row.get(0)
            })?)
    }

    /// Records where link `name`'s topics live now (the target cluster's bootstrap), when the link names none yet:
    /// the failover's cut does, so `segmirror serve` and `status` can say where to read after promotion. A target
    /// already named is kept (the operator's `link create --target` wins). Returns the link as recorded.
    pub fn name_link_target(&mut self, name: &str, target: &str) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let link = load_link(&tx, name)?;
        if link.target.is_empty() && !target.is_empty() {
            tx.execute("UPDATE links SET target = ?2 WHERE name = ?1", params![name, target])?;
        }
        let link = load_link(&tx, name)?;
        tx.commit()?;
        Ok(link)
    }

    /// Replaces a live link's topic and consumer-group regexes (`None` leaves one as it is; `Some(None)` for the
    /// groups mirrors none). The regexes are stored as given: the tools validate them. A deleted or promoted link
    /// is refused ([`Error::LinkTransition`], [`Error::Promoted`]): nothing reads its configuration again.
    pub fn set_link_regexes(
        &mut self,
        name: &str,
        topics_regex: Option<&str>,
        groups_regex: Option<Option<&str>>,
    ) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut link = load_link(&tx, name)?;
        match link.state {
            LinkState::Active | LinkState::Paused => {}
            LinkState::Promoted => {
                return Err(Error::Promoted {
                    entity: Entity::Link(name.to_owned()),
                })
            }
            LinkState::Deleted => {
                return Err(Error::LinkTransition {
                    link: name.to_owned(),
                    from: link.state,
                    action: "change its configuration",
                })
            }
        }
        let mut changes = Vec::new();
        if let Some(topics) = topics_regex.filter(|t| *t != link.topics_regex) {
            changes.push(format!("topics {:?} -> {topics:?}", link.topics_regex));
            link.topics_regex = topics.to_owned();
        }
        if let Some(groups) = groups_regex.filter(|g| *g != link.groups_regex.as_deref()) {
            changes.push(format!("consumer groups {:?} -> {groups:?}", link.groups_regex));
            link.groups_regex = groups.map(str::to_owned);
        }
        if changes.is_empty() {
            return Ok(link);
        }
        tx.execute(
            "UPDATE links SET topics_regex = ?2, groups_regex = ?3 WHERE name = ?1",
            params![name, link.topics_regex, link.groups_regex],
        )?;
        insert_event(
            &tx,
            Subject::Link(name),
            EventKind::LinkConfigChanged,
            &changes.join(", "),
        )?;
        tx.commit()?;
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::link_spec;

    #[test]
    fn create_get_list() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let mut spec = link_spec("b");
        spec.groups_regex = Some("app-.*".into());
        let b = cat.create_link(&spec).unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        assert_eq!(b.state, LinkState::Active);
        assert_eq!(cat.link("b").unwrap(), b);
        assert_eq!(b.groups_regex.as_deref(), Some("app-.*"));
        let names: Vec<_> = cat.links().unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_target_is_named_once_and_an_operators_target_is_kept() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        assert_eq!(cat.name_link_target("a", "").unwrap().target, "");
        assert_eq!(cat.name_link_target("a", "target:9092").unwrap().target, "target:9092");
        assert_eq!(cat.name_link_target("a", "other:9092").unwrap().target, "target:9092");
        let ends = LinkEnds {
            source: String::new(),
            target: "ops:9092".into(),
        };
        cat.create_link_with_ends(&link_spec("b"), &ends).unwrap();
        assert_eq!(cat.name_link_target("b", "target:9092").unwrap().target, "ops:9092");
        assert!(matches!(
            cat.name_link_target("missing", "t:1"),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn duplicate_and_missing_links_are_typed() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        assert!(matches!(
            cat.create_link(&link_spec("a")),
            Err(Error::AlreadyExists { entity: Entity::Link(n), state: Some(LinkState::Active) }) if n == "a"
        ));
        // The refusal says which state the existing link is in.
        cat.pause_link("a").unwrap();
        let msg = cat.create_link(&link_spec("a")).unwrap_err().to_string();
        assert!(
            msg.contains("\"a\"") && msg.contains("already exists") && msg.contains("state paused"),
            "{msg}"
        );
        assert!(matches!(
            cat.link("zz"),
            Err(Error::NotFound { entity: Entity::Link(n) }) if n == "zz"
        ));
        assert!(matches!(
            cat.set_link_state("zz", LinkState::Paused),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn state_transitions() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        assert_eq!(
            cat.set_link_state("a", LinkState::Paused).unwrap().state,
            LinkState::Paused
        );
        assert_eq!(
            cat.set_link_state("a", LinkState::Paused).unwrap().state,
            LinkState::Paused
        );
        assert_eq!(
            cat.set_link_state("a", LinkState::Active).unwrap().state,
            LinkState::Active
        );
        assert_eq!(
            cat.set_link_state("a", LinkState::Promoted).unwrap().state,
            LinkState::Promoted
        );
        for s in [LinkState::Active, LinkState::Paused] {
            assert!(matches!(
                cat.set_link_state("a", s),
                Err(Error::Promoted { entity: Entity::Link(n) }) if n == "a"
            ));
        }
        assert_eq!(cat.link("a").unwrap().state, LinkState::Promoted);
        // Created + 3 real changes; the repeated "paused" wrote nothing.
        let kinds: Vec<_> = cat.events(None, 10).unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::LinkStateChanged,
                EventKind::LinkStateChanged,
                EventKind::LinkStateChanged,
                EventKind::LinkCreated
            ]
        );
    }

    /// A catalog of schema version 3 (before managed links) opens: its links keep name, state and regexes, and
    /// each gets an id of its own; a paused one stays paused.
    #[test]
    fn a_version_3_catalog_migrates_and_its_links_get_ids() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for step in &crate::schema::MIGRATIONS[..3] {
                conn.execute_batch(step).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute_batch(
                "INSERT INTO links VALUES ('a', 'file:///x', '.*', NULL, 'active', 1); \
                 INSERT INTO links VALUES ('b', 'direct:', 'o.*', 'g', 'paused', 2);",
            )
            .unwrap();
        }
        let cat = Catalog::open(&path).unwrap();
        let links = cat.links().unwrap();
        assert_eq!(links.len(), 2);
        let (a, b) = (&links[0], &links[1]);
        assert_eq!((a.state, b.state), (LinkState::Active, LinkState::Paused));
        assert_eq!((b.topics_regex.as_str(), b.groups_regex.as_deref()), ("o.*", Some("g")));
        assert_eq!((a.transport(), b.transport()), (Transport::Store, Transport::Direct));
        assert_eq!((a.address(), b.address()), ("file:///x", ""));
        assert_eq!((a.id.len(), b.id.len()), (32, 32));
        assert_ne!(a.id, b.id);
        assert_eq!((a.source.as_str(), a.deleted_at_ms), ("", None));
    }

    #[test]
    fn the_first_peer_id_is_adopted_and_another_one_named() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        assert_eq!(cat.link("l").unwrap().peer_link_id, None);
        assert_eq!(cat.adopt_peer_link_id("l", "aa").unwrap(), PeerLink::Adopted);
        assert_eq!(cat.adopt_peer_link_id("l", "aa").unwrap(), PeerLink::Same);
        assert_eq!(
            cat.adopt_peer_link_id("l", "bb").unwrap(),
            PeerLink::Other { recorded: "aa".into() }
        );
        assert_eq!(cat.link("l").unwrap().peer_link_id.as_deref(), Some("aa"));
    }

    #[test]
    fn ends_and_transport_are_recorded() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let mut spec = link_spec("d");
        spec.store_url = format!("{DIRECT_URL_PREFIX}mirror-host:9400");
        let ends = LinkEnds {
            source: "dc1".into(),
            target: "dc2".into(),
        };
        let d = cat.create_link_with_ends(&spec, &ends).unwrap();
        assert_eq!((d.transport(), d.address()), (Transport::Direct, "mirror-host:9400"));
        assert_eq!(cat.link("d").unwrap(), d);
        assert_eq!((d.source.as_str(), d.target.as_str()), ("dc1", "dc2"));
    }

    #[test]
    fn state_text_round_trips() {
        for s in LinkState::ALL {
            assert_eq!(s.as_str().parse::<LinkState>().unwrap(), *s);
        }
        let err = "Active".parse::<LinkState>().unwrap_err();
        assert_eq!((err.kind, err.text.as_str()), ("LinkState", "Active"));
    }
}
