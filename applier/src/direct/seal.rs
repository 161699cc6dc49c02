//! Sealing the active segment: its size and SHA-256 checked against the source's, its companions (offset, time and
//! transaction index) checked and placed, the catalog told, then the state file says sealed. And the rebuilding of
//! an index the shipper sent as a digest only.

use segment_format::closed_log;

use super::kept::recorded_closed_log;
use super::*;
use crate::segment_log;

impl Inner {
    pub(super) fn apply_seal(&mut self, seal: &SegmentSeal) -> TailResult<()> {
        let p = &seal.partition;
        let name = tp_name(p);
        let bad = |reason: String| TailError::BadSeal {
            partition: name.clone(),
            segment: seal.segment_base,
            reason,
        };
        let Some(s) = self.states.get(&name).cloned() else {
            return Err(bad("nothing of the partition is durable".into()));
        };
        if s.topic_id != p.topic_id || s.segment_base != seal.segment_base || s.position != seal.final_size {
            return Err(bad(format!(
                "final size {} but the durable bytes end at segment {} position {}",
                seal.final_size, s.segment_base, s.position
            )));
        }
        if s.sealed {
            return Ok(());
        }
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(p, None)?;
        }
        // The seal's companions replace the ones kept while the segment was active; their running digest, when
        // they cover the whole segment, spares reading it again (`companions`).
        let path = self.log_path(&p.topic, p.partition, seal.segment_base);
        let sealing = self.sealing(&name, seal.segment_base, s.position, &path)?;
        #[cfg(test)]
        {
            self.running_seals += u64::from(sealing.is_some());
        }
        let (size, sha) = match &sealing {
            Some(kept) => (s.position, kept.sha256),
            None => {
                let on_disk = digest_file(&path)?;
                (on_disk.size, on_disk.sha256.0)
            }
        };
        // Rebuilt as `rebuild_index_with` would, from what was kept when the interval is the one kept at.
        let rebuilt = |kind: CompanionKind, interval: u64| -> TailResult<Vec<u8>> {
            match (&sealing, kind) {
                (Some(kept), CompanionKind::OffsetIndex) if interval == REBUILD_INDEX_INTERVAL_BYTES => {
                    Ok(kept.offsets.clone())
                }
                (Some(kept), CompanionKind::TimeIndex) if interval == REBUILD_INDEX_INTERVAL_BYTES => {
                    Ok(kept.times.clone())
                }
                _ => rebuild_index_with(&path, seal.segment_base, kind, interval),
            }
        };
        if size != seal.final_size {
            return Err(bad(format!(
                "{} holds {size} bytes, not {}",
                path.display(),
                seal.final_size
            )));
        }
        if sha != seal.log_sha256 {
            let differs = format!(
                "SHA-256 of {} is {}, the seal says {}",
                path.display(),
                hex(&sha),
                hex(&seal.log_sha256)
            );
            // The mirror holds bytes the source does not (a forged chunk, valid batches, applied before this seal
            // could show it): quarantined like a source truncation, and the segment resent from its start.
            let done = match self.quarantine_segment(&s, p) {
                Ok(done) => done,
                // The bytes cannot even be read as batches: left as they are for an operator (the seal stays
                // refused, the session ends, nothing more is appended to the segment).
                Err(e) => format!("not quarantined: {e}"),
            };
            return Err(bad(format!("{differs}; {done}")));
        }
        // Companions: all checked before any is written.
        let mut files = Vec::with_capacity(seal.companions.len());
        for (i, c) in seal.companions.iter().enumerate() {
            if seal.companions[..i].iter().any(|o| o.kind == c.kind) {
                return Err(bad(format!("companion {:?} listed twice", c.kind)));
            }
            let bytes = match (&c.inline, c.kind) {
                (Some(b), _) => b.to_vec(),
                (None, CompanionKind::OffsetIndex | CompanionKind::TimeIndex) => rebuilt(c.kind, rebuild_interval(c))?,
                (None, kind) => {
                    return Err(bad(format!(
                        "companion {kind:?} sent as a digest only; it cannot be rebuilt"
                    )))
                }
            };
            let digest = sha256(&bytes);
            if bytes.len() as u64 != c.size || digest != c.sha256 {
                return Err(bad(format!(
                    "companion {:?}{}: {} bytes SHA-256 {}, the seal says {} bytes SHA-256 {}",
                    c.kind,
                    match c.inline {
                        Some(_) => String::new(),
                        None => format!(" (rebuilt) with index.interval.bytes {}", rebuild_interval(c)),
                    },
                    bytes.len(),
                    hex(&digest),
                    c.size,
                    hex(&c.sha256)
                )));
            }
            let kind =
                match c.kind {
                    CompanionKind::OffsetIndex => SegmentFileKind::Index,
                    CompanionKind::TimeIndex => SegmentFileKind::TimeIndex,
                    CompanionKind::TxnIndex => SegmentFileKind::TxnIndex,
                    CompanionKind::ProducerSnapshot => return Err(bad(
                        "a producer snapshot companion cannot be placed: it is named after the next segment's base, \
                         which a version 1 seal does not carry"
                            .into(),
                    )),
                };
            files.push((kind, bytes));
        }
        let pdir = self.partition_dir(&p.topic, p.partition);
        // An offset or time index the seal does not carry (the broker had none) is rebuilt as a rolled segment's
        // rather than left as the appender kept it while active (`companions`: a time index without its final
        // entry); the appender's `.txnindex` stays (its entries are the broker's rule).
        for (kind, companion) in [
            (SegmentFileKind::Index, CompanionKind::OffsetIndex),
            (SegmentFileKind::TimeIndex, CompanionKind::TimeIndex),
        ] {
            if !files.iter().any(|(k, _)| *k == kind) && pdir.join(segment_file_name(seal.segment_base, kind)).exists()
            {
                files.push((kind, rebuilt(companion, REBUILD_INDEX_INTERVAL_BYTES)?));
            }
        }
        for (kind, bytes) in files {
            write_atomically(&pdir.join(segment_file_name(seal.segment_base, kind)), &bytes)?;
        }
        if let Some(catalog) = &mut self.catalog {
            // After the bytes and companions are durable, before the state file says sealed (`catalog`).
            let next_offset = s
                .next_offset
                .filter(|_| s.position > 0)
                .ok_or_else(|| bad("the segment holds no batch".into()))?;
            // As an install records it: from the batches this process appended, else read from the file. The
            // segment's log from the closed log the appender kept of it, else from the file too.
            let (mut txn_ends, closings) = match &sealing {
                Some(kept) => {
                    // A closed log that cannot be read only leaves the segment's log without its entries.
                    let closed_log = mirror::closed_log_file(&self.root, &name);
                    let closed = recorded_closed_log(&closed_log, kept.closed_log).unwrap_or_else(|e| {
                        let path = closed_log.display();
                        tracing::warn!(%path, error = %e, "closed log unreadable at a seal: segment log left empty");
                        None
                    });
                    let closed = closed.unwrap_or_default();
                    let closings = closed_log::segment_closings_from(&closed, seal.segment_base, next_offset);
                    (kept.txn_ends.clone(), closings)
                }
                None => segment_format::txn_ends::logged_of_log(&path, next_offset)?,
            };
            if let Some(ends) = &mut txn_ends {
                let written = segment_log::write(&pdir, seal.segment_base, &closings).map(Some);
                ends.log = segment_log::recorded(segment_log::kept(&pdir, seal.segment_base, written));
            }
            let record = catalog::SealRecord {
                segment_base: seal.segment_base,
                next_offset,
                size,
                sha256: sha,
                txn_ends,
            };
            catalog.record_seal(p, &record)?;
        }
        self.record(name, PartitionState { sealed: true, ..s })
    }
}

