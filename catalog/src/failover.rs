//! The journal of `segmirror failover`: per link, which steps of the failover started, how often, and which
//! finished, with what outcome.
//!
//! Why in the catalog: a failover runs on the applier's host against the mirror this catalog describes, and must
//! survive a crash of the process at any step; the catalog is already the durable, fsynced memory of that host, and
//! a step's row is written in the same file as the link state it changes (`promoted`) and the partitions `promote`
//! marks. The steps themselves are the tool's (their names and order); this module only records them: a finished
//! step is never started again, an unfinished one is started again with its attempts counted, so a rerun skips
//! what is done and redoes, idempotently, the step that was cut short.

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use segment_format::now_ms;
use serde::Serialize;

use crate::error::Result;
use crate::event::{insert_event, EventKind, Subject};
use crate::link::load_link;
use crate::Catalog;

/// One step of a link's failover, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailoverStep {
    pub step: String,
    /// The step's place in the sequence (the tool's order).
    pub position: u32,
    /// When it first started.
    pub started_at_ms: i64,
    /// 1, plus one for each rerun that found it unfinished.
    pub attempts: u32,
    pub finished_at_ms: Option<i64>,
    /// What the step reported when it finished.
    pub outcome: String,
}

impl FailoverStep {
    pub fn finished(&self) -> bool {
        self.finished_at_ms.is_some()
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FailoverStep> {
    Ok(FailoverStep {
        step: r.get(0)?,
        position: r.get(1)?,
        started_at_ms: r.get(2)?,
        attempts: r.get(3)?,
        finished_at_ms: r.get(4)?,
        outcome: r.get(5)?,
    })
}

const COLUMNS: &str = "step, position, started_at_ms, attempts, finished_at_ms, outcome";

impl Catalog {
    /// The link's failover journal, in step order (empty: no failover started).
    pub fn failover_steps(&self, link: &str) -> Result<Vec<FailoverStep>> {
        load_link(&self.conn, link)?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM failover_steps WHERE link = ?1 ORDER BY position, started_at_ms"
        ))?;
        let rows = stmt.query_map([link], row)?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Record that `step` (at `position`) starts: a new row, or one more attempt of an unfinished one. A finished
    /// step is returned unchanged (the caller skips it).
    pub fn start_failover_step(&mut self, link: &str, step: &str, position: u32) -> Result<FailoverStep> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, link)?;
        let select = format!("SELECT {COLUMNS} FROM failover_steps WHERE link = ?1 AND step = ?2");
        let recorded = tx.query_row(&select, params![link, step], row).optional()?;
        let detail = match &recorded {
            Some(s) if s.finished() => return Ok(s.clone()),
            Some(s) => {
                tx.execute(
                    "UPDATE failover_steps SET attempts = attempts + 1 WHERE link = ?1 AND step = ?2",
                    params![link, step],
                )?;
                format!("{step}: started again (attempt {})", s.attempts + 1)
            }
            None => {
                tx.execute(
                    "INSERT INTO failover_steps (link, step, position, started_at_ms, attempts) VALUES (?1, ?2, ?3, ?4, 1)",
                    params![link, step, position, now_ms()],
                )?;
                format!("{step}: started")
            }
        };
        insert_event(&tx, Subject::Link(link), EventKind::FailoverStep, &detail)?;
        let now = tx.query_row(&select, params![link, step], row)?;
        tx.commit()?;
        Ok(now)
    }

    /// Record that `step` finished with `outcome` (a step not started, or already finished, is an
    /// [`crate::Error::Invalid`]: the caller's sequence is wrong).
    pub fn finish_failover_step(&mut self, link: &str, step: &str, outcome: &str) -> Result<FailoverStep> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, link)?;
        let changed = tx.execute(
            "UPDATE failover_steps SET finished_at_ms = max(?3, started_at_ms), outcome = ?4
             WHERE link = ?1 AND step = ?2 AND finished_at_ms IS NULL",
            params![link, step, now_ms(), outcome],
        )?;
        if changed != 1 {
            return Err(crate::Error::Invalid {
                what: "failover step",
                message: format!("link {link:?}: step {step:?} is not started, or already finished"),
            });
        }
        insert_event(
            &tx,
            Subject::Link(link),
            EventKind::FailoverStep,
            &format!("{step}: finished: {outcome}"),
        )?;
        let select = format!("SELECT {COLUMNS} FROM failover_steps WHERE link = ?1 AND step = ?2");
        let now = tx.query_row(&select, params![link, step], row)?;
        tx.commit()?;
        Ok(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::link_spec;

    #[test]
    fn a_rerun_skips_finished_steps_and_counts_attempts_of_unfinished_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut cat = Catalog::open(&path).unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        assert!(cat.failover_steps("l").unwrap().is_empty());
        let drain = cat.start_failover_step("l", "drain", 0).unwrap();
        assert_eq!((drain.attempts, drain.finished()), (1, false));
        cat.finish_failover_step("l", "drain", "3 partitions drained").unwrap();
        cat.start_failover_step("l", "topics", 1).unwrap();
        drop(cat);
        // A crash during `topics`; the rerun opens the catalog again.
        let mut cat = Catalog::open(&path).unwrap();
        let again = cat.start_failover_step("l", "drain", 0).unwrap();
        assert!(again.finished(), "a finished step is returned as is");
        assert_eq!((again.attempts, again.outcome.as_str()), (1, "3 partitions drained"));
        let topics = cat.start_failover_step("l", "topics", 1).unwrap();
        assert_eq!((topics.attempts, topics.finished()), (2, false));
        cat.finish_failover_step("l", "topics", "2 created").unwrap();
        let err = cat
            .finish_failover_step("l", "topics", "again")
            .unwrap_err()
            .to_string();
        assert!(err.contains("topics") && err.contains("already finished"), "{err}");
        let err = cat.finish_failover_step("l", "install", "x").unwrap_err().to_string();
        assert!(err.contains("not started"), "{err}");
        let steps: Vec<(String, u32, bool)> = cat
            .failover_steps("l")
            .unwrap()
            .into_iter()
            .map(|s| (s.step.clone(), s.attempts, s.finished()))
            .collect();
        assert_eq!(steps, [("drain".into(), 1, true), ("topics".into(), 2, true)]);
        assert!(cat.failover_steps("nope").is_err(), "an unknown link is an error");
    }
}
