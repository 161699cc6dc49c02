//! Read-ahead of several small files in one submission, through Linux AIO (`io_submit`), for
//! [`super::read_ahead_together`].
//!
//! Why not one `posix_fadvise` per file: each call sends its reads to the disk on its own, so the small files of a
//! partition (offset and time index, producer snapshot, epoch checkpoint), which the filesystem usually places in
//! consecutive blocks when one writer creates them one after another (ext4 gives small files written together
//! neighbouring blocks), still cost one disk request each. `io_submit` holds one block plug over its whole batch, so
//! reads of neighbouring blocks submitted in it are merged into one request before they reach the disk. Each read is
//! asked with `RWF_NOWAIT`: a page not yet cached starts its read-ahead and answers `EAGAIN` at once, rather than
//! waiting for the disk, so the call waits for nothing (a page already cached is copied into a scratch buffer and
//! ignored).
//!
//! Measured on 10,000 partitions of five small files each, cold: 25,700 disk requests against 60,400 for the same
//! files asked one `posix_fadvise` at a time; a promotion of those partitions made a third fewer requests
//! (docs/BENCHMARKS.md, "a partition's small files asked for in one submission").
//!
//! Each thread keeps one AIO context, made at its first use and destroyed with the thread. Where AIO is not
//! available (a kernel without it, a sandbox refusing the calls, the system's `fs.aio-max-nr` reached), the files
//! are asked one `posix_fadvise` at a time, as before.

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;

