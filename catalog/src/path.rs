//! Where the catalog lives by default.
//!
//! Never inside a broker log dir: a Kafka broker treats every directory in a log dir as a partition (or a
//! `-delete`/`-future` one) and refuses to start on a name it cannot parse, and a stray file there is swept up by
//! tools that copy or clean the log dir. The catalog also must outlive the mirror data it describes (it is how a
//! restarted applier knows what is already installed), so it lives in segmirror's own data directory, following the
//! XDG base directory convention, with `$SEGMIRROR_HOME` as an explicit override (and `--catalog PATH` in the CLI).

use std::ffi::OsString;
use std::path::PathBuf;

/// File name of the catalog inside segmirror's data directory.
pub const CATALOG_FILE_NAME: &str = "catalog.sqlite";

/// The default catalog path:
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
    let set = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(segmirror_home) {
        return Some(dir.join(CATALOG_FILE_NAME));
    }
    if let Some(dir) = set(xdg_data_home).filter(|p| p.is_absolute()) {
        return Some(dir.join("segmirror").join(CATALOG_FILE_NAME));
    }
    set(home).map(|h| h.join(".local/share/segmirror").join(CATALOG_FILE_NAME))
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
}
