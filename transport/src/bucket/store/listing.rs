//! Listing a store without letting one bad entry blind the rest.
//!
//! A bucket is untrusted input, and `object_store`'s listings give up on the first entry they cannot represent: its
//! local folder store follows symbolic links (a link loop, or a link out of the folder, is walked or fails the
//! whole listing) and fails on a file name that is not a legal object path (a newline); its S3 store fails a whole
//! page of 1,000 keys when one key is not a legal object path (`..`, an empty component, a control character).
//! Anyone who can write one such key would stop every `apply` and blind the audit. So:
//!
//! - **Local folders** are walked here, one directory at a time, without following any link: regular files are
//!   objects; a link, FIFO, socket or device, a name that is not UTF-8 or not a legal key, or a directory that
//!   cannot be read is a [`SkippedEntry`] with its reason, and the walk goes on. `object_store`'s upload temp files
//!   (`<name>#<n>`) are reported apart ([`Listing::temporary`]): a killed upload leaves them behind.
//! - **S3** is listed page by page with `start-after` (which takes any string, so a key that is not a legal object
//!   path can still be stepped over). When a page fails on such a key the page is asked for again with fewer keys,
//!   down to one, which isolates the bad key; it is reported and the listing continues after it.
//!
//! Reading a local object opens it in one step that cannot leave the store ([`open_regular_file`]): the kernel
//! refuses a link anywhere on the way (`openat2` with `RESOLVE_NO_SYMLINKS`), the open cannot block on a FIFO
//! (`O_NONBLOCK`), and what was opened must be a regular file. Where `openat2` is refused (a kernel before 5.6, a
//! seccomp filter), every component below the root is first checked without opening anything
//! ([`check_regular_file`]): a directory or (the last) a regular file, not a link.

use std::collections::VecDeque;
use std::fs::FileType;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use futures::StreamExt;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjectPath;

use super::error::from_store;
use super::{info, object_path, task_error, Listing, ObjectInfo, SkippedEntry, Store};
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::{in_data_dir, is_data_dir, KeyPrefix};

/// Keys per S3 list page (S3's own maximum and default).
pub const S3_PAGE_KEYS: usize = 1000;

