//! The aborted transactions of a `read_committed` fetch from the bucket, read from the segments' `.txnindex` files
//! only.
//!
//! Kafka lists, for a fetched range, every aborted transaction recorded in the `.txnindex` of the segment holding
//! the range and of the segments after it, until an entry whose last stable offset reaches the range's end (an
//! abort's marker can lie segments after its data). The replica does the same without fetching those segments'
//! `.log`s: a segment cached whole has its `.txnindex` beside it, any other's is fetched on its own (a few bytes,
//! verified against the manifest like every object), and a segment whose manifest lists none has no abort.

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::manifest::Manifest;

use super::by_chunks::{read_error, Held};
use super::{storage, BucketReplica, Partition};
use crate::mirror::segments::{self, Scan};
use crate::replica::{AbortedTxn, ReadError};

impl BucketReplica {
    /// The aborted transactions a `read_committed` fetch of `[from, upper)` in `segment` must list (see the module
    /// docs), looking no further than the high watermark `end`.
    pub(super) fn aborted(
        &self,
        p: &Partition,
        segment: &Manifest,
        from: i64,
        upper: i64,
        end: i64,
    ) -> Result<Vec<AbortedTxn>, ReadError> {
        let mut found = Vec::new();
        for m in p.view.segments.range(segment.base_offset..).map(|(_, m)| m) {
            if m.base_offset >= end {
                break;
            }
            if !m.all_files().any(|f| f.name.kind == SegmentFileKind::TxnIndex) {
                continue;
            }
            let whole = (!self.cache.by_chunks(m))
                .then(|| self.cache.cached(&p.dir_name, m))
                .flatten();
            let (path, _held) = match whole {
                Some(pin) => (
                    self.cache
                        .partition_dir(&p.dir_name)
                        .join(segment_file_name(m.base_offset, SegmentFileKind::TxnIndex)),
                    Held::Whole { _pin: pin },
                ),
                None => {
                    let companion = self
                        .runtime
                        .block_on(
                            self.cache
                                .ensure_companion(&*self.source, &p.dir_name, m, SegmentFileKind::TxnIndex),
                        )
                        .map_err(read_error)?;
                    match companion {
                        Some((path, pin)) => (path, Held::Part { _pin: pin }),
                        None => continue,
                    }
                }
            };
            let scan = segments::aborted_in_index(&path, from, upper, &mut found).map_err(|e| storage(&path, e))?;
            if scan == Scan::Done {
                break;
            }
        }
        Ok(found)
    }
}
