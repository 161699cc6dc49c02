//! The one crash-safe way this project writes a small file.
//!
//! Kafka rewrites its checkpoints and `partition.metadata` by writing `<path>.tmp`,
//! forcing it to disk, renaming it over the target and flushing the parent
//! directory (`CheckpointFile.write`, `Utils.atomicMoveWithFallback`). A reader —
//! the broker, or our own verifier — therefore sees either the old file or the
//! new one, never a torn mix, and after a crash the rename itself is durable.
//! Every writer in segmirror goes through [`write_atomically`] so that this
//! ordering lives in exactly one place.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

#[cfg(target_os = "linux")]
mod aio;

/// Suffix of the temporary file written next to the target (Kafka uses the same).
pub const TMP_SUFFIX: &str = ".tmp";

/// `<path>.tmp`: where [`write_atomically`] stages the new content.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Replace `path` with `bytes` so that a crash leaves either the old or the new
/// content: write `<path>.tmp` (truncating any leftover), fsync it, rename it over
/// `path`, then fsync the parent directory so the rename survives a crash.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically_unflushed(path, bytes)?;
    fsync_dir(parent_dir(path))
}

/// [`write_atomically`] without its last step, the fsync of the parent directory: for a caller that fsyncs that
/// directory itself later, after more renames into it, before anything depends on the file being there (one
/// directory fsync for several files). Until then a crash may leave the old content (never a torn mix).
pub fn write_atomically_unflushed(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Write `bytes` to `path` (truncating what is there) and fsync it, for a caller that renames it into place itself.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let file = write_file(path, bytes)?;
    file.sync_all().map_err(|e| Error::io(path, e))
}