/// `<name>#<digits>`: the name `object_store`'s local store (and ours, see `local`) assembles an upload under.
pub fn is_temporary_name(name: &str) -> bool {
    match name.rsplit_once('#') {
        Some((stem, n)) => !stem.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

fn kind_of(t: &FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn object_info(key: String, meta: &std::fs::Metadata) -> ObjectInfo {
    use std::os::unix::fs::MetadataExt;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    ObjectInfo {
        // The same entity tag `object_store` derives for a local file: inode, mtime and size.
        e_tag: Some(format!(
            "\"{:x}-{:x}-{:x}\"",
            meta.ino(),
            modified.as_micros(),
            meta.len()
        )),
        key,
        size: meta.len(),
        last_modified_ms: i64::try_from(modified.as_millis()).unwrap_or(i64::MAX),
    }
}

/// Walk `root/prefix` (see the module doc). `prefix` is a canonical key or empty. Fails only when the starting
/// directory exists and cannot be read.
pub(super) fn list_local(root: &Path, prefix: &str) -> Result<Listing> {
    list_local_pruned(root, prefix, &|_| false)
}

/// [`list_local`], not descending into the directories whose key `prune` accepts (a lineage's data directory, for
/// a listing of versions): they are neither walked nor reported.
pub(super) fn list_local_pruned(root: &Path, prefix: &str, prune: &dyn Fn(&str) -> bool) -> Result<Listing> {
    let start = if prefix.is_empty() {
        root.to_path_buf()
    } else {
        root.join(prefix)
    };
    let mut listing = Listing::default();
    match std::fs::symlink_metadata(&start) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(listing),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
        Err(e) => return Err(Error::io(&start, e)),
    }
    let mut pending: VecDeque<(PathBuf, String)> = VecDeque::from([(start, prefix.to_string())]);
    let mut first = true;
    while let Some((dir, key)) = pending.pop_front() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if first => return Err(Error::io(&dir, e)),
            Err(e) => {
                listing.skipped.push(SkippedEntry {
                    key,
                    reason: format!("directory cannot be listed: {e}"),
                });
                continue;
            }
        };
        first = false;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    listing.skipped.push(SkippedEntry {
                        key: key.clone(),
                        reason: format!("directory cannot be listed completely: {e}"),
                    });
                    break;
                }
            };
            let raw = entry.file_name();
            let name_lossy = raw.to_string_lossy();
            let child_key = if key.is_empty() {
                name_lossy.to_string()
            } else {
                format!("{key}/{name_lossy}")
            };
            let Some(name) = raw.to_str() else {
                listing.skipped.push(SkippedEntry {
                    key: child_key,
                    reason: "the name is not UTF-8".into(),
                });
                continue;
            };
            // The entry itself, never what a link points at: the type the directory gives (no call to the kernel
            // where the file system records it), and the metadata of regular files only, looked up relative to the
            // directory already open rather than along the whole path again.
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    listing.skipped.push(SkippedEntry {
                        key: child_key,
                        reason: format!("cannot be examined: {e}"),
                    });
                    continue;
                }
            };
            if let Err(e) = ObjectPath::parse(&child_key).map_err(|e| e.to_string()).and_then(|p| {
                (p.as_ref() == child_key)
                    .then_some(())
                    .ok_or_else(|| "not canonical".to_string())
            }) {
                listing.skipped.push(SkippedEntry {
                    key: child_key,
                    reason: format!("not a valid object key: {e}"),
                });
                continue;
            }
            if file_type.is_dir() {
                if !prune(&child_key) {
                    pending.push_back((entry.path(), child_key));
                }
            } else if file_type.is_file() {
                let meta = match entry.metadata() {
                    Ok(meta) if meta.is_file() => meta,
                    // Replaced by something else since the directory was read: what it is now is looked at in the
                    // next listing.
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        listing.skipped.push(SkippedEntry {
                            key: child_key,
                            reason: format!("cannot be examined: {e}"),
                        });
                        continue;
                    }
                };
                let info = object_info(child_key, &meta);
                if is_temporary_name(name) {
                    listing.temporary.push(info);
                } else {
                    listing.objects.push(info);
                }
            } else {
                listing.skipped.push(SkippedEntry {
                    key: child_key,
                    reason: format!(
                        "{}, not a regular file: a store holds regular files only (links are not followed)",
                        kind_of(&file_type)
                    ),
                });
            }
        }
    }
    listing.objects.sort_by(|a, b| a.key.cmp(&b.key));
    listing.temporary.sort_by(|a, b| a.key.cmp(&b.key));
    listing.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(listing)
}

/// Refuse to read `key` of the local folder `root` unless every component below `root` is a real directory and the
/// last one a regular file, checked with `symlink_metadata` (nothing is opened: opening a FIFO blocks). A missing
/// object passes: the read then reports it as missing.
pub(super) fn check_regular_file(root: &Path, key: &str) -> Result<()> {
    let mut path = root.to_path_buf();
    let mut components = key.split('/').peekable();
    while let Some(component) = components.next() {
        path.push(component);
        let last = components.peek().is_none();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let t = meta.file_type();
        let fine = if last { t.is_file() } else { t.is_dir() };
        if !fine {
            return Err(Error::NotRegularFile {
                key: key.to_string(),
                what: if last {
                    kind_of(&t).to_string()
                } else {
                    format!("'{}' is {}", path.display(), kind_of(&t))
                },
            });
        }
    }
    Ok(())
}

/// Open `key` of the local folder `root` (canonical, so free of links itself) for reading, with its size; `None`
/// if there is no such object. One `openat2` both finds and checks the path, so nothing can be swapped for a link
/// between a check and the open (and it replaces a `statx` per component and a trip through
/// `object_store`'s blocking pool for every object read). A refusal names the component, as
/// [`check_regular_file`] does.
pub(super) fn open_regular_file(root: &Path, key: &str) -> Result<Option<(std::fs::File, u64)>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let path = root.join(key);
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let opened = match rustix::fs::openat2(rustix::fs::CWD, &path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        // No `openat2` here: check each component, then open without following a link at the end.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM | rustix::io::Errno::INVAL) => {
            check_regular_file(root, key)?;
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(&path)
        }
        Err(e) => Err(std::io::Error::from(e)),
    };
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A link or a non-directory on the way: say which component, as the check does.
        Err(e) => {
            check_regular_file(root, key)?;
            return Err(Error::io(&path, e));
        }
    };
    let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
    if !meta.is_file() {
        return Err(Error::NotRegularFile {
            key: key.to_string(),
            what: kind_of(&meta.file_type()).to_string(),
        });
    }
    Ok(Some((file, meta.len())))
}

