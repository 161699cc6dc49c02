//! The seed's memory of what it found in active segments, so that a rerun with nothing new reads nothing.
//!
//! Why: the active segment is the one a seed cannot judge from a directory listing. Its shipped version is a
//! prefix of complete batches, and telling whether that prefix is still the whole of what the source holds takes a
//! scan of the file (verify, then rebuild its indexes): on a topic whose partitions are one big active segment each
//! (Kafka's 1 GiB `segment.bytes`), a rerun with nothing to ship read every byte again (0.7 s and 1.4
//! CPU s for 4 GiB). Sealed segments are already judged by their listed size and never read when shipped.
//!
//! What is remembered is a fact about the *source*, never about the bucket: "the `.log` at this path, with this
//! [`FileIdentity`] (device, inode, length, modification and status-change times to the nanosecond), holds
//! complete CRC-valid batches up to byte `prefix`, ending before offset `next`". A rerun that finds the same
//! identity takes the fact instead of scanning, and decides against the bucket exactly as it would after a scan
//! (the bucket is untrusted, and is not believed any more than before: it is only compared with the source's
//! version, and what the seed does on a match is nothing). Any write to the file moves its length or times, a
//! swapped-in file has another inode; a fact whose identity differs is not used and the segment is scanned.
//!
//! Racy stamps (git's "racy clean" problem): file times are kept at the kernel's coarse clock (a few ms), so a
//! write in the same tick as the identity was taken could leave the times unchanged. A same-length rewrite in
//! one tick is the only change that escapes, but correctness comes first: a fact is recorded only when the file's
//! times were already [`RACY_MARGIN`] old when its identity was taken, so any later write lands on a later tick.
//! A segment written within that margin before a seed is scanned again on the next run.
//!
//! The memory is local state of the machine that reads the source (`--memory FILE`): a JSON document written
//! atomically (temporary file, fsync, rename) at the end of a run, read size-capped ([`MAX_MEMORY_BYTES`]) at the
//! start of the next. It is a cache: a missing, unreadable or malformed file is a warning and an empty memory
//! (the rerun scans, as without one); facts of files that no longer exist are dropped when it is written. The
//! verification depth a fact was found with is recorded: a `--deep` run believes only facts a deep check found.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::verify::VerifyOptions;
use serde::{Deserialize, Serialize};

use crate::source::{file_identity, FileIdentity};

/// The `format` of a memory document; another format is ignored (scanned again), never misread.
pub const MEMORY_FORMAT: &str = "segmirror.seed-memory.v1";

/// Largest memory document read (~150 bytes per active segment: some 400,000 partitions), so a file that is not
/// ours cannot make the seed allocate without bound.
pub const MAX_MEMORY_BYTES: u64 = 64 << 20;

/// How old a file's times must be when its identity is taken for a fact about it to be recorded (see the module
/// doc): far above the kernel's coarse clock tick (1-10 ms) and any skew between the clock that stamps files and
/// the one read here (the same kernel clock for a local file system).
pub const RACY_MARGIN: Duration = Duration::from_secs(2);

/// What a scan found in an active segment's `.log` with `identity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ActiveFact {
    pub identity: FileIdentity,
    /// Bytes of complete, CRC-valid batches from the start of the file.
    pub prefix: u64,
    /// One past the last offset in the prefix (the segment's base if it is empty).
    pub next: i64,
    /// Found with `--deep`.
    pub deep: bool,
    /// Found with strict tail checking.
    pub strict: bool,
}