/// The interval a digest-only index companion is rebuilt with: its own, else [`REBUILD_INDEX_INTERVAL_BYTES`].
pub(crate) fn rebuild_interval(c: &Companion) -> u64 {
    c.index_interval.map_or(REBUILD_INDEX_INTERVAL_BYTES, u64::from)
}

/// Rebuilds an offset or time index from the sealed log with [`REBUILD_INDEX_INTERVAL_BYTES`].
#[cfg(test)]
pub(crate) fn rebuild_index(path: &Path, base: i64, kind: CompanionKind) -> TailResult<Vec<u8>> {
    rebuild_index_with(path, base, kind, REBUILD_INDEX_INTERVAL_BYTES)
}

/// Rebuilds an offset or time index from the sealed log with `interval` (`index.interval.bytes`).
pub(crate) fn rebuild_index_with(path: &Path, base: i64, kind: CompanionKind, interval: u64) -> TailResult<Vec<u8>> {
    let mut log = LogFile::open(path)?;
    let mut offsets = OffsetIndexBuilder::new(base, interval);
    let mut times = TimeIndexBuilder::new(base, interval);
    let mut failed = None;
    log.scan(|frame| {
        let r = match kind {
            CompanionKind::OffsetIndex => offsets.push(&frame.info),
            _ => times.push(&frame.info),
        };
        match r {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(format!("{e:?}"));
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(reason) = failed {
        return Err(TailError::BadState {
            path: path.to_path_buf(),
            reason: format!("rebuilding the {kind:?}: {reason}"),
        });
    }
    Ok(match kind {
        CompanionKind::OffsetIndex => offsets.to_bytes(),
        _ => {
            times.seal();
            times.to_bytes()
        }
    })
}
