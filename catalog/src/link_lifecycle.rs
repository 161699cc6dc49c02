//! The lifecycle of a link: which state changes are allowed, and the plain functions (`pause`, `resume`, `promote`,
//! `delete`, `set_topics_regex`) that `segmirror link` and the admin API call.
//!
//! Why a module of its own: the rules are the contract every front end (CLI, HTTP) and every gate (shipper,
//! applier) relies on, so they live in one table that the tests walk exhaustively, apart from the SQL in `link`.
//!
//! ```text
//! active ⇄ paused          a temporary disconnect
//! active | paused → promoted   terminal: the mirror became a real cluster
//! active | paused | promoted → deleted   a tombstone; nothing leaves it
//! ```
//! Asking for the state a link is already in is a no-op (so a retried `pause` or `delete` succeeds: a script that
//! deletes a link twice, or retries after a lost answer, is told the link is deleted, not refused); any other move
//! out of `deleted` is refused.

use rusqlite::{params, TransactionBehavior};
use segment_format::now_ms;

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::link::{load_link, Link};
use crate::link_state::LinkState;
use crate::Catalog;

/// The verb an operator used to ask for `to`, for error messages.
fn action(to: LinkState) -> &'static str {
    match to {
        LinkState::Active => "resume it",
        LinkState::Paused => "pause it",
        LinkState::Promoted => "promote it",
        LinkState::Deleted => "delete it",
    }
}

/// Whether link `name` may move `from` → `to`: `Ok(true)` for a change, `Ok(false)` for a no-op (already there,
/// `deleted` included), [`Error::Promoted`] for leaving `promoted` other than to `deleted`,
/// [`Error::LinkTransition`] for any other move out of `deleted`.
pub fn check_transition(name: &str, from: LinkState, to: LinkState) -> Result<bool> {
    use LinkState::*;
    match (from, to) {
        (a, b) if a == b => Ok(false),
        (Deleted, _) => Err(Error::LinkTransition {
            link: name.to_owned(),
            from,
            action: action(to),
        }),
        (Promoted, Active | Paused) => Err(Error::Promoted {
            entity: Entity::Link(name.to_owned()),
        }),
        (Active, Paused) | (Paused, Active) | (Active | Paused, Promoted) | (_, Deleted) => Ok(true),
        // Every pair is listed above; this arm keeps the match total if a state is added.
        _ => Err(Error::LinkTransition {
            link: name.to_owned(),
            from,
            action: action(to),
        }),
    }
}

