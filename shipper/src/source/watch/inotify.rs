//! The kernel's notifications for the watcher: inotify on each log dir and on each directory directly in it (the
//! partition dirs), asked for changes only.
//!
//! Why not a general file-watching library: the one used before asked the kernel for `IN_OPEN` on every directory
//! it watched, so every listing and every read the shipper made itself was queued as a notification, to be read and
//! thrown away. With 10,000 partitions one full pass opens 10,000 directories and a round opens their segments:
//! more than the kernel's queue holds by default (`fs.inotify.max_queued_events`, 16,384 per instance). The queue
//! overflowed; an overflow means a full pass, and the full pass overflowed it again, so a shipper at rest kept more
//! than a core busy. The mask here has no open, access or close-without-write: what the shipper and the broker's
//! readers do causes no notification at all.
//!
//! One watch per directory (Kafka's partition dirs hold no directories), added for each directory found at start
//! and for each one created or moved into a log dir later. A directory created before its watch is added is not
//! missed: its creation marks the log dir, whose pass lists it. An overflow (`IN_Q_OVERFLOW`) is reported as "look
//! at everything". Events are read on one thread that polls the descriptor, and stops within [`STOP_POLL`] of
//! [`Notifications`] being dropped.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

/// How often the reading thread looks whether it should stop, when nothing happens.
const STOP_POLL: Duration = Duration::from_millis(200);

/// What is asked of the kernel for every watched directory: entries created, removed, renamed, written or changed
/// in their attributes, and the directory itself removed or renamed. Never opens, reads or read-only closes.
fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ATTRIB
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::EXCL_UNLINK
}

/// What a notification says to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Notice {
    /// Something at this path (absolute: under a log dir as given, made absolute) changed.
    Path(PathBuf),
    /// Notifications were lost: look at everything.
    Everything,
}

/// Running notifications: dropping it stops the reading thread (and closes the descriptor with it).
pub(super) struct Notifications {
    stop: Arc<AtomicBool>,
}

impl Drop for Notifications {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The watches: which directory each watch descriptor is.
struct Watches {
    fd: OwnedFd,
    dirs: HashMap<i32, PathBuf>,
    /// The log dirs' watch descriptors: a directory created in one of them gets a watch of its own.
    log_dirs: Vec<i32>,
}

impl Watches {
    fn add(&mut self, dir: &Path) -> io::Result<i32> {
        let wd = inotify::add_watch(&self.fd, dir, mask()).map_err(io::Error::from)?;
        self.dirs.insert(wd, dir.to_path_buf());
        Ok(wd)
    }

    /// A directory created in a log dir: watched from now on. Gone again already, or not a directory: nothing to
    /// watch (its creation marked the log dir, whose pass sees what is there).
    fn add_partition(&mut self, dir: &Path) {
        if let Err(e) = self.add(dir) {
            if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch a partition directory; the periodic rescan covers it");
            }
        }
    }
}

/// Watch each of `log_dirs` (absolute) and every directory directly in them, and call `on_notice` on a thread of
/// its own for each notification. Blocking (one `inotify_add_watch` per directory): call it off the runtime. Fails
/// when a log dir cannot be watched (the error names the setting to raise when the kernel's limits are reached).
pub(super) fn start(log_dirs: &[PathBuf], on_notice: impl Fn(Notice) + Send + 'static) -> io::Result<Notifications> {
    let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).map_err(|e| {
        let e = io::Error::from(e);
        io::Error::new(
            e.kind(),
            format!("inotify_init1: {e} (the number of inotify instances is limited by fs.inotify.max_user_instances)"),
        )
    })?;
    let mut watches = Watches {
        fd,
        dirs: HashMap::new(),
        log_dirs: Vec::new(),
    };
    for log_dir in log_dirs {
        let wd = watches.add(log_dir).map_err(|e| with_limit_hint(log_dir, e))?;
        watches.log_dirs.push(wd);
        for entry in std::fs::read_dir(log_dir)? {
            let entry = entry?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let dir = entry.path();
                match watches.add(&dir) {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {}
                    Err(e) => return Err(with_limit_hint(&dir, e)),
                }
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::Builder::new()
        .name("segmirror-inotify".into())
        .spawn(move || read_loop(watches, &stopping, on_notice))?;
    Ok(Notifications { stop })
}

fn with_limit_hint(dir: &Path, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::ENOSPC) => " (one watch per partition directory: raise fs.inotify.max_user_watches)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("cannot watch {}: {e}{hint}", dir.display()))
}

fn read_loop(mut watches: Watches, stop: &AtomicBool, on_notice: impl Fn(Notice)) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match wait_readable(&watches.fd, STOP_POLL) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                tracing::error!(error = %e, "inotify: cannot wait for notifications; the periodic rescan covers changes");
                return;
            }
        }
        // Gather one read's worth, then act on it (a watch added while the reader borrows the descriptor would
        // need a second borrow).
        let mut notices: Vec<(i32, ReadFlags, Option<Vec<u8>>)> = Vec::new();
        {
            let mut reader = inotify::Reader::new(watches.fd.as_fd(), &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => notices.push((
                        event.wd(),
                        event.events(),
                        event.file_name().map(|n| n.to_bytes().to_vec()),
                    )),
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::error!(error = %e, "inotify: cannot read notifications; the periodic rescan covers changes");
                        return;
                    }
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
        }
        for (wd, flags, name) in notices {
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                on_notice(Notice::Everything);
                continue;
            }
            let Some(dir) = watches.dirs.get(&wd).cloned() else {
                continue;
            };
            let path = match &name {
                Some(name) => dir.join(OsStr::from_bytes(name)),
                None => dir.clone(),
            };
            if flags.contains(ReadFlags::IGNORED) {
                watches.dirs.remove(&wd);
            }
            let new_dir = flags.contains(ReadFlags::ISDIR) && flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO);
            if new_dir && name.is_some() && watches.log_dirs.contains(&wd) {
                watches.add_partition(&path);
            }
            on_notice(Notice::Path(path));
        }
    }
}

/// Whether `fd` has notifications to read within `timeout`.
fn wait_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, for a descriptor this thread owns for the whole call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    match n {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}