/// The full key a path error of `object_store` names, when the error is about a key that is not a legal path.
fn illegal_key(e: &object_store::Error) -> Option<String> {
    match e {
        object_store::Error::InvalidPath {
            source:
                object_store::path::Error::BadSegment { path, .. } | object_store::path::Error::EmptySegment { path },
        } => Some(path.clone()),
        _ => None,
    }
}

/// One page of an S3 listing: the page, or the key that made it fail.
pub(super) enum Page {
    Keys {
        objects: Vec<object_store::ObjectMeta>,
        /// With a delimiter: the groups of keys it folded (without their trailing `/`).
        common_prefixes: Vec<String>,
        truncated: bool,
    },
    IllegalKey(String),
}

/// The delimiter a listing of versions folds each lineage's data directory with: S3 takes any string, so
/// `<lineage>/data/...` comes back as one common prefix instead of one key per chunk.
pub(super) const DATA_DELIMITER: &str = "/data/";

/// The smallest string after every key under the common prefix `folded` (given without its trailing `/`, as
/// `object_store` returns it): `/` is followed by `0` in byte order, so `<folded>0` sorts after `<folded>/...`.
pub(super) fn after_folded(folded: &str) -> String {
    format!("{}0", folded.trim_end_matches('/'))
}

/// Request one page of at most `max_keys` keys after `offset` (folded at `delimiter` when given).
pub(super) async fn s3_page(
    lister: &dyn PaginatedListStore,
    prefix: Option<&str>,
    offset: Option<&str>,
    max_keys: usize,
    delimiter: Option<&'static str>,
    what: &str,
) -> Result<Page> {
    let options = PaginatedListOptions {
        offset: offset.map(str::to_string),
        max_keys: Some(max_keys),
        delimiter: delimiter.map(std::borrow::Cow::Borrowed),
        ..Default::default()
    };
    match lister.list_paginated(prefix, options).await {
        Ok(page) => Ok(Page::Keys {
            objects: page.result.objects,
            common_prefixes: page.result.common_prefixes.iter().map(|p| p.to_string()).collect(),
            truncated: page.page_token.is_some(),
        }),
        Err(e) => match illegal_key(&e) {
            Some(key) => Ok(Page::IllegalKey(key)),
            None => Err(super::error::from_store(what, "list", e)),
        },
    }
}