/// Flush a directory's entries (creations, renames, deletions) to disk.
///
/// On Unix a directory is opened read-only and `fsync`ed. Other platforms have no
/// portable equivalent; there this is a no-op, as in Kafka's `Utils.flushDir`
/// which ignores the failure to open a directory on Windows.
pub fn fsync_dir(path: &Path) -> Result<()> {
    if cfg!(unix) {
        let dir = File::open(path).map_err(|e| Error::io(path, e))?;
        dir.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// Write `bytes` to `path` (truncating what is there) without an fsync: for a file covered later by one
/// [`FilesystemSync::sync`] of its filesystem, before anything depends on it.
pub fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<()> {
    write_file(path, bytes).map(drop)
}

/// Create or truncate `path` and write `bytes` into it.
fn write_file(path: &Path, bytes: &[u8]) -> Result<File> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    Ok(file)
}

/// Every write to one filesystem made durable by one call, in place of an fsync per file and directory.
///
/// Why: a step that writes thousands of small files and directories (a promotion of 10,000 partitions writes six
/// files and two directories each) spends its time waiting for one journal commit per fsync; one `syncfs(2)` after
/// the last write commits them together. Open it *before* the writes it is to cover: Linux reports to `syncfs` the
/// write-back errors of the filesystem since the descriptor was opened (Linux 5.8 and later), so an error writing
/// any of them fails [`FilesystemSync::sync`]. It also writes back whatever else is dirty on that filesystem, which
/// for a broker's log dir with its broker stopped is little.
///
/// Elsewhere than Linux, `sync(2)`, which POSIX allows to return before the writes are done: those platforms are
/// for development, not for a broker's disks.
#[derive(Debug)]
pub struct FilesystemSync {
    dir: File,
    path: PathBuf,
}

impl FilesystemSync {
    /// Watch the filesystem holding the directory `dir` from now on.
    pub fn open(dir: &Path) -> Result<Self> {
        let file = File::open(dir).map_err(|e| Error::io(dir, e))?;
        Ok(FilesystemSync {
            dir: file,
            path: dir.to_path_buf(),
        })
    }

    /// Write back and commit everything written to the filesystem; an error if any write-back since
    /// [`FilesystemSync::open`] failed.
    pub fn sync(&self) -> Result<()> {
        syncfs(&self.dir).map_err(|e| Error::io(&self.path, e))
    }
}

#[cfg(target_os = "linux")]
fn syncfs(dir: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for as long as `dir` lives.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn syncfs(_dir: &File) -> std::io::Result<()> {
    #[cfg(unix)]
    // SAFETY: no arguments, no memory.
    unsafe {
        libc::sync()
    };
    Ok(())
}

/// The directory holding `path`; `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Asks the kernel to start writing `len` bytes of `file` from `at` to disk now, without waiting (write-behind), so
/// the disk works while the next pieces are produced instead of all at once in the final fsync. Only a hint:
/// durability still comes from that fsync; a failure only means no write-behind.
#[cfg(target_os = "linux")]
pub fn write_behind(file: &File, at: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(nbytes)) = (libc::off64_t::try_from(at), libc::off64_t::try_from(len)) else {
        return;
    };
    // SAFETY: `sync_file_range` reads no memory of ours; `file` is open and outlives the call.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, nbytes, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn write_behind(_file: &File, _at: u64, _len: u64) {}

/// Drops the first `len` bytes of `file` from the page cache once they are on disk (call it after an fsync, or once
/// bytes that are read only once have been read): the pages go back to the kernel's free lists at once, and the next
/// writes reuse them while they are still hot. From the file's start every time: a large folio that straddles the
/// end of an earlier call's range is dropped only by a call that covers it whole.
/// Why: an applier writes gigabytes that nothing reads until a failover. Left in the cache they crowd out the target
/// broker's own data, and every write takes a fresh page; on a virtual machine whose free memory goes back to the
/// host (virtio-balloon free page reporting, the norm in clouds and on this project's test machine) the first touch
/// of such a page is a fault in the host. Measured there with `dd bs=1M` of 1 GiB a few seconds after the previous
/// file was deleted: 2.6–3.2 s of system time, against 0.2 s right after (the freed pages reused); in the direct tail
/// catch-up that cache fill was 56 % of the applier's CPU (`tools/bench/direct_profile.sh`). A partly written last
/// page stays cached, so the next append does not read it back from the disk. Only a hint: dirty pages are not
/// dropped, and a failure changes nothing.
#[cfg(target_os = "linux")]
pub fn drop_cached(file: &File, len: u64) {
    // Whole pages only: the kernel also drops a last page that holds the end of the file.
    drop_cached_range(file, 0, len - len % page_size());
}

#[cfg(not(target_os = "linux"))]
pub fn drop_cached(_file: &File, _len: u64) {}

/// The system's page size.
#[cfg(target_os = "linux")]
fn page_size() -> u64 {
    // SAFETY: `sysconf` reads no memory of ours.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1)
}

/// Bytes of a file whose page-cache residency is asked at a time: bounds the mapping and the answer (one byte per
/// page, 16 KiB here) whatever the file's size.
#[cfg(target_os = "linux")]
const RESIDENCY_WINDOW: u64 = 64 << 20;

/// Calls `each(page_offset, resident)` for every page of `file`'s first `len` bytes, in order (`mincore` over a
/// private read-only mapping, a window at a time, that is never read: nothing faults, not even past the end of a
/// file that shrank meanwhile).
#[cfg(target_os = "linux")]
fn for_each_page(file: &File, len: u64, mut each: impl FnMut(u64, bool)) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let page = page_size();
    let mut at = 0;
    while at < len {
        let window = (len - at).min(RESIDENCY_WINDOW);
        let (Ok(map_len), Ok(offset)) = (usize::try_from(window), libc::off_t::try_from(at)) else {
            return Err(std::io::Error::other("window does not fit in memory"));
        };
        let mut resident = vec![0u8; map_len.div_ceil(page as usize)];
        // SAFETY: a private read-only mapping of an open file at a page-aligned offset (`at` advances by whole
        // windows), never dereferenced and unmapped before the block ends; `resident` holds one byte per page of
        // the mapping, as `mincore` requires.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                offset,
            );
            if map == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let status = libc::mincore(map, map_len, resident.as_mut_ptr());
            let error = std::io::Error::last_os_error();
            libc::munmap(map, map_len);
            if status != 0 {
                return Err(error);
            }
        }
        for (i, r) in resident.iter().enumerate() {
            each(at + i as u64 * page, r & 1 == 1);
        }
        at += window;
    }
    Ok(())
}

/// How many pages of `file`'s first `len` bytes are in the page cache: what the tests of [`drop_cached`] and of its
/// callers check, and a diagnostic.
#[cfg(target_os = "linux")]
pub fn cached_pages(file: &File, len: u64) -> std::io::Result<u64> {
    let mut cached = 0;
    for_each_page(file, len, |_, resident| cached += u64::from(resident))?;
    Ok(cached)
}

/// The byte ranges `(start, length)` of `file`'s first `len` bytes that are not in the page cache, in whole pages
/// (the last may end past `len`, at its page's end). Taken before reading a file that someone else keeps cached, so
/// that afterwards [`drop_cached_range`] returns only what the read brought in.
#[cfg(target_os = "linux")]
pub fn uncached_ranges(file: &File, len: u64) -> std::io::Result<Vec<(u64, u64)>> {
    let page = page_size();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for_each_page(file, len, |at, resident| {
        if resident {
            return;
        }
        match ranges.last_mut() {
            Some((start, length)) if *start + *length == at => *length += page,
            _ => ranges.push((at, page)),
        }
    })?;
    Ok(ranges)
}

#[cfg(not(target_os = "linux"))]
pub fn uncached_ranges(_file: &File, _len: u64) -> std::io::Result<Vec<(u64, u64)>> {
    Ok(Vec::new())
}

