//! What `segmirror offsets commit` commits: each source group's offsets, never beyond the data installed for the
//! partition on the target.
//!
//! Why clamp: an offset beyond the partition's log end on the target is one whose records were not shipped before
//! the cut. A consumer resuming there would find `OFFSET_OUT_OF_RANGE` and reset by `auto.offset.reset` (re-reading
//! everything with `earliest`, skipping with `latest`); at the log end it reads the first record the target gets.
//! Every clamp is reported (group, topic, partition, wanted, committed). A partition with nothing installed is not
//! committed at all (there is nothing to resume on) and is reported too.
//!
//! The installed log end is read from the partition directories themselves (a mirror root or the target broker's
//! log dir: the same layout): the newest segment is scanned to its last complete batch, every CRC checked (a batch
//! cut short at its very end is one being appended, and is not counted).

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

use segment_format::dir::{DirKind, PartitionDir, PartitionDirName};
use segment_format::error::{Defect, Error as FormatError};
use segment_format::failover_source::GroupOffset;
use segment_format::log::LogFile;
use serde::Serialize;

/// Log end offsets of installed partitions, by (topic, partition).
pub type InstalledEnds = BTreeMap<(String, i32), i64>;

/// The log end offset of every partition directory under `dir` whose topic `keep` accepts (internal topics and
/// directories of another kind — `-delete`, `-future`, `-stray` — left out). Blocking file I/O.
pub fn installed_log_ends(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Result<InstalledEnds, FormatError> {
    let mut ends = InstalledEnds::new();
    let entries = std::fs::read_dir(dir).map_err(|e| FormatError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| FormatError::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Ok(parsed) = PartitionDirName::parse(&name) else {
            continue;
        };
        if parsed.kind != DirKind::Normal || parsed.is_internal() || !keep(&parsed.topic) || !entry.path().is_dir() {
            continue;
        }
        let end = partition_log_end(&entry.path())?;
        ends.insert((parsed.topic, parsed.partition), end);
    }
    Ok(ends)
}

/// The log end offset of one partition directory: after the last batch of its newest non-empty segment (the base
/// offset of an empty newest segment), every batch CRC of that segment checked.
pub fn partition_log_end(dir: &Path) -> Result<i64, FormatError> {
    let listed = PartitionDir::open(dir)?;
    let Some(newest) = listed.newest_segment() else {
        return Err(FormatError::BadInput {
            path: dir.to_path_buf(),
            reason: "no .log segment: nothing installed".into(),
        });
    };
    let mut log = LogFile::open(&newest.log)?;
    let mut last: Option<i64> = None;
    let mut bad_crc: Option<(u64, i64, Defect)> = None;
    let scanned = log.scan(|frame| {
        if let Some(defect) = frame.crc_defect() {
            bad_crc = Some((frame.crc_position(), frame.info.base_offset, defect));
            return ControlFlow::Break(());
        }
        last = Some(frame.info.last_offset);
        ControlFlow::Continue(())
    });
    match scanned {
        // A batch cut short at the end of the newest segment is one being appended (a running target broker, a
        // tail applier): what is installed is the complete prefix before it.
        Ok(_) | Err(FormatError::Incomplete { .. }) => {}
        Err(e) => return Err(e),
    }
    if let Some((position, offset, defect)) = bad_crc {
        return Err(FormatError::corrupt(&newest.log, position, Some(offset), defect));
    }
    Ok(last.map_or(newest.base_offset, |l| l.saturating_add(1)))
}

/// One offset of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// What the group committed on the source.
    pub wanted: i64,
    /// What is committed on the target (`None`: nothing, see `note`).
    pub commit: Option<i64>,
    pub metadata: String,
    /// Why `commit` differs from `wanted`.
    pub note: Option<String>,
}

impl PlannedOffset {
    pub fn clamped(&self) -> bool {
        self.commit.is_some_and(|c| c < self.wanted)
    }
}

