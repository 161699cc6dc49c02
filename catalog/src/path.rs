//! Where the catalog lives by default.
//!
//! Never inside a broker log dir: a Kafka broker treats every directory in a log dir as a partition (or a
//! `-delete`/`-future` one) and refuses to start on a name it cannot parse, and a stray file there is swept up by
//! tools that copy or clean the log dir. The catalog also must outlive the mirror data it describes (it is how a
//! restarted applier knows what is already installed), so it lives in segmirror's own data directory, following the
//! XDG base directory convention, with `$SEGMIRROR_HOME` as an explicit override (and `--catalog PATH` in the CLI).
//! Not beside the mirror root either: a mirror root may itself sit in (or become) a broker's log dir parent, and
//! a user who deletes a mirror must not take another mirror's state with it.
//!
//! One catalog per mirror root: a catalog's rows describe files under one root (see [`crate::MirrorBinding`]), so
//! two mirrors on one host must never share one. The data directory's `catalog.sqlite` (the only catalog before
//! per-mirror catalogs existed) belongs to the first mirror root that uses it; every other root gets
//! `mirrors/<root's file name>-<hash of the canonical root>/catalog.sqlite`. This keeps an existing single-mirror
//! setup where it was, and a second mirror on the same host separate ([`default_catalog_for_mirror`]).

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::mirror_root::recorded_mirror_root;

/// File name of the catalog inside segmirror's data directory.
pub const CATALOG_FILE_NAME: &str = "catalog.sqlite";

/// Folder of the data directory that holds the catalogs of the second and further mirror roots.
pub const MIRRORS_DIR: &str = "mirrors";

/// Hex digits of the canonical root's SHA-256 in a per-mirror folder name: 64 bits make a collision between the
/// few mirrors of one host negligible while keeping the name short enough to read and type.
pub const ROOT_HASH_HEX_DIGITS: usize = 16;

/// Longest part of the root's file name kept in a per-mirror folder name; it is only there for people to recognise
/// the folder (the hash is what keys it), and file names can be 255 bytes.
pub const ROOT_NAME_MAX_CHARS: usize = 40;

