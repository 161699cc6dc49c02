//! Changing a link's `topics.regex` (issue 11 item 1, the admin API's `PUT /v1/links/{name}/topics-regex`).
//!
//! In a file of its own so that the link lifecycle growing in `link.rs` and this one setter merge without
//! touching each other. The regex is stored as given; the caller validates it (as for [`Catalog::create_link`]).

use rusqlite::{params, TransactionBehavior};

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::link::{load_link, Link, LinkState};
use crate::Catalog;

impl Catalog {
    /// Sets the topics regex of link `name`, recording the change as an event. Setting the current one is a no-op;
    /// a promoted link is refused ([`Error::Promoted`]): nothing of it is mirrored again.
    pub fn set_link_topics_regex(&mut self, name: &str, regex: &str) -> Result<Link> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut link = load_link(&tx, name)?;
        if link.topics_regex == regex {
            return Ok(link);
        }
        if link.state == LinkState::Promoted {
            return Err(Error::Promoted {
                entity: Entity::Link(name.to_owned()),
            });
        }
        tx.execute(
            "UPDATE links SET topics_regex = ?2 WHERE name = ?1",
            params![name, regex],
        )?;
        let detail = format!("topics {:?} -> {:?}", link.topics_regex, regex);
        insert_event(&tx, Subject::Link(name), EventKind::Note, &detail)?;
        tx.commit()?;
        link.topics_regex = regex.to_string();
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::link_spec;

    #[test]
    fn the_topics_regex_changes_and_is_recorded() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        let link = cat.set_link_topics_regex("a", "orders-.*").unwrap();
        assert_eq!(link.topics_regex, "orders-.*");
        assert_eq!(cat.link("a").unwrap().topics_regex, "orders-.*");
        let last = &cat.events(None, 1).unwrap()[0];
        assert!(last.detail.contains("orders-.*"), "{}", last.detail);
        assert!(matches!(
            cat.set_link_topics_regex("zz", "x"),
            Err(Error::NotFound { .. })
        ));
        cat.set_link_state("a", LinkState::Promoted).unwrap();
        assert!(matches!(
            cat.set_link_topics_regex("a", "y"),
            Err(Error::Promoted { entity: Entity::Link(n) }) if n == "a"
        ));
        assert_eq!(cat.link("a").unwrap().topics_regex, "orders-.*");
    }
}
