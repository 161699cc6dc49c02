//! Reading a broker's segments without crowding out its page cache.
//!
//! A seed reads a broker's older segments once, from end to end, twice in fact (the check, then the upload copies
//! the pages the check brought in). Afterwards those pages are of no use to the broker: left cached, they push out
//! what its consumers read (the active segment and the recent ones), and on a VM whose free memory goes back to
//! the host (virtio-balloon free page reporting, the norm in clouds) every page the seed takes next is a fresh one,
//! which costs a fault in the host (docs/decisions/0042-drop-written-pages.md).
//! So before reading a segment's `.log` the seed notes which of its pages are not cached
//! ([`CacheFootprint::before_reading`]), and once the segment is shipped it drops those alone
//! ([`CacheFootprint::release`]): the broker's own cached pages stay where they were. Both are hints: a failure
//! changes nothing, and a page a consumer brought in meanwhile is at worst read from the disk again. Blocking.

use std::path::{Path, PathBuf};

use segment_format::durable::{drop_cached_range, uncached_ranges};
use segment_format::open::open_regular;

/// The pages of one source file that were not in the page cache before a driver read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheFootprint {
    path: PathBuf,
    /// `(start, length)` byte ranges, whole pages.
    uncached: Vec<(u64, u64)>,
}

impl CacheFootprint {
    /// Note which pages of `path` are not cached now. A file that cannot be opened as a regular file, or asked,
    /// gives an empty footprint (nothing will be dropped): bounding the segment reports what is wrong with it.
    pub fn before_reading(path: &Path) -> CacheFootprint {
        let Ok((file, meta)) = open_regular(path) else {
            return CacheFootprint::default();
        };
        match uncached_ranges(&file, meta.len()) {
            Ok(uncached) => CacheFootprint {
                path: path.to_path_buf(),
                uncached,
            },
            Err(_) => CacheFootprint::default(),
        }
    }

    /// Bytes that were not cached.
    pub fn uncached_bytes(&self) -> u64 {
        self.uncached.iter().map(|(_, length)| length).sum()
    }

    /// Drop from the page cache what was not cached before the read (its clean pages).
    pub fn release(&self) {
        if self.uncached.is_empty() {
            return;
        }
        let Ok((file, _)) = open_regular(&self.path) else {
            return;
        };
        for &(at, length) in &self.uncached {
            drop_cached_range(&file, at, length);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use segment_format::durable::{cached_pages, drop_cached};
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_footprint_drops_what_the_read_brought_in_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let len = 1u64 << 20;
        std::fs::write(&path, vec![5u8; len as usize]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        drop_cached(&file, len);
        // The broker's consumers read the last quarter.
        let mut tail = vec![0u8; (len / 4) as usize];
        file.read_exact_at(&mut tail, len - len / 4).unwrap();
        let kept = cached_pages(&file, len).unwrap();
        assert!(kept > 0);

        let footprint = CacheFootprint::before_reading(&path);
        assert_eq!(footprint.uncached_bytes(), len - len / 4);
        assert_eq!(std::fs::read(&path).unwrap().len() as u64, len, "the seed's read");
        assert!(cached_pages(&file, len).unwrap() > kept);
        footprint.release();
        assert_eq!(
            cached_pages(&file, len).unwrap(),
            kept,
            "only the broker's pages stay cached"
        );
    }

    #[test]
    fn a_file_that_is_not_regular_gives_an_empty_footprint() {
        let dir = tempfile::tempdir().unwrap();
        let footprint = CacheFootprint::before_reading(dir.path());
        assert_eq!(footprint, CacheFootprint::default());
        footprint.release();
        assert_eq!(
            CacheFootprint::before_reading(&dir.path().join("gone")).uncached_bytes(),
            0
        );
    }
}