/// segmirror's data directory: `$SEGMIRROR_HOME`, else `$XDG_DATA_HOME/segmirror`, else
/// `$HOME/.local/share/segmirror` (same rules as [`default_catalog_path`]).
pub fn default_data_dir() -> Option<PathBuf> {
    data_dir_from(
        std::env::var_os("SEGMIRROR_HOME"),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// The data directory's own catalog (the one catalog before per-mirror catalogs; now the first mirror root's):
/// `$SEGMIRROR_HOME/catalog.sqlite`, else `$XDG_DATA_HOME/segmirror/catalog.sqlite`, else
/// `$HOME/.local/share/segmirror/catalog.sqlite`. Empty variables count as unset, and so does a relative
/// `XDG_DATA_HOME` (the XDG specification says to ignore it). `None` when not even `HOME` is set.
pub fn default_catalog_path() -> Option<PathBuf> {
    catalog_path_from(
        std::env::var_os("SEGMIRROR_HOME"),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// The rule of [`default_catalog_path`] on explicit values, so it is testable without touching the environment.
fn catalog_path_from(
    segmirror_home: Option<OsString>,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    data_dir_from(segmirror_home, xdg_data_home, home).map(|d| d.join(CATALOG_FILE_NAME))
}

fn data_dir_from(
    segmirror_home: Option<OsString>,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let set = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(segmirror_home) {
        return Some(dir);
    }
    if let Some(dir) = set(xdg_data_home).filter(|p| p.is_absolute()) {
        return Some(dir.join("segmirror"));
    }
    set(home).map(|h| h.join(".local/share/segmirror"))
}

/// `root` as one canonical absolute path, so that two spellings of one directory (relative, through a symlink,
/// with `..`) key one catalog. The root need not exist yet (`apply` creates it): its longest existing ancestor is
/// canonicalised and the rest appended, with `.` dropped and `..` applied.
pub fn canonical_mirror_root(root: &Path) -> io::Result<PathBuf> {
    let absolute = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir()?.join(root)
    };
    // Left to right: while the path exists, each step is canonicalised (resolving a symlink there); `out` is then
    // free of symlinks, so `..` is popping a component. Past the first missing component nothing can be a symlink.
    let mut out = PathBuf::new();
    let mut exists = true;
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if exists {
                    match out.canonicalize() {
                        Ok(canonical) => out = canonical,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => exists = false,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The per-mirror catalog path of a canonical root: `<data dir>/mirrors/<name>-<hash>/catalog.sqlite`, where
/// `<name>` is the root's file name with characters other than ASCII letters, digits, `.`, `_`, `-` replaced by
/// `_` (cut to [`ROOT_NAME_MAX_CHARS`]; `root` for `/`), and `<hash>` the first [`ROOT_HASH_HEX_DIGITS`] hex
/// digits of the SHA-256 of the canonical path's bytes.
pub fn mirror_catalog_path(data_dir: &Path, canonical_root: &Path) -> PathBuf {
    let name: String = canonical_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "root".to_string())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(ROOT_NAME_MAX_CHARS)
        .collect();
    let digest = Sha256::digest(canonical_root.as_os_str().as_encoded_bytes());
    let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    data_dir
        .join(MIRRORS_DIR)
        .join(format!("{name}-{}", &hash[..ROOT_HASH_HEX_DIGITS]))
        .join(CATALOG_FILE_NAME)
}

/// The default catalog of a canonical mirror root, in this order:
/// 1. the data directory's `catalog.sqlite` when it records this root;
/// 2. the root's per-mirror catalog ([`mirror_catalog_path`]) when it exists;
/// 3. the data directory's `catalog.sqlite` when it does not exist yet or records no root (a catalog from before
///    per-mirror catalogs: it adopts this root when the caller binds it);
/// 4. otherwise (it belongs to another root) the per-mirror catalog, to be created.
///
/// Nothing is created or changed here; the existing catalogs are only read.
pub fn default_catalog_for_mirror(data_dir: &Path, canonical_root: &Path) -> Result<PathBuf> {
    let shared = data_dir.join(CATALOG_FILE_NAME);
    let own = mirror_catalog_path(data_dir, canonical_root);
    let shared_root = if shared.is_file() {
        Some(recorded_mirror_root(&shared)?)
    } else {
        None
    };
    Ok(match shared_root {
        Some(Some(recorded)) if recorded == canonical_root => shared,
        _ if own.is_file() => own,
        None | Some(None) => shared,
        Some(Some(_)) => own,
    })
}

/// Every catalog in a data directory: its `catalog.sqlite` (when present) first, then the per-mirror catalogs in
/// name order. For commands that take no mirror (`segmirror status`).
pub fn catalogs_in(data_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let shared = data_dir.join(CATALOG_FILE_NAME);
    if shared.is_file() {
        found.push(shared);
    }
    let mut per_mirror = Vec::new();
    match std::fs::read_dir(data_dir.join(MIRRORS_DIR)) {
        Ok(entries) => {
            for entry in entries {
                let path = entry?.path().join(CATALOG_FILE_NAME);
                if path.is_file() {
                    per_mirror.push(path);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    per_mirror.sort();
    found.extend(per_mirror);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn segmirror_home_wins() {
        assert_eq!(
            catalog_path_from(os("/srv/sm"), os("/xdg"), os("/home/u")),
            Some(PathBuf::from("/srv/sm/catalog.sqlite"))
        );
    }

    #[test]
    fn xdg_data_home_next() {
        assert_eq!(
            catalog_path_from(None, os("/xdg"), os("/home/u")),
            Some(PathBuf::from("/xdg/segmirror/catalog.sqlite"))
        );
        assert_eq!(
            catalog_path_from(os(""), os("/xdg"), os("/home/u")),
            Some(PathBuf::from("/xdg/segmirror/catalog.sqlite")),
            "an empty SEGMIRROR_HOME is unset"
        );
    }

    #[test]
    fn home_last_and_relative_xdg_ignored() {
        assert_eq!(
            catalog_path_from(None, os("relative/dir"), os("/home/u")),
            Some(PathBuf::from("/home/u/.local/share/segmirror/catalog.sqlite"))
        );
        assert_eq!(
            catalog_path_from(None, None, os("/home/u")),
            Some(PathBuf::from("/home/u/.local/share/segmirror/catalog.sqlite"))
        );
        assert_eq!(catalog_path_from(None, None, None), None);
        assert_eq!(catalog_path_from(None, os(""), os("")), None);
    }

    #[test]
    fn per_mirror_path_is_name_plus_hash_and_differs_per_root() {
        let home = Path::new("/srv/sm");
        let a = mirror_catalog_path(home, Path::new("/data/mirror"));
        let b = mirror_catalog_path(home, Path::new("/other/mirror"));
        let folder = a.parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(a.parent().unwrap().parent().unwrap(), home.join(MIRRORS_DIR));
        assert_eq!(a.file_name().unwrap(), CATALOG_FILE_NAME);
        let (name, hash) = folder.rsplit_once('-').unwrap();
        assert_eq!(name, "mirror");
        assert_eq!(hash.len(), ROOT_HASH_HEX_DIGITS);
        // sha256("/data/mirror"), first 16 hex digits (computed independently with sha256sum).
        assert_eq!(hash, "dbd1f26a06df1515");
        assert_ne!(a, b, "same file name, different roots, different catalogs");
        assert_eq!(a, mirror_catalog_path(home, Path::new("/data/mirror")), "stable");
        let odd = mirror_catalog_path(home, Path::new("/x/my mirror\u{e9}:1"));
        let odd = odd.parent().unwrap().file_name().unwrap().to_str().unwrap();
        assert!(odd.starts_with("my_mirror__1-"), "{odd}");
        let root = mirror_catalog_path(home, Path::new("/"));
        assert!(root
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("root-"));
    }

    #[test]
    fn canonical_root_resolves_symlinks_dots_and_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        assert_eq!(canonical_mirror_root(&real.join("./sub/../")).unwrap(), real);
        assert_eq!(
            canonical_mirror_root(&real.join("not/yet/../there")).unwrap(),
            real.join("not/there")
        );
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(&real, &link).unwrap();
            assert_eq!(canonical_mirror_root(&link).unwrap(), real);
            assert_eq!(canonical_mirror_root(&link.join("m")).unwrap(), real.join("m"));
        }
    }

    #[test]
    fn the_shared_catalog_belongs_to_the_first_root_and_others_get_their_own() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let (a, b) = (Path::new("/m/a"), Path::new("/m/b"));
        let shared = home.join(CATALOG_FILE_NAME);
        // Nothing yet: the first mirror takes the shared catalog.
        assert_eq!(default_catalog_for_mirror(home, a).unwrap(), shared);
        crate::Catalog::open(&shared).unwrap().bind_mirror_root(a).unwrap();
        assert_eq!(default_catalog_for_mirror(home, a).unwrap(), shared);
        // Another mirror gets its own, before and after it exists.
        let own_b = mirror_catalog_path(home, b);
        assert_eq!(default_catalog_for_mirror(home, b).unwrap(), own_b);
        crate::Catalog::open(&own_b).unwrap().bind_mirror_root(b).unwrap();
        assert_eq!(default_catalog_for_mirror(home, b).unwrap(), own_b);
        assert_eq!(catalogs_in(home).unwrap(), vec![shared.clone(), own_b.clone()]);
    }

    #[test]
    fn an_unrecorded_shared_catalog_is_adopted_unless_the_root_has_its_own() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        let shared = home.join(CATALOG_FILE_NAME);
        drop(crate::Catalog::open(&shared).unwrap()); // a catalog from before: no root recorded
        assert_eq!(default_catalog_for_mirror(home, Path::new("/m/a")).unwrap(), shared);
        let own_b = mirror_catalog_path(home, Path::new("/m/b"));
        drop(crate::Catalog::open(&own_b).unwrap());
        assert_eq!(default_catalog_for_mirror(home, Path::new("/m/b")).unwrap(), own_b);
        assert!(catalogs_in(&home.join("nothing-here")).unwrap().is_empty());
    }
}
