//! `segmirror serve --store URL`: the read-only Kafka endpoint straight from a bucket a shipper fills, without a
//! local mirror (the remote read replica, `segmirror_endpoint::bucket`).
//!
//! What this layer adds to the replica: the store opened from its URL (it must exist: a mistyped folder fails
//! rather than serving nothing), the cache directory, the loop that follows the bucket (one
//! [`BucketReplica::refresh`] every `poll_interval`, as `apply --follow` polls; a failure is logged once until it
//! clears), and a home for group offsets.
//!
//! Group offsets: without a mirror there is no mirror catalog, so consumer groups' committed offsets are kept in a
//! catalog of their own in the cache directory (`<cache-dir>/served-offsets.sqlite`, the catalog crate's
//! `served_offsets` table, the link recorded there on first use). They survive a restart of `serve` as long as the
//! cache directory does (the segment cache beside them is emptied at each start; the catalog is not). Nothing in
//! the bucket says a link was promoted, so this endpoint serves until it is shut down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use segmirror_catalog::{Catalog, LinkSpec};
use segmirror_endpoint::bucket::{BucketConfig, BucketReplica};
use segmirror_endpoint::Limits;
use segmirror_transport::direct::tls::TlsFiles;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{S3Options, Store, StoreUrl};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::serve::{CatalogOffsets, EndpointOptions, Running, Stopped};

/// How often the bucket is listed by default: the most a new manifest waits before a long-polling fetch sees it.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The file of the group offsets' catalog, in the cache directory.
pub const OFFSETS_CATALOG: &str = "served-offsets.sqlite";

/// What `segmirror serve --store` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeBucketOptions {
    /// Where the shipper writes: a local folder or `s3://bucket[/prefix]`.
    pub store: String,
    pub s3: S3Options,
    /// Key prefix inside the store (as `apply --prefix`; empty for none).
    pub prefix: String,
    pub link: String,
    /// The local cache: segment files fetched from the bucket, and the group offsets' catalog.
    pub cache_dir: PathBuf,
    /// The most bytes the cached segments take.
    pub cache_size: u64,
    /// How often the bucket is listed for new manifests.
    pub poll_interval: Duration,
    /// The address to listen on.
    pub listen: String,
    /// `HOST:PORT` clients are told to connect to; default: the listener's address.
    pub advertised: Option<String>,
    /// TLS (client certificates signed by its CA required); `None`: plaintext.
    pub tls: Option<TlsFiles>,
    pub limits: Limits,
}

/// The endpoint over a bucket, prepared: the store open, the listener bound, the bucket read once.
pub struct ServeBucketService {
    options: ServeBucketOptions,
    listener: TcpListener,
    replica: Arc<BucketReplica>,
    offsets: Arc<CatalogOffsets>,
}

impl ServeBucketService {
    /// Open the store (which must exist), prepare the cache directory and the offsets' catalog, bind the listener
    /// and follow the bucket once (a store that cannot be listed is an error here, rather than an endpoint serving
    /// nothing).
    pub async fn prepare(options: ServeBucketOptions) -> anyhow::Result<Self> {
        let url = StoreUrl::parse(&options.store).with_context(|| format!("store {}", options.store))?;
        let store = Store::open_existing(&url, &options.s3).with_context(|| format!("store {}", options.store))?;
        let prefix = KeyPrefix::new(&options.prefix)?;
        if options.cache_size == 0 {
            anyhow::bail!("the cache size must be at least one byte (it bounds the segments fetched)");
        }
        let config = BucketConfig {
            prefix,
            link: options.link.clone(),
            cache_dir: options.cache_dir.clone(),
            cache_size: options.cache_size,
        };
        // The cache first: it refuses a directory that is not one before anything is written there.
        let replica = BucketReplica::new(Arc::new(store), &config)
            .with_context(|| format!("cache directory {}", options.cache_dir.display()))?;
        let (dir, link, store_url) = (options.cache_dir.clone(), options.link.clone(), url.to_string());
        let offsets = tokio::task::spawn_blocking(move || open_offsets(&dir, &link, &store_url)).await??;
        let report = replica
            .refresh()
            .await
            .with_context(|| format!("reading link {} in {}", options.link, options.store))?;
        for failure in &report.failures {
            tracing::warn!("the bucket holds what cannot be served: {failure}");
        }
        let listener = TcpListener::bind(&options.listen)
            .await
            .with_context(|| format!("listening on {}", options.listen))?;
        Ok(Self {
            options,
            listener,
            replica: Arc::new(replica),
            offsets: Arc::new(offsets),
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The replica served (its ends, its cache's figures).
    pub fn replica(&self) -> &Arc<BucketReplica> {
        &self.replica
    }

    /// Serve until `shutdown`, following the bucket every poll interval.
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<Stopped> {
        let local = self.listener.local_addr()?;
        tracing::info!(
            link = %self.options.link,
            store = %self.options.store,
            listen = %local,
            tls = self.options.tls.is_some(),
            "serving the bucket read-only over the Kafka protocol"
        );
        let common = EndpointOptions {
            link: &self.options.link,
            advertised: self.options.advertised.as_deref(),
            tls: self.options.tls.as_ref(),
            limits: self.options.limits,
        };
        let running = Running::start(self.listener, self.replica.clone(), self.offsets.clone(), &common)?;
        let mut failing = false;
        let mut reported: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.options.poll_interval) => {}
            }
            match self.replica.refresh().await {
                Ok(report) => {
                    failing = false;
                    // Each failure once, until it clears.
                    for failure in report.failures.iter().filter(|f| !reported.contains(f)) {
                        tracing::warn!("the bucket holds what cannot be served: {failure}");
                    }
                    reported = report.failures;
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!("listing the bucket failed (serving what was read before): {e}");
                    }
                    failing = true;
                }
            }
        }
        running.stop().await;
        Ok(Stopped::Shutdown)
    }
}

/// The group offsets' catalog in `cache_dir`, with `link` recorded (created on first use).
fn open_offsets(cache_dir: &Path, link: &str, store_url: &str) -> anyhow::Result<CatalogOffsets> {
    std::fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let path = cache_dir.join(OFFSETS_CATALOG);
    let mut catalog = Catalog::open(&path).with_context(|| format!("catalog {}", path.display()))?;
    if catalog.link(link).is_err() {
        catalog
            .create_link(&LinkSpec {
                name: link.to_string(),
                store_url: store_url.to_string(),
                topics_regex: ".*".into(),
                groups_regex: None,
            })
            .with_context(|| format!("recording link {link} in {}", path.display()))?;
    }
    Ok(CatalogOffsets {
        catalog: Mutex::new(catalog),
        link: link.to_string(),
    })
}

#[cfg(test)]
#[path = "serve_bucket_tests.rs"]
pub(crate) mod tests;