impl Catalog {
    /// Moves a link to `state` if the lifecycle allows it ([`check_transition`]). Setting
    /// the current state is a no-op; leaving `promoted` is [`Error::Promoted`], any other refused move
    /// [`Error::LinkTransition`]. The link's partitions keep their own states.
    pub fn set_link_state(&mut self, name: &str, state: LinkState) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut link = load_link(&tx, name)?;
        if !check_transition(name, link.state, state)? {
            return Ok(link);
        }
        if state == LinkState::Deleted {
            link.deleted_at_ms = Some(now_ms());
            tx.execute(
                "UPDATE links SET deleted_at_ms = ?2 WHERE name = ?1",
                params![name, link.deleted_at_ms],
            )?;
        } else {
            tx.execute("UPDATE links SET state = ?2 WHERE name = ?1", params![name, state])?;
        }
        let detail = format!("{} -> {}", link.state, state);
        insert_event(&tx, Subject::Link(name), EventKind::LinkStateChanged, &detail)?;
        tx.commit()?;
        link.state = state;
        Ok(link)
    }

    /// `active` → `paused`: shippers and appliers of the link stop moving data until [`Catalog::resume_link`].
    pub fn pause_link(&mut self, name: &str) -> Result<Link> {
        self.set_link_state(name, LinkState::Paused)
    }

    /// `paused` → `active`: the link catches up from where it stopped.
    pub fn resume_link(&mut self, name: &str) -> Result<Link> {
        self.set_link_state(name, LinkState::Active)
    }

    /// `active | paused` → `promoted`, terminal. Only the state: the files are installed into a target broker by
    /// `segmirror promote` (`applier::promote`), which also refuses a link that was not stopped.
    pub fn promote_link(&mut self, name: &str) -> Result<Link> {
        self.set_link_state(name, LinkState::Promoted)
    }

    /// → `deleted`: a tombstone that keeps the link's partitions and events; see [`Catalog::create_link_with_ends`]
    /// for when its name can be used again.
    pub fn delete_link(&mut self, name: &str) -> Result<Link> {
        self.set_link_state(name, LinkState::Deleted)
    }

    /// Replaces the topics regex of a live link (the long-running shipper re-reads it).
    pub fn set_topics_regex(&mut self, name: &str, topics_regex: &str) -> Result<Link> {
        self.set_link_regexes(name, Some(topics_regex), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::link_spec;
    use crate::{EventKind, PartitionKey};

    /// Every (from, to) pair: the whole table, against an independent statement of the rules.
    #[test]
    fn every_transition_follows_the_table() {
        use LinkState::*;
        for &from in LinkState::ALL {
            for &to in LinkState::ALL {
                let mut cat = Catalog::open_in_memory().unwrap();
                cat.create_link(&link_spec("l")).unwrap();
                // Reach `from` by an allowed path.
                match from {
                    Active => {}
                    Paused | Promoted | Deleted => {
                        cat.set_link_state("l", from).unwrap();
                    }
                }
                let events_before = cat.events(None, 100).unwrap().len();
                let result = cat.set_link_state("l", to);
                // README: "Asking for the current state again is a no-op; any other move is refused".
                let expected_ok = from == to || !matches!((from, to), (Deleted, _) | (Promoted, Active | Paused));
                assert_eq!(result.is_ok(), expected_ok, "{from} -> {to}: {result:?}");
                let now = cat.link("l").unwrap().state;
                let wrote = cat.events(None, 100).unwrap().len() - events_before;
                if expected_ok {
                    assert_eq!(now, to, "{from} -> {to}");
                    assert_eq!(
                        wrote,
                        usize::from(from != to),
                        "{from} -> {to}: one event per real change"
                    );
                } else {
                    assert_eq!(now, from, "{from} -> {to}: a refusal changes nothing");
                    assert_eq!(wrote, 0);
                    let msg = result.unwrap_err().to_string();
                    assert!(
                        msg.contains(from.as_str()),
                        "{from} -> {to}: the error names the state: {msg}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_named_functions_move_the_state() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        assert_eq!(cat.pause_link("l").unwrap().state, LinkState::Paused);
        assert_eq!(cat.resume_link("l").unwrap().state, LinkState::Active);
        assert_eq!(cat.promote_link("l").unwrap().state, LinkState::Promoted);
        let deleted = cat.delete_link("l").unwrap();
        assert_eq!(deleted.state, LinkState::Deleted);
        assert!(deleted.deleted_at_ms.is_some());
        let reread = cat.link("l").unwrap();
        assert_eq!(reread.state, LinkState::Deleted);
        assert_eq!(reread.deleted_at_ms, deleted.deleted_at_ms);
        // Deleting it again is a no-op: the tombstone keeps its time and no event is written.
        let events = cat.events(None, 100).unwrap().len();
        let again = cat.delete_link("l").unwrap();
        assert_eq!(
            (again.state, again.deleted_at_ms),
            (LinkState::Deleted, deleted.deleted_at_ms)
        );
        assert_eq!(cat.events(None, 100).unwrap().len(), events);
        match cat.resume_link("l") {
            Err(Error::LinkTransition { link, from, action }) => {
                assert_eq!((link.as_str(), from, action), ("l", LinkState::Deleted, "resume it"))
            }
            other => panic!("expected LinkTransition, got {other:?}"),
        }
        assert!(matches!(cat.pause_link("zz"), Err(Error::NotFound { .. })));
    }

    #[test]
    fn topics_regex_changes_are_recorded_and_refused_once_deleted() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        assert_eq!(cat.set_topics_regex("l", "new-.*").unwrap().topics_regex, "new-.*");
        assert_eq!(cat.link("l").unwrap().topics_regex, "new-.*");
        let l = cat.set_link_regexes("l", None, Some(Some("g.*"))).unwrap();
        assert_eq!(
            (l.topics_regex.as_str(), l.groups_regex.as_deref()),
            ("new-.*", Some("g.*"))
        );
        let kinds: Vec<_> = cat.events(None, 2).unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::LinkConfigChanged, EventKind::LinkConfigChanged]);
        // Unchanged: no event.
        cat.set_topics_regex("l", "new-.*").unwrap();
        assert_eq!(cat.events(None, 100).unwrap().len(), 3);
        cat.delete_link("l").unwrap();
        assert!(matches!(
            cat.set_topics_regex("l", "x"),
            Err(Error::LinkTransition {
                from: LinkState::Deleted,
                ..
            })
        ));
    }

    #[test]
    fn a_deleted_name_is_reused_only_when_the_tombstone_holds_nothing() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let first = cat.create_link(&link_spec("empty")).unwrap();
        cat.delete_link("empty").unwrap();
        let again = cat.create_link(&link_spec("empty")).unwrap();
        assert_eq!(again.state, LinkState::Active);
        assert_ne!(again.id, first.id, "a recreated link is another link");
        assert_eq!(again.id.len(), 32);
        assert!(again.id.bytes().all(|b| b.is_ascii_hexdigit()));

        cat.create_link(&link_spec("used")).unwrap();
        cat.upsert_partition(&PartitionKey::new("used", "orders", 0), "src-id", 0)
            .unwrap();
        cat.delete_link("used").unwrap();
        match cat.create_link(&link_spec("used")) {
            Err(e @ Error::NameOfDeletedLink { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("\"used\"") && msg.contains("1 mirror partition"), "{msg}");
            }
            other => panic!("expected NameOfDeletedLink, got {other:?}"),
        }
        assert_eq!(
            cat.link("used").unwrap().state,
            LinkState::Deleted,
            "the tombstone stays"
        );
        // A live name is still simply taken.
        assert!(matches!(
            cat.create_link(&link_spec("empty")),
            Err(Error::AlreadyExists { .. })
        ));
    }
}
