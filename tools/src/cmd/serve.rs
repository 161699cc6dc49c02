//! `segmirror serve`: the flags of the read-only Kafka endpoint over a mirror root
//! (`segmirror_service::serve`, which says what is served and why), run until SIGTERM or SIGINT, or until the
//! link is promoted or deleted (then it says where the topics live now and exits 0).
//!
//! Exit status: 0 after a signal or once the link is closed, 2 on usage errors and when the mirror's catalog or
//! the link cannot be read at start.

use std::path::PathBuf;
use std::process::ExitCode;

use segmirror_endpoint::{Limits, ReplicaState};
use segmirror_service::serve::{ServeOptions, ServeService, Stopped};
use segmirror_transport::direct::tls::TlsFiles;

use crate::cli::catalog::CATALOG_HELP;
use crate::cli::link::shutdown_on_signal;
use crate::cli::runtime::Runtime;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("security").required(true).args(["plaintext", "tls_cert"])))]
pub struct Args {
    /// The mirror root an applier (`segmirror apply`) fills.
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// The catalog of that mirror (the applier's `--catalog`).
    #[arg(long, value_name = "PATH", long_help = CATALOG_HELP)]
    catalog: Option<PathBuf>,
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
    let options = ServeOptions {
        mirror: args.mirror,
        catalog: args.catalog,
        link: args.link.clone(),
        listen: args.listen,
        advertised: args.advertised_listener,
        tls,
        limits,
    };
    let link = args.link;
    let stopped = runtime.block_on(async {
        let shutdown = shutdown_on_signal()?;
        let service = ServeService::prepare(options).await?;
        eprintln!("segmirror serve: link {link} on {}", service.local_addr()?);
        service.serve(shutdown).await
    })??;
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