/// Drops `len` bytes of `file` from `at` from the page cache: its clean pages; a page the range covers only in
/// part stays, unless it holds the end of the file. Only a hint, as [`drop_cached`].
#[cfg(target_os = "linux")]
pub fn drop_cached_range(file: &File, at: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(at), libc::off64_t::try_from(len)) else {
        return;
    };
    if len == 0 {
        return;
    }
    // SAFETY: a valid open descriptor; the call reads no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED) };
}

#[cfg(not(target_os = "linux"))]
pub fn drop_cached_range(_file: &File, _at: u64, _len: u64) {}

/// Asks the kernel to start reading `len` bytes of the regular file at `path` from `at` into the page cache
/// (`None`: to the end of the file), without waiting for them. Only a hint, for a file read soon: a path that cannot
/// be opened as a regular file (a FIFO is not waited on), or a refused hint, changes nothing; the read that follows
/// reports what is wrong.
#[cfg(target_os = "linux")]
pub fn read_ahead(path: &Path, at: u64, len: Option<u64>) {
    if len == Some(0) {
        return;
    }
    if let Ok((file, _)) = crate::open::open_regular(path) {
        will_need(&file, at, len);
    }
}

/// The hint behind [`read_ahead`] and [`read_ahead_together`], on an open file: `len` bytes from `at` (`None`: to the
/// end of the file) are wanted soon.
#[cfg(target_os = "linux")]
fn will_need(file: &File, at: u64, len: Option<u64>) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(at), libc::off64_t::try_from(len.unwrap_or(0))) else {
        return;
    };
    // SAFETY: a valid open descriptor; the call reads no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
}

#[cfg(not(target_os = "linux"))]
pub fn read_ahead(_path: &Path, _at: u64, _len: Option<u64>) {}

/// The largest file [`read_ahead_together`] asks for in one submission with others; a longer one is asked on its
/// own, as [`read_ahead`] does.
pub const READ_AHEAD_TOGETHER_MAX: u64 = 64 * 1024;

/// Asks the kernel to start reading each of the regular files at `paths` whole into the page cache, without waiting
/// for them, as [`read_ahead`] does for one, but asked together: reads of neighbouring blocks are then sent to the
/// disk as one request. Name the files in the order they were written (the filesystem tends to place small files
/// written one after another in consecutive blocks). Only a hint: what cannot be opened as a regular file is
/// skipped. Files over [`READ_AHEAD_TOGETHER_MAX`] bytes are asked one by one.
#[cfg(target_os = "linux")]
pub fn read_ahead_together<'a>(paths: impl IntoIterator<Item = &'a Path>) {
    let hint = |file: &File| will_need(file, 0, None);
    let mut together: Vec<(File, u64)> = Vec::new();
    for path in paths {
        match crate::open::open_regular(path) {
            Ok((_, meta)) if meta.len() == 0 => {}
            Ok((file, meta)) if meta.len() <= READ_AHEAD_TOGETHER_MAX => together.push((file, meta.len())),
            Ok((file, _)) => hint(&file),
            Err(_) => {}
        }
    }
    for batch in together.chunks(aio::MAX_BATCH) {
        let files: Vec<(&File, u64)> = batch.iter().map(|(file, len)| (file, *len)).collect();
        let submitted = aio::read_ahead_batch(&files);
        batch.iter().skip(submitted).for_each(|(file, _)| hint(file));
    }
}

#[cfg(not(target_os = "linux"))]
pub fn read_ahead_together<'a>(_paths: impl IntoIterator<Item = &'a Path>) {}

