//! The catalog, called from async code without blocking the runtime.
//!
//! `Catalog` is synchronous (every commit waits for an fsync) and `Send` but not `Sync`. [`CatalogCell`] keeps it
//! behind a mutex and runs each call on a blocking thread holding the lock: one call at a time, never on a runtime
//! worker, from as many partitions as are installed at once (each call is one short transaction, so partitions
//! installing side by side only queue for the commits themselves). If a call's task dies (a panic in SQLite glue),
//! the lock is poisoned, the catalog counts as lost and every later call fails with [`Error::Task`]; committed state
//! is safe on disk either way.

use std::sync::{Arc, Mutex};

use segmirror_catalog::Catalog;

use crate::error::{Error, Result};

/// Owns the catalog between calls; shared by reference between the partitions of a run.
#[derive(Debug)]
pub(crate) struct CatalogCell {
    catalog: Arc<Mutex<Catalog>>,
}

fn lost(what: &str) -> Error {
    Error::Task {
        what: what.to_string(),
        message: "the catalog was lost by an earlier failed call".into(),
    }
}

impl CatalogCell {
    pub fn new(catalog: Catalog) -> Self {
        CatalogCell {
            catalog: Arc::new(Mutex::new(catalog)),
        }
    }

    /// Run `f` on a blocking thread with the catalog. `what` names the call in errors.
    pub async fn call<T, F>(&self, what: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Catalog) -> segmirror_catalog::Result<T> + Send + 'static,
    {
        let cell = Arc::clone(&self.catalog);
        let out = tokio::task::spawn_blocking(move || {
            let mut catalog = cell.lock().map_err(|_| lost(what))?;
            Ok::<_, Error>(f(&mut catalog))
        })
        .await
        .map_err(|e| Error::task(what, e))??;
        Ok(out?)
    }

    /// Like [`CatalogCell::call`], but hands back the catalog's own error for the caller to branch on.
    pub async fn try_call<T, F>(&self, what: &'static str, f: F) -> Result<segmirror_catalog::Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Catalog) -> segmirror_catalog::Result<T> + Send + 'static,
    {
        self.call(what, move |c| Ok(f(c))).await
    }

    /// The catalog back (after a run), unless a call died holding it.
    pub fn into_inner(self) -> Option<Catalog> {
        Arc::try_unwrap(self.catalog).ok()?.into_inner().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_from_many_tasks_take_turns_and_a_panic_loses_the_catalog() {
        let cell = CatalogCell::new(Catalog::open_in_memory().unwrap());
        let links = futures::future::join_all((0..8).map(|i| {
            let cell = &cell;
            async move {
                let spec = segmirror_catalog::LinkSpec {
                    name: format!("link-{i}"),
                    store_url: "file:///s".into(),
                    topics_regex: ".*".into(),
                    groups_regex: None,
                };
                cell.call("create link", move |c| c.create_link(&spec)).await
            }
        }))
        .await;
        assert!(links.iter().all(|l| l.is_ok()), "{links:?}");
        let died = cell
            .call("panic", |_| -> segmirror_catalog::Result<()> { panic!("injected") })
            .await;
        assert!(matches!(died, Err(Error::Task { .. })), "{died:?}");
        let after = cell.call("after", |c| c.link("link-0")).await;
        assert!(matches!(after, Err(Error::Task { .. })), "{after:?}");
        assert!(cell.into_inner().is_none());
    }
}