/// `struct iocb` of `linux/aio_abi.h`.
#[repr(C)]
#[derive(Default)]
struct Iocb {
    aio_data: u64,
    #[cfg(target_endian = "little")]
    aio_key: u32,
    aio_rw_flags: i32,
    #[cfg(target_endian = "big")]
    aio_key: u32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

/// `struct io_event` of `linux/aio_abi.h`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PREAD: u16 = 0;
/// `RWF_NOWAIT` of `linux/fs.h`: do not wait for the disk (`EAGAIN` instead).
const RWF_NOWAIT: i32 = 0x0000_0008;

/// The most files one submission asks for; a longer list is asked in batches of this many.
pub(super) const MAX_BATCH: usize = 16;

/// One thread's AIO context (`aio_context_t`), destroyed with it.
struct Context(libc::c_ulong);

impl Context {
    fn new() -> Option<Context> {
        let mut id: libc::c_ulong = 0;
        // SAFETY: `id` is a valid, zeroed `aio_context_t` the call writes.
        let made = unsafe { libc::syscall(libc::SYS_io_setup, MAX_BATCH as libc::c_long, &mut id) };
        (made == 0).then_some(Context(id))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: a context this thread made; the kernel waits for any read still in flight before freeing it.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
    }
}

/// A thread's context: not tried yet, made, or not available (then not asked again).
enum Slot {
    Untried,
    Made(Context),
    Unavailable,
}

thread_local! {
    static CONTEXT: RefCell<Slot> = const { RefCell::new(Slot::Untried) };
}

/// Asks for the first `len` bytes of each of `files` (at most [`MAX_BATCH`]) in one submission. Returns how many
/// were submitted, from the front: the caller asks for the rest another way. Never waits on the disk.
pub(super) fn read_ahead_batch(files: &[(&File, u64)]) -> usize {
    let files = &files[..files.len().min(MAX_BATCH)];
    let Some(longest) = files.iter().map(|(_, len)| *len).max() else {
        return 0;
    };
    CONTEXT.with(|slot| {
        let mut slot = slot.borrow_mut();
        if matches!(*slot, Slot::Untried) {
            *slot = Context::new().map_or(Slot::Unavailable, Slot::Made);
        }
        let Slot::Made(context) = &*slot else { return 0 };
        // Where a page already cached is copied to; never read. Shared by every read of the batch.
        let mut scratch = vec![0u8; usize::try_from(longest).unwrap_or(0)];
        let mut blocks: Vec<Iocb> = files
            .iter()
            .map(|(file, len)| Iocb {
                aio_lio_opcode: IOCB_CMD_PREAD,
                aio_rw_flags: RWF_NOWAIT,
                aio_fildes: u32::try_from(file.as_raw_fd()).unwrap_or(u32::MAX),
                aio_buf: scratch.as_mut_ptr() as u64,
                aio_nbytes: *len,
                ..Iocb::default()
            })
            .collect();
        let mut pointers: Vec<*mut Iocb> = blocks.iter_mut().map(|b| b as *mut Iocb).collect();
        // SAFETY: `pointers` names `blocks.len()` valid control blocks, each naming an open descriptor and a buffer
        // of at least its length; both outlive every read the kernel accepts (reaped below, or waited for by
        // `io_destroy` before they are freed).
        let submitted = unsafe {
            libc::syscall(
                libc::SYS_io_submit,
                context.0,
                pointers.len() as libc::c_long,
                pointers.as_mut_ptr(),
            )
        };
        let submitted = usize::try_from(submitted).unwrap_or(0);
        let mut events = [IoEvent::default(); MAX_BATCH];
        let mut reaped = 0;
        while reaped < submitted {
            // SAFETY: `events` has room for `submitted - reaped` events; no timeout (each read answers at once).
            let got = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    context.0,
                    (submitted - reaped) as libc::c_long,
                    (submitted - reaped) as libc::c_long,
                    events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            let interrupted = got < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            match usize::try_from(got) {
                Ok(n) if n > 0 => reaped += n,
                _ if interrupted => {}
                _ => {
                    // The context cannot be trusted with another batch: destroying it waits for what is in flight
                    // (so `scratch` and `blocks` outlive it), and this thread asks one file at a time from now on.
                    *slot = Slot::Unavailable;
                    break;
                }
            }
        }
        drop(pointers);
        drop(blocks);
        drop(scratch);
        submitted
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::{cached_pages, drop_cached};

    /// Files of whole pages, written, forced to disk and dropped from the page cache.
    fn uncached_files(dir: &std::path::Path, count: usize, len: usize) -> Vec<File> {
        (0..count)
            .map(|i| {
                let path = dir.join(format!("{i:020}.index"));
                std::fs::write(&path, vec![i as u8; len]).expect("write");
                let file = File::open(&path).expect("open");
                file.sync_all().expect("fsync");
                drop_cached(&file, len as u64);
                assert_eq!(
                    cached_pages(&file, len as u64).expect("mincore"),
                    0,
                    "nothing cached to begin with"
                );
                file
            })
            .collect()
    }

    fn wait_cached(files: &[File], len: u64) {
        let pages = len.div_ceil(crate::durable::page_size());
        for _ in 0..1000 {
            if files.iter().all(|f| cached_pages(f, len).expect("mincore") == pages) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the files asked for were not read into the page cache");
    }

    #[test]
    fn one_submission_reads_every_file_without_waiting_and_again_on_the_same_context() {
        let dir = tempfile::tempdir().expect("tempdir");
        let len = 8192u64;
        let files = uncached_files(dir.path(), 5, len as usize);
        let asked: Vec<(&File, u64)> = files.iter().map(|f| (f, len)).collect();
        assert_eq!(read_ahead_batch(&asked), 5, "all five submitted in one call");
        wait_cached(&files, len);
        // Cached now: each read copies into the scratch buffer; the context serves a second batch.
        assert_eq!(read_ahead_batch(&asked), 5);
        assert_eq!(read_ahead_batch(&[]), 0);
        for (i, file) in files.iter().enumerate() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut &*file, &mut bytes).expect("read");
            assert_eq!(bytes, vec![i as u8; len as usize], "the files are untouched");
        }
    }

    #[test]
    fn a_batch_longer_than_one_submission_is_cut_at_its_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = uncached_files(dir.path(), MAX_BATCH + 3, 4096);
        let asked: Vec<(&File, u64)> = files.iter().map(|f| (f, 4096)).collect();
        assert_eq!(read_ahead_batch(&asked), MAX_BATCH, "the caller asks for the rest");
        wait_cached(&files[..MAX_BATCH], 4096);
    }
}
