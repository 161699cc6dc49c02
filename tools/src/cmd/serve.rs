//! `segmirror serve`: the flags of the read-only Kafka endpoint, over a mirror root (`--mirror`,
//! `segmirror_service::serve`) or straight over a bucket a shipper fills (`--store`, the remote read replica,
//! `segmirror_service::serve_bucket`), each saying what is served and why. Runs until SIGTERM or SIGINT, or until
//! the link is promoted or deleted (then it says where the topics live now and exits 0).
//!
//! Exit status: 0 after a signal or once the link is closed, 2 on usage errors and when the mirror's catalog or
//! the link cannot be read at start.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use segmirror_endpoint::{Limits, ReplicaState};
use segmirror_service::serve::{ServeOptions, ServeService, Stopped};
use segmirror_service::serve_bucket::{ServeBucketOptions, ServeBucketService, DEFAULT_POLL_INTERVAL};
use segmirror_transport::direct::tls::TlsFiles;

use crate::cli::catalog::CATALOG_HELP;
use crate::cli::link::shutdown_on_signal;
use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("security").required(true).args(["plaintext", "tls_cert"])))]
#[command(group(clap::ArgGroup::new("replica").required(true).args(["mirror", "store"])))]
pub struct Args {
    /// Serve the mirror root an applier (`segmirror apply`) fills.
    #[arg(long, value_name = "DIR")]
    mirror: Option<PathBuf>,
    /// The catalog of that mirror (the applier's `--catalog`).
    #[arg(long, value_name = "PATH", long_help = CATALOG_HELP, conflicts_with = "store")]
    catalog: Option<PathBuf>,
    /// Serve straight from the bucket a `segmirror ship --store` fills, without a mirror (a remote read replica):
    /// a local folder or s3://bucket[/prefix]. Segment versions are fetched on demand into --cache-dir, checked
    /// against their manifests' sizes, CRC-32C and SHA-256 before they are served; new manifests are followed.
    #[arg(long, value_name = "URL", requires_all = ["cache_dir"])]
    store: Option<String>,
    /// With --store: key prefix inside the store, as given to the shipper's --prefix.
    #[arg(long, value_name = "P", default_value = "", requires = "store")]
    prefix: String,
    /// With --store: the local cache of fetched segments and the groups' committed offsets (created, and emptied
    /// at start when it is one of ours; a directory holding anything else is refused).
    #[arg(long, value_name = "DIR", requires = "store")]
    cache_dir: Option<PathBuf>,
    /// With --store: MiB the cached segments may take (least recently used segments are dropped first).
    #[arg(long, value_name = "MIB", default_value_t = 1024, requires = "store")]
    cache_size: u64,
    /// With --store: milliseconds between two looks at the store for new manifests.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_POLL_INTERVAL.as_millis() as u64, requires = "store")]
    poll_interval_ms: u64,
    #[command(flatten)]
    s3: S3Args,
    /// The link whose mirror partitions are served.
    #[arg(long, value_name = "NAME")]
    link: String,
    /// Listen for Kafka clients on ADDR (HOST:PORT; port 0 picks a free one, printed at start).
    #[arg(long, value_name = "ADDR")]
    listen: String,
    /// The HOST:PORT clients are told to connect to (Metadata, FindCoordinator), when it is not the listener's
    /// own address: behind NAT, a load balancer or in a container.
    #[arg(long, value_name = "HOST:PORT")]
    advertised_listener: Option<String>,
    /// No TLS: for loopback and trusted networks only.
    #[arg(long)]
    plaintext: bool,
    /// This endpoint's certificate chain (PEM, leaf first); clients must present a certificate signed by --tls-ca.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// This endpoint's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the clients' certificates.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// Clients served at once; one more is closed as soon as it connects.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// MiB of record data held for fetch responses, over all clients at once (a fetch waits for its share).
    #[arg(long, value_name = "MIB", default_value_t = Limits::default().fetch_memory_bytes >> 20)]
    fetch_memory: usize,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let tls = match (args.tls_cert, args.tls_key, args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(TlsFiles { cert, key, ca }),
        _ => None,
    };
    let limits = Limits {
        max_connections: args.max_connections.max(1),
        fetch_memory_bytes: args.fetch_memory.max(1).saturating_mul(1 << 20),
        ..Limits::default()
    };
    let link = args.link.clone();
    let stopped = match (args.mirror, args.store) {
        (Some(mirror), _) => {
            let options = ServeOptions {
                mirror,
                catalog: args.catalog,
                link: args.link,
                listen: args.listen,
                advertised: args.advertised_listener,
                tls,
                limits,
            };
            runtime.block_on(async {
                let shutdown = shutdown_on_signal()?;
                let service = ServeService::prepare(options).await?;
                eprintln!("segmirror serve: link {link} on {}", service.local_addr()?);
                service.serve(shutdown).await
            })??
        }
        (None, Some(store)) => {
            let cache_dir = args.cache_dir.context("--store needs --cache-dir")?;
            let options = ServeBucketOptions {
                store,
                s3: args.s3.options(),
                prefix: args.prefix,
                link: args.link,
                cache_dir,
                cache_size: args.cache_size.max(1).saturating_mul(1 << 20),
                poll_interval: Duration::from_millis(args.poll_interval_ms.max(1)),
                listen: args.listen,
                advertised: args.advertised_listener,
                tls,
                limits,
            };
            runtime.block_on(async {
                let shutdown = shutdown_on_signal()?;
                let service = ServeBucketService::prepare(options).await?;
                eprintln!("segmirror serve: link {link} on {}", service.local_addr()?);
                service.serve(shutdown).await
            })??
        }
        (None, None) => anyhow::bail!("give --mirror DIR or --store URL"),
    };
    match stopped {
        Stopped::Shutdown => eprintln!("segmirror serve: stopped"),
        Stopped::LinkClosed(ReplicaState::Promoted { target }) => eprintln!(
            "segmirror serve: link {link} was promoted: its topics are read and written on the target cluster{} now",
            target.map(|t| format!(" ({t})")).unwrap_or_default()
        ),
        Stopped::LinkClosed(_) => eprintln!("segmirror serve: link {link} was deleted: nothing to serve"),
    }
    Ok(ExitCode::SUCCESS)
}