/// Tells the kernel `file` is read from start to end (it doubles read-ahead). Only a hint: failure changes nothing.
#[cfg(target_os = "linux")]
pub fn read_sequentially(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; the call reads no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

#[cfg(not(target_os = "linux"))]
pub fn read_sequentially(_file: &File) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replaces_and_leaves_no_tmp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leader-epoch-checkpoint");
        write_atomically(&path, b"first").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        write_atomically(&path, b"2nd").expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"2nd");
        assert!(!tmp_path(&path).exists(), "temporary file must be renamed away");
    }

    #[test]
    fn stale_longer_tmp_is_truncated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("partition.metadata");
        fs::write(tmp_path(&path), b"a much longer stale temporary file").expect("stale");
        write_atomically(&path, b"short").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"short");
    }

    #[cfg(target_os = "linux")]
    fn cached(file: &File, len: usize) -> u64 {
        cached_pages(file, len as u64).expect("mincore")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn drop_cached_frees_the_written_pages_but_a_partial_last_one() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.log");
        // Sixteen whole pages and a part of one more, whatever the page size.
        let pages = 17;
        let len = 16 * page_size() as usize + 100;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .expect("create");
        file.write_all(&vec![7u8; len]).expect("write");
        assert_eq!(cached(&file, len), pages, "just written: every page cached");
        drop_cached(&file, len as u64);
        assert_eq!(cached(&file, len), pages, "dirty pages are not dropped");
        file.sync_all().expect("fsync");
        drop_cached(&file, len as u64);
        assert_eq!(cached(&file, len), 1, "only the partly written last page stays");
        assert_eq!(fs::read(&path).expect("read"), vec![7u8; len], "the bytes are intact");
    }

    /// What a seed does to a broker's segment: note what is not cached, read it all, drop only what it brought in.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_the_pages_a_read_brought_in_are_dropped() {
        use std::io::Read;
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000000.log");
        let page = page_size();
        let len = 64 * page;
        fs::write(&path, vec![9u8; len as usize]).expect("write");
        let file = File::open(&path).expect("open");
        file.sync_all().expect("fsync");
        drop_cached(&file, len);
        assert_eq!(cached(&file, len as usize), 0, "nothing cached to begin with");
        // The broker's own use: pages 8..24 cached.
        let mut some = vec![0u8; 16 * page as usize];
        file.read_exact_at(&mut some, 8 * page).expect("read");
        assert_eq!(cached(&file, len as usize), 16);

        let ranges = uncached_ranges(&file, len).expect("mincore");
        assert_eq!(ranges, vec![(0, 8 * page), (24 * page, 40 * page)]);
        (&file).read_to_end(&mut Vec::new()).expect("read all");
        assert_eq!(cached(&file, len as usize), 64, "a whole read caches every page");
        for (at, length) in ranges {
            drop_cached_range(&file, at, length);
        }
        assert_eq!(
            cached(&file, 24 * page as usize),
            16,
            "the pages cached before are kept"
        );
        assert_eq!(
            cached(&file, len as usize),
            16,
            "the pages the read brought in are gone"
        );
    }

    #[test]
    fn tmp_path_appends_suffix() {
        assert_eq!(
            tmp_path(Path::new("/d/replication-offset-checkpoint")),
            PathBuf::from("/d/replication-offset-checkpoint.tmp")
        );
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_tmp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent").join("file");
        let err = write_atomically(&path, b"x").expect_err("must fail");
        assert!(matches!(err, Error::Io { .. }));
        assert_eq!(err.path(), tmp_path(&path));
    }

    #[test]
    fn fsync_dir_works_and_reports_missing_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        fsync_dir(dir.path()).expect("fsync existing dir");
        assert!(fsync_dir(&dir.path().join("nope")).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn read_ahead_is_a_hint_that_never_waits_on_what_is_not_a_regular_file() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("00000000000000000000.index");
        std::fs::write(&file, [7u8; 32]).expect("write");
        let fifo = dir.path().join("00000000000000000000.timeindex");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Opening a FIFO for reading without O_NONBLOCK would wait for a writer forever: run it aside, bounded.
        let (done, finished) = std::sync::mpsc::channel();
        let paths = (file.clone(), fifo, dir.path().join("missing"));
        std::thread::spawn(move || {
            read_ahead(&paths.0, 0, None);
            read_ahead(&paths.0, 8, Some(0));
            read_ahead(&paths.1, 0, None);
            read_ahead(&paths.2, 0, Some(4096));
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "read_ahead waited"
        );
        assert_eq!(std::fs::read(&file).expect("read"), [7u8; 32]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn read_ahead_together_caches_small_and_large_files_and_never_waits_on_the_rest() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let page = page_size() as usize;
        // More small files than one submission holds, and one too large to be asked with them.
        let mut paths: Vec<(PathBuf, usize)> = (0..20).map(|i| (dir.path().join(format!("small-{i}")), page)).collect();
        let large = READ_AHEAD_TOGETHER_MAX as usize + 4 * page;
        paths.push((dir.path().join("large"), large));
        let files: Vec<(File, usize)> = paths
            .iter()
            .map(|(path, len)| {
                fs::write(path, vec![3u8; *len]).expect("write");
                let file = File::open(path).expect("open");
                file.sync_all().expect("fsync");
                drop_cached(&file, *len as u64);
                assert_eq!(cached(&file, *len), 0, "nothing cached to begin with");
                (file, *len)
            })
            .collect();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let empty = dir.path().join("empty");
        fs::write(&empty, b"").expect("write");
        let mut asked: Vec<PathBuf> = vec![fifo, dir.path().join("missing"), dir.path().to_path_buf(), empty];
        asked.extend(paths.iter().map(|(path, _)| path.clone()));
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            read_ahead_together(asked.iter().map(PathBuf::as_path));
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "read_ahead_together waited"
        );
        for _ in 0..1000 {
            if files
                .iter()
                .all(|(file, len)| cached(file, *len) == len.div_ceil(page) as u64)
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("a file asked for was not read into the page cache");
    }
}