impl ActiveFact {
    /// Bytes after the prefix (a batch being written, or a preallocated tail).
    pub fn excluded_tail(&self) -> u64 {
        self.identity.len.saturating_sub(self.prefix)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Document {
    format: String,
    /// By absolute `.log` path (UTF-8 paths only; others are not remembered), so a run given `--log-dir` relative
    /// to another working directory finds the same facts.
    active: BTreeMap<String, ActiveFact>,
}

/// The facts one run starts from and adds to (see the module doc).
#[derive(Debug, Default)]
pub struct SeedMemory {
    file: Option<PathBuf>,
    active: Mutex<BTreeMap<String, ActiveFact>>,
}

impl SeedMemory {
    /// No file: facts are remembered for the run only.
    pub fn in_memory() -> SeedMemory {
        SeedMemory::default()
    }

    /// The memory kept in `file` (empty if it does not exist yet; a warning and empty if it cannot be used).
    pub fn load(file: &Path) -> SeedMemory {
        let active = match read_document(file) {
            Ok(Some(doc)) if doc.format == MEMORY_FORMAT => doc.active,
            Ok(Some(doc)) => {
                tracing::warn!(file = %file.display(), format = doc.format, expected = MEMORY_FORMAT, "seed memory of another format ignored: active segments are scanned again");
                BTreeMap::new()
            }
            Ok(None) => BTreeMap::new(),
            Err(reason) => {
                tracing::warn!(file = %file.display(), reason, "seed memory unusable, ignored: active segments are scanned again");
                BTreeMap::new()
            }
        };
        SeedMemory {
            file: Some(file.to_path_buf()),
            active: Mutex::new(active),
        }
    }

    fn facts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ActiveFact>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fact about `log` if the file is still exactly as it was when the fact was found, and it was found with
    /// at least the verification `verify` asks for. One `stat`.
    pub(crate) fn recall(&self, log: &Path, verify: &VerifyOptions) -> Option<ActiveFact> {
        let fact = *self.facts().get(&key(log)?)?;
        if (verify.is_deep() && !fact.deep) || (verify.is_strict() && !fact.strict) {
            return None;
        }
        (file_identity(log)? == fact.identity).then_some(fact)
    }

    /// Record what a scan found, if the file's times were old enough when its identity was taken (see the module
    /// doc); otherwise forget what was known about `log`.
    pub(crate) fn remember(&self, log: &Path, fact: ActiveFact, identity_taken: SystemTime) {
        let Some(key) = key(log) else { return };
        let taken_ns = identity_taken
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let margin = i64::try_from(RACY_MARGIN.as_nanos()).unwrap_or(i64::MAX);
        let newest = fact.identity.mtime_ns.max(fact.identity.ctime_ns);
        let mut facts = self.facts();
        if newest < taken_ns.saturating_sub(margin) {
            facts.insert(key, fact);
        } else {
            facts.remove(&key);
        }
    }

    /// Write the memory to its file (no file: nothing to do), keeping only facts about files that still exist.
    pub fn save(&self) -> std::io::Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let active: BTreeMap<String, ActiveFact> = self
            .facts()
            .iter()
            .filter(|(path, _)| Path::new(path).exists())
            .map(|(p, f)| (p.clone(), *f))
            .collect();
        let doc = Document {
            format: MEMORY_FORMAT.to_string(),
            active,
        };
        let bytes = serde_json::to_vec(&doc).map_err(std::io::Error::other)?;
        let dir = match file.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut temp = tempfile::Builder::new().prefix(".seed-memory-").tempfile_in(dir)?;
        temp.write_all(&bytes)?;
        temp.as_file().sync_data()?;
        temp.persist(file).map_err(|e| e.error)?;
        Ok(())
    }
}

/// The key of `log`: its absolute path (joined to the working directory, no file system access), if UTF-8.
fn key(log: &Path) -> Option<String> {
    std::path::absolute(log).ok()?.to_str().map(str::to_string)
}

/// The document in `file`; `Ok(None)` if there is none.
fn read_document(file: &Path) -> Result<Option<Document>, String> {
    let f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_MEMORY_BYTES {
        return Err(format!("{} bytes, over the {MAX_MEMORY_BYTES} read", meta.len()));
    }
    let mut bytes = Vec::new();
    f.take(MAX_MEMORY_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map(Some).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use segment_format::verify::{Depth, Strictness};

    use super::*;

    fn fact_for(log: &Path) -> ActiveFact {
        ActiveFact {
            identity: file_identity(log).unwrap(),
            prefix: 3,
            next: 7,
            deep: false,
            strict: false,
        }
    }

    fn later() -> SystemTime {
        SystemTime::now() + RACY_MARGIN * 2
    }

    #[test]
    fn a_fact_is_believed_only_while_the_file_is_unchanged_and_survives_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory_file = dir.path().join("memory.json");
        let memory = SeedMemory::load(&memory_file);
        let fact = fact_for(&log);
        let shallow = VerifyOptions::default();
        memory.remember(&log, fact, later());
        assert_eq!(memory.recall(&log, &shallow), Some(fact));
        // A file named relative to the working directory has the key of its absolute name.
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            key(Path::new("kafka/t-0/00000000000000000000.log")),
            key(&cwd.join("kafka/t-0/00000000000000000000.log"))
        );
        assert!(key(Path::new("x.log")).unwrap().starts_with('/'));
        // A deep run does not believe a shallow fact.
        let deep = VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Lenient,
        };
        assert_eq!(memory.recall(&log, &deep), None);
        memory.save().unwrap();
        let reloaded = SeedMemory::load(&memory_file);
        assert_eq!(reloaded.recall(&log, &shallow), Some(fact));
        // An append moves the length: not believed.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"e")
            .unwrap();
        assert_eq!(reloaded.recall(&log, &shallow), None);
        // A file swapped in under the same name with the same length and times: another inode.
        let fresh = fact_for(&log);
        reloaded.remember(&log, fresh, later());
        let other = dir.path().join("other");
        std::fs::write(&other, b"abcde").unwrap();
        let times = std::fs::File::open(&log)
            .unwrap()
            .metadata()
            .unwrap()
            .modified()
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(times)
            .unwrap();
        std::fs::rename(&other, &log).unwrap();
        assert_eq!(reloaded.recall(&log, &shallow), None);
    }

    #[test]
    fn a_fact_about_a_file_written_just_before_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory = SeedMemory::in_memory();
        memory.remember(&log, fact_for(&log), SystemTime::now());
        assert_eq!(memory.recall(&log, &VerifyOptions::default()), None);
    }

    #[test]
    fn an_unusable_memory_file_is_an_empty_memory_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory_file = dir.path().join("memory.json");
        for junk in [&b"{not json"[..], br#"{"format":"other","active":{}}"#] {
            std::fs::write(&memory_file, junk).unwrap();
            let memory = SeedMemory::load(&memory_file);
            assert_eq!(memory.recall(&log, &VerifyOptions::default()), None);
            memory.remember(&log, fact_for(&log), later());
            memory.save().unwrap();
            assert!(SeedMemory::load(&memory_file)
                .recall(&log, &VerifyOptions::default())
                .is_some());
        }
        // Facts about files that are gone are dropped when saved.
        std::fs::remove_file(&log).unwrap();
        let memory = SeedMemory::load(&memory_file);
        memory.save().unwrap();
        assert!(!std::fs::read_to_string(&memory_file).unwrap().contains(".log"));
    }
}
