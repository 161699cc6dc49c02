//! The catalog, called from async code without blocking the runtime.
//!
//! `Catalog` is synchronous (every commit waits for an fsync) and `Send` but not `Sync`. [`CatalogCell`] owns it and
//! moves it into `spawn_blocking` for each call, then takes it back: one call at a time, never on a runtime worker.
//! If a call's task dies (a panic in SQLite glue), the catalog is gone and every later call fails with
//! [`Error::Task`]; committed state is safe on disk either way.

use segmirror_catalog::Catalog;

use crate::error::{Error, Result};

/// Owns the catalog between calls.
#[derive(Debug)]
pub(crate) struct CatalogCell {
    catalog: Option<Catalog>,
}

impl CatalogCell {
    pub fn new(catalog: Catalog) -> Self {
        CatalogCell { catalog: Some(catalog) }
    }

    /// Run `f` on a blocking thread with the catalog. `what` names the call in errors.
    pub async fn call<T, F>(&mut self, what: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Catalog) -> segmirror_catalog::Result<T> + Send + 'static,
    {
        let mut catalog = self.catalog.take().ok_or_else(|| Error::Task {
            what: what.to_string(),
            message: "the catalog was lost by an earlier failed call".into(),
        })?;
        let (catalog, out) = tokio::task::spawn_blocking(move || {
            let out = f(&mut catalog);
            (catalog, out)
        })
        .await
        .map_err(|e| Error::task(what, e))?;
        self.catalog = Some(catalog);
        Ok(out?)
    }

    /// Like [`CatalogCell::call`], but hands back the catalog's own error for the caller to branch on.
    pub async fn try_call<T, F>(&mut self, what: &'static str, f: F) -> Result<segmirror_catalog::Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Catalog) -> segmirror_catalog::Result<T> + Send + 'static,
    {
        self.call(what, move |c| Ok(f(c))).await
    }

    /// The catalog back (after a run).
    pub fn into_inner(self) -> Option<Catalog> {
        self.catalog
    }
}
