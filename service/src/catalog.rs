//! Where a mirror's catalog lives and how a command opens it: `--catalog`, else the mirror root's default catalog
//! in the data directory, never inside a Kafka log dir, bound to its mirror root.
//!
//! Why here: the services (`apply`, `failover`) and the commands (`promote`, `status`) all find and open the same
//! catalog, and must agree on the default and on the refusals; written once, none can drift from the others.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use segment_format::dir::META_PROPERTIES_FILE;
use segmirror_catalog::{canonical_mirror_root, default_catalog_for_mirror, default_data_dir, Catalog};

/// `--catalog`, or the data directory's own catalog; refused inside a broker log dir.
pub fn catalog_path(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match arg {
        Some(path) => path,
        None => segmirror_catalog::default_catalog_path()
            .context("no catalog location: set --catalog, SEGMIRROR_HOME or HOME")?,
    };
    refuse_inside_log_dir(&path)?;
    Ok(path)
}

fn refuse_inside_log_dir(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| d.join(META_PROPERTIES_FILE).exists()) {
        bail!(
            "catalog {} would be inside a Kafka log dir ({} holds {META_PROPERTIES_FILE}); choose another --catalog",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The data directory, or an error naming the variables that set it.
pub fn data_dir() -> anyhow::Result<PathBuf> {
    default_data_dir().context("no catalog location: set --catalog, SEGMIRROR_HOME or HOME")
}

/// The catalog of mirror root `mirror`: `--catalog`, else its default ([`default_catalog_for_mirror`]), with the
/// canonical root.
pub fn mirror_catalog_path(arg: Option<PathBuf>, mirror: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let root = canonical_mirror_root(mirror).with_context(|| format!("resolving mirror root {}", mirror.display()))?;
    let path = match arg {
        Some(path) => path,
        None => default_catalog_for_mirror(&data_dir()?, &root)?,
    };
    refuse_inside_log_dir(&path)?;
    Ok((path, root))
}

/// Opens the catalog of mirror root `mirror` (see [`mirror_catalog_path`]) and binds it to the root: a catalog
/// that records another root is refused with one line naming both (exit 2). `must_exist`: refuse to create one
/// (for commands that only use what `apply` recorded).
pub fn open_mirror_catalog(
    arg: Option<PathBuf>,
    mirror: &Path,
    must_exist: bool,
) -> anyhow::Result<(PathBuf, Catalog)> {
    let (path, root) = mirror_catalog_path(arg, mirror)?;
    if must_exist && !path.is_file() {
        bail!(
            "catalog {} does not exist (run `segmirror apply --mirror {}` first, or give --catalog)",
            path.display(),
            mirror.display()
        );
    }
    let mut catalog = Catalog::open(&path).with_context(|| format!("opening catalog {}", path.display()))?;
    // No context: the mismatch error is one line naming the catalog and both roots already.
    catalog.bind_mirror_root(&root)?;
    Ok((path, catalog))
}

/// Opens an existing catalog for a mirror root that does not exist, without binding the catalog to it: the command
/// (`promote`) then reports the missing root together with every other refusal, and a mistyped root is never
/// recorded anywhere.
pub fn open_catalog_of_missing_mirror(arg: Option<PathBuf>, mirror: &Path) -> anyhow::Result<(PathBuf, Catalog)> {
    let (path, _) = mirror_catalog_path(arg, mirror)?;
    if !path.is_file() {
        bail!("mirror root {} does not exist", mirror.display());
    }
    let catalog = Catalog::open(&path).with_context(|| format!("opening catalog {}", path.display()))?;
    Ok((path, catalog))
}

/// The catalog a `--link NAME` reads on the applier's host: `--catalog` (which must exist), else the mirror's
/// (`--mirror`, as for `segmirror status`); one of the two is needed.
pub fn open_link_catalog(catalog: Option<&Path>, mirror: Option<&Path>) -> anyhow::Result<Catalog> {
    match (catalog, mirror) {
        (Some(path), _) => {
            if !path.is_file() {
                bail!("catalog {} does not exist", path.display());
            }
            Catalog::open(path).with_context(|| format!("opening catalog {}", path.display()))
        }
        (None, Some(mirror)) => Ok(open_mirror_catalog(None, mirror, true)?.1),
        (None, None) => bail!("--link needs --mirror DIR (or --catalog PATH) to find the catalog"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_inside_a_log_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(META_PROPERTIES_FILE), b"version=1\n").unwrap();
        assert!(catalog_path(Some(dir.path().join("catalog.sqlite"))).is_err());
        let ok = dir.path().join("elsewhere/catalog.sqlite");
        assert_eq!(catalog_path(Some(ok.clone())).unwrap(), ok);
    }
}
