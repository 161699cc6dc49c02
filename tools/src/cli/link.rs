//! The `--connect`/`--listen` and `--plaintext`/`--tls-*` flags of the two long-running direct-transport services
//! (`ship`, `apply --listen|--connect`); the link they describe is run by `segmirror_service::link`.
//!
//! Why one set of flags: both ends of a link must accept exactly the same security flags, so an operator reads one
//! set for both.

use std::path::PathBuf;

pub use segmirror_service::link::{shutdown_on_signal, EndpointConfig};

/// Where the link goes and how it is secured. Exactly one of `--connect`/`--listen`, exactly one of
/// `--plaintext`/`--tls-cert` (with `--tls-key` and `--tls-ca`).
#[derive(clap::Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("direction").required(true).args(["connect", "listen"])))]
#[command(group(clap::ArgGroup::new("security").required(true).args(["plaintext", "tls_cert"])))]
pub struct LinkArgs {
    /// Read settings from this TOML file (keys: the flags' names, e.g. `log-dir`, `tls-cert`; see docs/config.md);
    /// a flag given here overrides the file's key.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The link's name; both ends must give the same one.
    #[arg(long, value_name = "NAME")]
    pub link: String,
    /// Dial the peer at HOST:PORT (reconnecting with backoff after a cut).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// Listen on ADDR (e.g. 0.0.0.0:9400) and serve one peer at a time.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// No TLS: only on a trusted network (loopback, a VPN). Excludes the --tls-* flags.
    #[arg(long)]
    pub plaintext: bool,
    /// This side's certificate chain (PEM, leaf first); mutual TLS with --tls-key and --tls-ca.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// This side's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the peer's certificate.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// With --connect and TLS: the name the server's certificate must carry (default: the host of --connect).
    #[arg(long, value_name = "NAME", requires = "connect")]
    pub tls_server_name: Option<String>,
}

impl LinkArgs {
    /// The endpoint these flags name.
    pub fn endpoint_config(&self) -> EndpointConfig {
        EndpointConfig {
            link: self.link.clone(),
            connect: self.connect.clone(),
            listen: self.listen.clone(),
            plaintext: self.plaintext,
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_server_name: self.tls_server_name.clone(),
        }
    }
}