/// A store's listings: what every reader of a bucket starts from, and the one place that chooses how (a local
/// folder walked here, S3 page by page, any other store through `object_store`).
impl Store {
    /// Every object whose key is `prefix` or below `prefix/` (whole components:
    /// `a/b` does not list `a/bc`), sorted by key. An empty prefix lists the store.
    /// Entries that are not objects are left out (see [`Store::list_all`]).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let listing = self.list_all(prefix).await?;
        for skipped in &listing.skipped {
            tracing::warn!(store = %self.description, key = %skipped.key, reason = %skipped.reason, "not an object; skipped");
        }
        Ok(listing.objects)
    }

    /// Everything under `prefix` (as [`Store::list`]): the objects, the entries
    /// that are not (reported with their reason, never a reason to fail the
    /// listing), and a local folder's upload leftovers. Fails only when the store
    /// cannot be listed at all.
    pub async fn list_all(&self, prefix: &str) -> Result<Listing> {
        let prefix = prefix.trim_matches('/');
        let location = if prefix.is_empty() {
            None
        } else {
            Some(object_path(prefix)?)
        };
        if let Some(root) = self.local_root.clone() {
            let owned = prefix.to_string();
            return tokio::task::spawn_blocking(move || list_local(&root, &owned))
                .await
                .map_err(|e| task_error(prefix, e))?;
        }
        if let Some((lister, store_prefix)) = &self.s3_lister {
            return self.list_s3(lister.as_ref(), store_prefix, prefix, None).await;
        }
        let objects = self.list_generic(prefix, location.as_ref()).await?;
        Ok(Listing {
            objects,
            ..Default::default()
        })
    }

    /// S3, page by page with `start-after` (see `listing`). With `versions`, a listing of versions
    /// ([`Store::list_versions`]): each lineage's data directory is folded into one common prefix by the
    /// delimiter [`DATA_DELIMITER`] and left out; a folded prefix that is not a data directory (a topic
    /// named `data`, a foreign key) is listed in turn, the same way.
    async fn list_s3(
        &self,
        lister: &dyn object_store::list::PaginatedListStore,
        store_prefix: &str,
        prefix: &str,
        versions: Option<&KeyPrefix>,
    ) -> Result<Listing> {
        let full: String = [store_prefix, prefix]
            .iter()
            .filter(|p| !p.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        let strip = |key: &str| -> String {
            if store_prefix.is_empty() {
                key.to_string()
            } else {
                key.strip_prefix(store_prefix)
                    .and_then(|k| k.strip_prefix('/'))
                    .unwrap_or(key)
                    .to_string()
            }
        };
        let delimiter = versions.map(|_| DATA_DELIMITER);
        let mut out = Listing::default();
        // The (full) prefixes still to list: the root, then any folded prefix that is not a data directory.
        let mut roots = vec![(!full.is_empty()).then(|| format!("{full}/"))];
        while let Some(list_prefix) = roots.pop() {
            let mut offset: Option<String> = None;
            let mut page_keys = S3_PAGE_KEYS;
            loop {
                let page = self
                    .retrying("list", prefix, |_| {
                        s3_page(
                            lister,
                            list_prefix.as_deref(),
                            offset.as_deref(),
                            page_keys,
                            delimiter,
                            prefix,
                        )
                    })
                    .await?;
                match page {
                    Page::Keys {
                        objects,
                        common_prefixes,
                        truncated,
                    } => {
                        // The next page starts after everything this one covered, keys and folded prefixes alike.
                        let mut last = offset.take();
                        for meta in objects {
                            let key = meta.location.to_string();
                            if last.as_ref().is_none_or(|l| *l < key) {
                                last = Some(key);
                            }
                            let mut object = info(meta);
                            object.key = strip(&object.key);
                            out.objects.push(object);
                        }
                        for folded in common_prefixes {
                            let after = after_folded(&folded);
                            if last.as_ref().is_none_or(|l| *l < after) {
                                last = Some(after);
                            }
                            let relative = strip(&folded);
                            if versions.is_some_and(|p| !is_data_dir(p, &relative)) {
                                roots.push(Some(format!("{folded}/")));
                            }
                        }
                        offset = last;
                        if !truncated {
                            break;
                        }
                        page_keys = S3_PAGE_KEYS;
                    }
                    Page::IllegalKey(key) if page_keys == 1 => {
                        out.skipped.push(SkippedEntry {
                            key: strip(&key),
                            reason: "not a valid object key (an empty, '.' or '..' component, or a control character)"
                                .into(),
                        });
                        // A folded prefix that is no legal path is stepped over whole.
                        offset = Some(match delimiter {
                            Some(d) if key.ends_with(d) => after_folded(&key),
                            _ => key,
                        });
                        page_keys = S3_PAGE_KEYS;
                    }
                    // Narrow the page until the bad key is alone in it; the keys before it are listed meanwhile.
                    Page::IllegalKey(_) => page_keys = (page_keys / 2).max(1),
                }
            }
        }
        if let Some(p) = versions {
            out.objects.retain(|o| !in_data_dir(p, &o.key));
        }
        out.objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// The manifests and leases under `root` (a key under the contract prefix `prefix`, e.g. one link), without
    /// the data objects and chunks of any lineage ([`in_data_dir`]): what a follower needs each poll, at a cost
    /// that does not grow with the chunks a continuous shipper adds every round. A local folder's walk does not
    /// descend into the data directories; S3 folds each into one common prefix (`delimiter=/data/`), so a page of
    /// 1,000 entries covers up to 1,000 manifests, leases and lineages. A server that refuses that delimiter gets
    /// the whole listing, filtered (with a warning): correct, only not cheaper.
    pub async fn list_versions(&self, prefix: &KeyPrefix, root: &str) -> Result<Listing> {
        let root = root.trim_matches('/');
        if !root.is_empty() {
            object_path(root)?;
        }
        if let Some(dir) = self.local_root.clone() {
            let (owned, prefix) = (root.to_string(), prefix.clone());
            return tokio::task::spawn_blocking(move || {
                list_local_pruned(&dir, &owned, &|key| is_data_dir(&prefix, key))
            })
            .await
            .map_err(|e| task_error(root, e))?;
        }
        if let Some((lister, store_prefix)) = &self.s3_lister {
            match self.list_s3(lister.as_ref(), store_prefix, root, Some(prefix)).await {
                Ok(listing) => return Ok(listing),
                Err(e) if !e.is_transient() => {
                    tracing::warn!(store = %self.description, root, error = %e,
                        "listing with delimiter {:?} failed; listing everything instead", DATA_DELIMITER);
                }
                Err(e) => return Err(e),
            }
        }
        let mut all = self.list_all(root).await?;
        all.objects.retain(|o| !in_data_dir(prefix, &o.key));
        Ok(all)
    }

    /// Remove a local folder's upload leftovers (`<key>#<n>`, see
    /// [`Listing::temporary`]) under `prefix` that were last written at least
    /// `min_age` ago (an upload under way writes its file continuously). Returns the
    /// keys removed; nothing for other stores.
    pub async fn remove_leftovers(&self, prefix: &str, min_age: Duration) -> Result<Vec<String>> {
        let Some(root) = self.local_root.clone() else {
            return Ok(Vec::new());
        };
        let listing = self.list_all(prefix).await?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let min_age_ms = i64::try_from(min_age.as_millis()).unwrap_or(i64::MAX);
        let old: Vec<String> = listing
            .temporary
            .into_iter()
            .filter(|t| now_ms.saturating_sub(t.last_modified_ms) >= min_age_ms)
            .map(|t| t.key)
            .collect();
        tokio::task::spawn_blocking(move || {
            let mut removed = Vec::new();
            for key in old {
                let path = root.join(&key);
                match std::fs::remove_file(&path) {
                    Ok(()) => removed.push(key),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(&path, e)),
                }
            }
            Ok(removed)
        })
        .await
        .map_err(|e| task_error(prefix, e))?
    }

    /// Any other store, through `object_store`'s listing.
    async fn list_generic(&self, prefix: &str, location: Option<&ObjectPath>) -> Result<Vec<ObjectInfo>> {
        self.retrying("list", prefix, |_| async {
            let mut stream = self.inner.list(location);
            let mut out = Vec::new();
            while let Some(meta) = stream.next().await {
                out.push(info(meta.map_err(|e| from_store(prefix, "list", e))?));
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_object_is_opened_only_through_real_directories_and_only_if_regular() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/obj"), b"seven b").unwrap();
        let (_, size) = open_regular_file(&root, "a/b/obj").unwrap().expect("a regular object");
        assert_eq!(size, 7);
        assert!(open_regular_file(&root, "a/b/missing").unwrap().is_none());
        assert!(open_regular_file(&root, "a/nothing/obj").unwrap().is_none());

        // A link anywhere on the way, to inside the store or out of it: refused, naming the component.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("obj"), b"secret").unwrap();
        symlink(outside.path(), root.join("a/out")).unwrap();
        symlink(root.join("a/b"), root.join("a/in")).unwrap();
        symlink(root.join("a/b/obj"), root.join("a/b/link")).unwrap();
        for (key, component) in [("a/out/obj", "a/out"), ("a/in/obj", "a/in"), ("a/b/link", "")] {
            match open_regular_file(&root, key) {
                Err(Error::NotRegularFile { key: k, what }) => {
                    assert_eq!(k, key);
                    assert!(what.contains("a symbolic link"), "{key}: {what}");
                    assert!(what.contains(component), "{key}: {what}");
                }
                other => panic!("{key}: expected a refusal, got {:?}", other.map(|o| o.map(|(_, n)| n))),
            }
        }

        // A file where a directory should be, a directory or a FIFO where the object should be: refused, and the
        // FIFO is not waited on.
        let fifo = root.join("a/b/pipe");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for (key, what) in [
            ("a/b/obj/x", "a regular file"),
            ("a/b", "a directory"),
            ("a/b/pipe", "a FIFO"),
        ] {
            match open_regular_file(&root, key) {
                Err(Error::NotRegularFile { what: w, .. }) => assert!(w.contains(what), "{key}: {w}"),
                other => panic!("{key}: expected a refusal, got {:?}", other.map(|o| o.map(|(_, n)| n))),
            }
        }
    }

    #[test]
    fn temporary_names_are_recognised() {
        assert!(is_temporary_name("00000000000000000000.log#1"));
        assert!(is_temporary_name("a#123"));
        assert!(!is_temporary_name("a#"));
        assert!(!is_temporary_name("#1"));
        assert!(!is_temporary_name("a#1b"));
        assert!(!is_temporary_name("00000000000000000000.log"));
    }

    #[test]
    fn a_listing_of_versions_leaves_out_data_directories_by_position_only() {
        use segmirror_contract::manifest::{in_data_dir, is_data_dir, KeyPrefix};
        let prefix = KeyPrefix::new("m").unwrap();
        let lineage = "m/east/t/0/AAAAAAAAAAAAAAAAAAAAAQ";
        let chunk = format!("{lineage}/data/00000000000000000000/00000000000000000009/00000000000000000000.logchunk");
        let manifest = format!("{lineage}/manifests/00000000000000000000.json");
        // A topic named `data` is a topic, not a data directory.
        let data_topic = "m/east/data/0/AAAAAAAAAAAAAAAAAAAAAQ/manifests/00000000000000000000.json";
        let dir = tempfile::tempdir().unwrap();
        for key in [
            chunk.as_str(),
            manifest.as_str(),
            data_topic,
            "m/east/t/0/lease/00000000000000000001.json",
        ] {
            let path = dir.path().join(key);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"x").unwrap();
        }
        assert!(in_data_dir(&prefix, &chunk) && is_data_dir(&prefix, &format!("{lineage}/data")));
        assert!(!is_data_dir(&prefix, &chunk) && !is_data_dir(&prefix, "m/east/data"));
        assert!(!in_data_dir(&prefix, &manifest) && !in_data_dir(&prefix, data_topic));
        // The same position under another prefix is not one.
        assert!(!in_data_dir(&KeyPrefix::root(), &chunk));
        let listing = list_local_pruned(dir.path(), "m/east", &|k| is_data_dir(&prefix, k)).unwrap();
        let keys: Vec<&str> = listing.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                data_topic,
                manifest.as_str(),
                "m/east/t/0/lease/00000000000000000001.json"
            ]
        );
        assert!(listing.skipped.is_empty());
        assert_eq!(list_local(dir.path(), "m/east").unwrap().objects.len(), 4);
    }

    #[test]
    fn a_local_walk_skips_what_is_not_an_object_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/obj"), b"x").unwrap();
        std::fs::write(root.join("a/z"), b"y").unwrap();
        std::fs::write(root.join("a/b/obj#3"), b"partial").unwrap();
        std::fs::write(root.join("a/bad\nname"), b"z").unwrap();
        {
            use std::os::unix::ffi::OsStrExt;
            std::fs::write(root.join("a").join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff")), b"w").unwrap();
        }
        std::os::unix::fs::symlink(root.join("a"), root.join("a/b/loop")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("a/out")).unwrap();
        let fifo = root.join("a/fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let listing = list_local(root, "").unwrap();
        let keys: Vec<&str> = listing.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["a/b/obj", "a/z"]);
        let temp: Vec<&str> = listing.temporary.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(temp, ["a/b/obj#3"]);
        let skipped: Vec<&str> = listing.skipped.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            skipped,
            ["a/b/loop", "a/bad\nname", "a/fifo", "a/not-utf8-\u{fffd}", "a/out"]
        );
        assert!(listing.skipped[2].reason.contains("FIFO"), "{:?}", listing.skipped);
        assert!(listing.skipped[3].reason.contains("not UTF-8"), "{:?}", listing.skipped);
        assert!(listing.skipped[0].reason.contains("symbolic link"));
        // Under a prefix, and a prefix that does not exist.
        assert_eq!(list_local(root, "a/b").unwrap().objects.len(), 1);
        assert!(list_local(root, "nothing").unwrap().objects.is_empty());

        assert!(matches!(
            check_regular_file(root, "a/fifo"),
            Err(Error::NotRegularFile { .. })
        ));
        assert!(matches!(
            check_regular_file(root, "a/out"),
            Err(Error::NotRegularFile { .. })
        ));
        assert!(matches!(
            check_regular_file(root, "a/b/loop/z"),
            Err(Error::NotRegularFile { .. })
        ));
        check_regular_file(root, "a/b/obj").unwrap();
        check_regular_file(root, "a/missing").unwrap();
    }
}
