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
//! complete CRC-valid batches up to byte `prefix`, ending before offset `next`", with a [`TailCheck`]: the CRC-32C
//! of the bytes around the end of that prefix. A rerun that finds the same identity reads that window (at most
//! 2 × [`TAIL_CHECK_BYTES`], whatever the segment's size) and, when it still hashes the same, takes the fact
//! instead of scanning, and decides against the bucket exactly as it would after a scan (the bucket is untrusted,
//! and is not believed any more than before: it is only compared with the source's version, and what the seed does
//! on a match is nothing). A fact whose identity or window differs is not used and the segment is scanned.
//!
//! Why the identity and one bounded window are enough. A live broker's files can change under the seed, and a
//! fact is only believed while the file cannot hold other batches than the scan found. Kafka writes an active
//! segment in two ways only: it appends (the length grows; with `file.preallocate` the length stays and the new
//! batch is written from the prefix's end, inside the window) and it truncates (a follower after a leader change,
//! recovery): the length shrinks, and batches re-appended to the same length are other bytes ending at the
//! prefix's end (another leader epoch in the header, another CRC), inside the window again. Any write moves the
//! modification time, setting it back moves the status-change time, and a file swapped in (compaction, a restore)
//! has another inode. The window is also what catches a rewrite that keeps every stamp (a file system with coarse
//! or unreliable times, a tool that restores them): it is read through the same open file whose identity was
//! compared, so the bytes hashed are those of the file the fact describes.
//!
//! Racy stamps (git's "racy clean" problem): file times are kept at the kernel's coarse clock (a few ms), so a
//! write in the same tick as the identity was taken could leave the times unchanged. A same-length rewrite in
//! one tick is the only change that escapes the stamps (and the window catches the ones Kafka makes), but the window
//! is hashed after the scan, and only stamps that cannot move unseen tie it to the bytes the scan found: a fact is
//! recorded only when the file's times were already [`RACY_MARGIN`] old when its identity was taken, so any later
//! write lands on a later tick. A segment written within that margin before a seed is scanned again on the next run.
//!
//! The memory is local state of the machine that reads the source (`--memory FILE`; `segmirror seed` keeps one
//! per link in its data directory by default): a JSON document written
//! atomically (temporary file, fsync, rename) at the end of a run, read size-capped ([`MAX_MEMORY_BYTES`]) at the
//! start of the next. It is a cache: a missing, unreadable or malformed file is a warning and an empty memory
//! (the rerun scans, as without one); facts of files that no longer exist are dropped when it is written. The
//! verification depth a fact was found with is recorded: a `--deep` run believes only facts a deep check found.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use segment_format::verify::VerifyOptions;
use serde::{Deserialize, Serialize};

use crate::source::FileIdentity;

/// The `format` of a memory document; another format is ignored (scanned again), never misread.
pub const MEMORY_FORMAT: &str = "segmirror.seed-memory.v2";

/// Largest memory document read (~150 bytes per active segment: some 400,000 partitions), so a file that is not
/// ours cannot make the seed allocate without bound.
pub const MAX_MEMORY_BYTES: u64 = 64 << 20;

/// How old a file's times must be when its identity is taken for a fact about it to be recorded (see the module
/// doc).
pub use crate::source::guard::RACY_MARGIN;

/// Bytes on each side of the end of a remembered prefix that a rerun reads and hashes before it believes the fact
/// (see the module doc): 64 KiB holds the last batch's header for batches up to that size (the producer's default
/// `batch.size` is 16 KiB), and reading it is one small read of pages the broker just wrote, whatever the
/// segment's size.
pub const TAIL_CHECK_BYTES: u64 = 64 << 10;

/// What a scan of an active segment found, before its [`TailCheck`] is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// The file's identity when the scan started.
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

/// The bounded check of a fact: the CRC-32C of the file's bytes `[from, from + len)`, the window around the end of
/// the prefix (up to [`TAIL_CHECK_BYTES`] before it, and as much of the excluded tail, capped the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TailCheck {
    pub from: u64,
    pub len: u64,
    pub crc32c: u32,
}

impl TailCheck {
    /// The window of a file of `file_len` bytes whose complete batches end at `prefix`: `(from, len)`.
    fn window(prefix: u64, file_len: u64) -> (u64, u64) {
        let from = prefix.saturating_sub(TAIL_CHECK_BYTES);
        let to = file_len.min(prefix.saturating_add(TAIL_CHECK_BYTES)).max(from);
        (from, to - from)
    }
}

