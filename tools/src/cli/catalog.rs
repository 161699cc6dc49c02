//! The `--catalog` flag's help and the `--mirror`/`--catalog` pair of the commands that take `--link NAME`; where a
//! mirror's catalog lives and how it is opened is `segmirror_service::catalog`.
//!
//! Why here: every command that takes `--catalog` shows the same help for it; written once, none can drift.

use std::path::PathBuf;

use segmirror_catalog::Catalog;
pub use segmirror_service::catalog::{
    catalog_path, mirror_catalog_path, open_catalog_of_missing_mirror, open_link_catalog, open_mirror_catalog,
};

/// The default catalog location, shown under `--help` of every command that takes `--catalog`.
pub const CATALOG_HELP: &str = "\
Catalog: --catalog PATH, else the default catalog of the mirror root, one per mirror root, in segmirror's data \
directory ($SEGMIRROR_HOME, else $XDG_DATA_HOME/segmirror, else ~/.local/share/segmirror): the data directory's \
catalog.sqlite belongs to the first mirror root that uses it (a catalog from before per-mirror catalogs adopts the \
first mirror root it is used with, so an existing setup keeps working); every other mirror root gets \
mirrors/<name>-<hash of the canonical root>/catalog.sqlite. A catalog records its mirror root and refuses another \
one (exit 2). Never inside a broker log dir: a broker takes every directory there for a partition, and the catalog \
must outlive the mirror data it describes.";

/// `--mirror` and `--catalog` beside a command's `--link NAME` (`offsets`, `offsets commit`, `topics`): where the
/// applier's catalog is, read by [`open_link_catalog`].
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LinkCatalogArgs {
    /// With --link: the mirror root the catalog belongs to (`segmirror apply --mirror`).
    #[arg(long, value_name = "DIR", requires = "link")]
    pub mirror: Option<PathBuf>,
    /// With --link: the catalog to read (default: the mirror's, as for `segmirror status`).
    #[arg(long, value_name = "PATH", requires = "link")]
    pub catalog: Option<PathBuf>,
}

impl LinkCatalogArgs {
    /// The catalog these flags name.
    pub fn open(&self) -> anyhow::Result<Catalog> {
        open_link_catalog(self.catalog.as_deref(), self.mirror.as_deref())
    }
}
