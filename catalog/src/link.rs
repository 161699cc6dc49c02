//! Links: one source (an object-store URL) mirrored into this catalog's partitions.
//!
//! A link names where manifests are read from and which topics (and consumer groups) are mirrored. Its state gates
//! the applier: `active` links are applied, `paused` ones are skipped, and `promoted` is terminal (the link's mirror
//! was turned into a real cluster; nothing on it changes again). The regexes are stored as given; the tools validate
//! them before calling [`Catalog::create_link`].

use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};
use segment_format::now_ms;
use serde::Serialize;

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::{text_enum, Catalog};

text_enum! {
    /// Lifecycle of a link.
    pub enum LinkState {
        /// Applied by the applier.
        Active => "active",
        /// Kept, but the applier skips it until resumed.
        Paused => "paused",
        /// Terminal: the mirror became a real cluster.
        Promoted => "promoted",
    }
}

/// What [`Catalog::create_link`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// Unique name, used in object keys and on the command line.
    pub name: String,
    /// Where the shipper writes (`file:///...`, a plain path, or `s3://bucket/prefix`).
    pub store_url: String,
    /// Which source topics are mirrored (a regular expression over topic names).
    pub topics_regex: String,
    /// Which consumer groups' offsets are mirrored; `None` mirrors none.
    pub groups_regex: Option<String>,
}

/// A link as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    pub name: String,
    pub store_url: String,
    pub topics_regex: String,
    pub groups_regex: Option<String>,
    pub state: LinkState,
    pub created_at_ms: i64,
}

const LINK_COLUMNS: &str = "name, store_url, topics_regex, groups_regex, state, created_at_ms";

fn link_from_row(row: &Row<'_>) -> rusqlite::Result<Link> {
    Ok(Link {
        name: row.get(0)?,
        store_url: row.get(1)?,
        topics_regex: row.get(2)?,
        groups_regex: row.get(3)?,
        state: row.get(4)?,
        created_at_ms: row.get(5)?,
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

    /// Records a new link in state `active`. `AlreadyExists` if the name is taken.
    pub fn create_link(&mut self, spec: &LinkSpec) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let taken: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM links WHERE name = ?1)",
            [&spec.name],
            |r| r.get(0),
        )?;
        if taken {
            return Err(Error::AlreadyExists {
                entity: Entity::Link(spec.name.clone()),
            });
        }
        let link = Link {
            name: spec.name.clone(),
            store_url: spec.store_url.clone(),
            topics_regex: spec.topics_regex.clone(),
            groups_regex: spec.groups_regex.clone(),
            state: LinkState::Active,
            created_at_ms: now_ms(),
        };
        tx.execute(
            &format!("INSERT INTO links ({LINK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
            params![
                link.name,
                link.store_url,
                link.topics_regex,
                link.groups_regex,
                link.state,
                link.created_at_ms
            ],
        )?;
        let detail = format!("store {}, topics {:?}", link.store_url, link.topics_regex);
        insert_event(&tx, Subject::Link(&link.name), EventKind::LinkCreated, &detail)?;
        tx.commit()?;
        Ok(link)
    }

    /// The link called `name`.
    pub fn link(&self, name: &str) -> Result<Link> {
        load_link(&self.conn, name)
    }

    /// Every link, by name.
    pub fn links(&self) -> Result<Vec<Link>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {LINK_COLUMNS} FROM links ORDER BY name"))?;
        let links = stmt.query_map([], link_from_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(links)
    }

    /// Moves a link to `state`. Setting the current state is a no-op; leaving `promoted` is refused
    /// ([`Error::Promoted`]). The link's partitions keep their own states.
    pub fn set_link_state(&mut self, name: &str, state: LinkState) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut link = load_link(&tx, name)?;
        if link.state == state {
            return Ok(link);
        }
        if link.state == LinkState::Promoted {
            return Err(Error::Promoted {
                entity: Entity::Link(name.to_owned()),
            });
        }
        tx.execute("UPDATE links SET state = ?2 WHERE name = ?1", params![name, state])?;
        let detail = format!("{} -> {}", link.state, state);
        insert_event(&tx, Subject::Link(name), EventKind::LinkStateChanged, &detail)?;
        tx.commit()?;
        link.state = state;
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
    fn duplicate_and_missing_links_are_typed() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        assert!(matches!(
            cat.create_link(&link_spec("a")),
            Err(Error::AlreadyExists { entity: Entity::Link(n) }) if n == "a"
        ));
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

    #[test]
    fn state_text_round_trips() {
        for s in LinkState::ALL {
            assert_eq!(s.as_str().parse::<LinkState>().unwrap(), *s);
        }
        let err = "Active".parse::<LinkState>().unwrap_err();
        assert_eq!((err.kind, err.text.as_str()), ("LinkState", "Active"));
    }
}