/// What a recall read: the fact when it is believed, and the bytes of the window it hashed (0 when the identity
/// already differed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recalled {
    pub fact: Option<ActiveFact>,
    pub checked_bytes: u64,
}

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
    /// The bytes around the prefix's end when the fact was recorded.
    pub tail: TailCheck,
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

    /// The fact about `log` if the file is still exactly as it was when the fact was found (its identity, then
    /// the window of its [`TailCheck`] read through the same open file), and it was found with at least the
    /// verification `verify` asks for. One `open`, two `fstat`s and one read of at most 2 × [`TAIL_CHECK_BYTES`].
    pub(crate) fn recall(&self, log: &Path, verify: &VerifyOptions) -> Recalled {
        let none = |checked_bytes| Recalled {
            fact: None,
            checked_bytes,
        };
        let Some(fact) = key(log).and_then(|k| self.facts().get(&k).copied()) else {
            return none(0);
        };
        if (verify.is_deep() && !fact.deep) || (verify.is_strict() && !fact.strict) {
            return none(0);
        }
        let Ok(mut file) = std::fs::File::open(log) else {
            return none(0);
        };
        if open_identity(&file) != Some(fact.identity) {
            return none(0);
        }
        let crc = window_crc(&mut file, fact.tail.from, fact.tail.len);
        // The identity once more: a write while the window was read is not believed either.
        let same = crc.as_ref().ok() == Some(&fact.tail.crc32c) && open_identity(&file) == Some(fact.identity);
        Recalled {
            fact: same.then_some(fact),
            checked_bytes: fact.tail.len,
        }
    }

    /// Record what a scan found, with the [`TailCheck`] of the file as it is now, if the file's times were old
    /// enough when its identity was taken and it still has that identity (see the module doc); otherwise forget
    /// what was known about `log`. Reads at most 2 × [`TAIL_CHECK_BYTES`] (pages the scan just read).
    pub(crate) fn remember(&self, log: &Path, scanned: Scanned, identity_taken: SystemTime) {
        let Some(key) = key(log) else { return };
        let fact = scanned
            .identity
            .settled_at(RACY_MARGIN, identity_taken)
            .then(|| tail_check(log, &scanned))
            .flatten()
            .map(|tail| ActiveFact {
                identity: scanned.identity,
                prefix: scanned.prefix,
                next: scanned.next,
                deep: scanned.deep,
                strict: scanned.strict,
                tail,
            });
        let mut facts = self.facts();
        match fact {
            Some(fact) => {
                facts.insert(key, fact);
            }
            None => {
                facts.remove(&key);
            }
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

/// The [`TailCheck`] of `log` for what `scanned` found, if the open file still has the scan's identity before and
/// after its window is read (else the file changed since the scan started: nothing is recorded).
fn tail_check(log: &Path, scanned: &Scanned) -> Option<TailCheck> {
    let mut file = std::fs::File::open(log).ok()?;
    if open_identity(&file)? != scanned.identity {
        return None;
    }
    let (from, len) = TailCheck::window(scanned.prefix, scanned.identity.len);
    let crc32c = window_crc(&mut file, from, len).ok()?;
    (open_identity(&file)? == scanned.identity).then_some(TailCheck { from, len, crc32c })
}

/// The CRC-32C of `file`'s bytes `[from, from + len)` (`len` is at most 2 × [`TAIL_CHECK_BYTES`]); a file shorter
/// than that is an error.
fn window_crc(file: &mut std::fs::File, from: u64, len: u64) -> std::io::Result<u32> {
    use std::io::{Seek, SeekFrom};
    if len > 2 * TAIL_CHECK_BYTES {
        return Err(std::io::Error::other("tail check window over its bound"));
    }
    let mut bytes = vec![0u8; usize::try_from(len).map_err(std::io::Error::other)?];
    file.seek(SeekFrom::Start(from))?;
    file.read_exact(&mut bytes)?;
    Ok(crc32c::crc32c(&bytes))
}

/// The [`FileIdentity`] of an open file (`fstat`), as [`file_identity`](crate::source::file_identity) gives it for a path: the identity of the
/// bytes read through `file`, whatever was renamed over its name meanwhile.
fn open_identity(file: &std::fs::File) -> Option<FileIdentity> {
    FileIdentity::of(&file.metadata().ok()?)
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
    use crate::source::file_identity;

    fn scanned(log: &Path, prefix: u64) -> Scanned {
        Scanned {
            identity: file_identity(log).unwrap(),
            prefix,
            next: 7,
            deep: false,
            strict: false,
        }
    }

    fn later() -> SystemTime {
        SystemTime::now() + RACY_MARGIN * 2
    }

    fn recall(memory: &SeedMemory, log: &Path) -> Option<ActiveFact> {
        memory.recall(log, &VerifyOptions::default()).fact
    }

    #[test]
    fn a_fact_is_believed_only_while_the_file_is_unchanged_and_survives_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory_file = dir.path().join("memory.json");
        let memory = SeedMemory::load(&memory_file);
        let shallow = VerifyOptions::default();
        memory.remember(&log, scanned(&log, 3), later());
        let fact = recall(&memory, &log).unwrap();
        assert_eq!((fact.prefix, fact.next), (3, 7));
        assert_eq!(
            fact.tail,
            TailCheck {
                from: 0,
                len: 4,
                crc32c: crc32c::crc32c(b"abcd")
            }
        );
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
        assert_eq!(memory.recall(&log, &deep).fact, None);
        memory.save().unwrap();
        let reloaded = SeedMemory::load(&memory_file);
        assert_eq!(recall(&reloaded, &log), Some(fact));
        assert_eq!(reloaded.recall(&log, &shallow).checked_bytes, 4);
        // An append moves the length: not believed, and the window is not even read.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"e")
            .unwrap();
        assert_eq!(
            reloaded.recall(&log, &shallow),
            Recalled {
                fact: None,
                checked_bytes: 0
            }
        );
        // A file swapped in under the same name with the same length and times: another inode.
        reloaded.remember(&log, scanned(&log, 5), later());
        assert!(recall(&reloaded, &log).is_some());
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
        assert_eq!(recall(&reloaded, &log), None);
    }

    /// The window alone catches what the stamps cannot: the same file with every stamp as recorded but other
    /// bytes around the prefix's end (a fact edited to another window stands for a rewrite that kept the stamps).
    #[test]
    fn a_fact_whose_window_hashes_differently_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        let bytes: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&log, &bytes).unwrap();
        let memory = SeedMemory::in_memory();
        memory.remember(&log, scanned(&log, 250_000), later());
        let fact = recall(&memory, &log).unwrap();
        // The window: 64 KiB before the prefix's end and 64 KiB of the excluded tail, never the whole file.
        assert_eq!(
            (fact.tail.from, fact.tail.len),
            (250_000 - TAIL_CHECK_BYTES, 2 * TAIL_CHECK_BYTES)
        );
        assert_eq!(
            fact.tail.crc32c,
            crc32c::crc32c(&bytes[(250_000 - TAIL_CHECK_BYTES) as usize..(250_000 + TAIL_CHECK_BYTES) as usize])
        );
        assert_eq!(
            memory.recall(&log, &VerifyOptions::default()).checked_bytes,
            2 * TAIL_CHECK_BYTES
        );
        let k = key(&log).unwrap();
        let mut edited = fact;
        edited.tail.crc32c ^= 1;
        memory.facts().insert(k.clone(), edited);
        assert_eq!(recall(&memory, &log), None);
        // A window past the end of the file (a fact about a longer file with this identity) is not believed.
        let mut past = fact;
        past.tail.from = 390_000;
        memory.facts().insert(k, past);
        assert_eq!(recall(&memory, &log), None);
    }

    #[test]
    fn the_window_is_bounded_and_inside_the_file() {
        assert_eq!(TailCheck::window(0, 0), (0, 0));
        assert_eq!(TailCheck::window(10, 10), (0, 10));
        assert_eq!(TailCheck::window(10, 100), (0, 100));
        let gib = 1u64 << 30;
        assert_eq!(TailCheck::window(gib, gib), (gib - TAIL_CHECK_BYTES, TAIL_CHECK_BYTES));
        // A preallocated segment: the window reaches into its zero tail, where the next batch would be written.
        assert_eq!(TailCheck::window(1000, gib), (0, 1000 + TAIL_CHECK_BYTES));
        // A prefix beyond the file (never recorded: the scan's prefix is within the identity's length) is empty.
        assert_eq!(TailCheck::window(gib, 10), (gib - TAIL_CHECK_BYTES, 0));
    }

    #[test]
    fn a_fact_about_a_file_written_just_before_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory = SeedMemory::in_memory();
        memory.remember(&log, scanned(&log, 3), SystemTime::now());
        assert_eq!(recall(&memory, &log), None);
        // Nor one about a file that changed since its scan started.
        let stale = scanned(&log, 3);
        std::fs::write(&log, b"abcdef").unwrap();
        memory.remember(&log, stale, later());
        assert_eq!(recall(&memory, &log), None);
    }

    #[test]
    fn an_unusable_memory_file_is_an_empty_memory_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        std::fs::write(&log, b"abcd").unwrap();
        let memory_file = dir.path().join("memory.json");
        let v1 = br#"{"format":"segmirror.seed-memory.v1","active":{}}"#;
        for junk in [&b"{not json"[..], br#"{"format":"other","active":{}}"#, v1] {
            std::fs::write(&memory_file, junk).unwrap();
            let memory = SeedMemory::load(&memory_file);
            assert_eq!(recall(&memory, &log), None);
            memory.remember(&log, scanned(&log, 3), later());
            memory.save().unwrap();
            assert!(recall(&SeedMemory::load(&memory_file), &log).is_some());
        }
        // Facts about files that are gone are dropped when saved.
        std::fs::remove_file(&log).unwrap();
        let memory = SeedMemory::load(&memory_file);
        memory.save().unwrap();
        assert!(!std::fs::read_to_string(&memory_file).unwrap().contains(".log"));
    }
}