/// The offsets to commit, by group, each clamped to its partition's installed log end.
pub fn plan(offsets: &[GroupOffset], installed: &InstalledEnds) -> BTreeMap<String, Vec<PlannedOffset>> {
    let mut groups: BTreeMap<String, Vec<PlannedOffset>> = BTreeMap::new();
    for o in offsets {
        let end = installed.get(&(o.topic.clone(), o.partition)).copied();
        let (commit, note) = match end {
            None => (
                None,
                Some("the partition is not installed on the target: nothing committed".to_string()),
            ),
            Some(end) if o.offset > end => (
                Some(end),
                Some(format!(
                    "clamped: {} is beyond the installed log end {end} (records not shipped before the cut)",
                    o.offset
                )),
            ),
            Some(_) => (Some(o.offset), None),
        };
        groups.entry(o.group.clone()).or_default().push(PlannedOffset {
            group: o.group.clone(),
            topic: o.topic.clone(),
            partition: o.partition,
            wanted: o.offset,
            commit,
            metadata: o.metadata.clone(),
            note,
        });
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::writer::{PartitionWriter, WriterConfig};

    fn offset(group: &str, topic: &str, partition: i32, offset: i64) -> GroupOffset {
        GroupOffset {
            group: group.into(),
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: Some(3),
            metadata: String::new(),
            commit_timestamp: 0,
        }
    }

    #[test]
    fn offsets_beyond_the_installed_end_are_clamped_and_missing_partitions_skipped() {
        let installed: InstalledEnds = [(("t".to_string(), 0), 10), (("t".to_string(), 1), 5)].into();
        let plan = plan(
            &[
                offset("a", "t", 0, 10),
                offset("a", "t", 1, 7),
                offset("b", "t", 0, 3),
                offset("b", "t", 2, 3),
            ],
            &installed,
        );
        let a = &plan["a"];
        assert_eq!(
            (a[0].commit, a[0].clamped()),
            (Some(10), false),
            "at the end exactly: kept"
        );
        assert_eq!((a[1].wanted, a[1].commit, a[1].clamped()), (7, Some(5), true));
        assert!(a[1].note.as_deref().unwrap().contains("clamped"));
        let b = &plan["b"];
        assert_eq!(b[0].commit, Some(3));
        assert_eq!(b[1].commit, None);
        assert!(b[1].note.as_deref().unwrap().contains("not installed"));
    }

    #[test]
    fn the_installed_log_end_is_read_from_the_partition_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = PartitionWriter::create(dir.path(), "orders", 1, 0, WriterConfig::default()).unwrap();
        for i in 0..3 {
            let mut batch = BatchBuilder::new(writer.next_offset());
            batch.records = (0..4)
                .map(|r| RecordSpec::new(r, 1_700_000_000_000).with_value(format!("v{i}-{r}")))
                .collect();
            writer.append(batch).unwrap();
        }
        writer.close().unwrap();
        std::fs::create_dir(dir.path().join("not-a-partition")).unwrap();
        let ends = installed_log_ends(dir.path(), &|_| true).unwrap();
        assert_eq!(ends, [(("orders".to_string(), 1), 12)].into());
        assert!(installed_log_ends(dir.path(), &|t| t != "orders").unwrap().is_empty());
        // A batch being appended (its first 30 bytes): the complete prefix counts.
        let log = dir.path().join("orders-1").join("00000000000000000000.log");
        let whole = std::fs::read(&log).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(&whole[..30]);
        std::fs::write(&log, &torn).unwrap();
        assert_eq!(
            installed_log_ends(dir.path(), &|_| true).unwrap()[&("orders".to_string(), 1)],
            12
        );
        std::fs::write(&log, &whole).unwrap();
        // A flipped byte inside a batch: the CRC check names the file.
        let mut bytes = std::fs::read(&log).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xff;
        std::fs::write(&log, bytes).unwrap();
        let e = installed_log_ends(dir.path(), &|_| true).unwrap_err().to_string();
        assert!(e.contains("00000000000000000000.log"), "{e}");
    }
}
