//! What the two long-running direct-transport services (ship, direct apply) share: the connect/listen choice, the
//! plaintext/TLS choice, turning them into a [`Dialer`]/[`Acceptor`], logging the link's events, and the
//! SIGTERM/SIGINT shutdown token.
//!
//! Why here: both ends of a link must be secured the same way and report the link the same way; written once, an
//! operator configures and reads both ends of a link alike.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::session::link::{
    dial, listen, Acceptor, Dialer, LinkConfig, LinkEvent, SessionRunner,
};
use segmirror_transport::direct::tls::{client_config, server_config, TlsFiles};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::admin_port::figures::LinkMeter;

/// Link events buffered for the logger (64): events are a few per reconnect, and the link drops one rather than
/// block when the logger lags.
const EVENT_QUEUE: usize = 64;

/// Where the link goes and how it is secured: exactly one of `connect`/`listen`, and `plaintext` or all three TLS
/// files (the command line's `--connect`/`--listen`, `--plaintext`/`--tls-*`).
#[derive(Clone, Debug, Default)]
pub struct EndpointConfig {
    /// The link's name; both ends must give the same one.
    pub link: String,
    /// Dial the peer at HOST:PORT (reconnecting with backoff after a cut).
    pub connect: Option<String>,
    /// Listen on ADDR and serve one peer at a time.
    pub listen: Option<String>,
    /// No TLS.
    pub plaintext: bool,
    /// This side's certificate chain (PEM, leaf first).
    pub tls_cert: Option<PathBuf>,
    /// This side's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the peer's certificate.
    pub tls_ca: Option<PathBuf>,
    /// With `connect` and TLS: the name the server's certificate must carry (default: the host of `connect`).
    pub tls_server_name: Option<String>,
}

/// The link, ready to run: a dial target or a bound listener.
pub enum Endpoint {
    Dial { addr: String, dialer: Dialer },
    Listen { listener: TcpListener, acceptor: Acceptor },
}

impl EndpointConfig {
    fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            ca: self.tls_ca.clone()?,
        })
    }

    /// Loads the PEM files (an error names the file) and, for `--listen`, binds the socket. Async: binding needs
    /// the runtime.
    pub async fn endpoint(&self) -> anyhow::Result<Endpoint> {
        let tls = self.tls_files();
        if !self.plaintext && tls.is_none() {
            bail!("give --plaintext or all of --tls-cert, --tls-key and --tls-ca");
        }
        if let Some(addr) = &self.connect {
            let dialer = match tls {
                None => Dialer::Plain,
                Some(files) => {
                    let config = client_config(&files)?;
                    let server_name = match &self.tls_server_name {
                        Some(name) => name.clone(),
                        None => host_of(addr)?,
                    };
                    Dialer::Tls { config, server_name }
                }
            };
            return Ok(Endpoint::Dial {
                addr: addr.clone(),
                dialer,
            });
        }
        let Some(addr) = &self.listen else {
            bail!("give --connect HOST:PORT or --listen ADDR");
        };
        let acceptor = match tls {
            None => Acceptor::Plain,
            Some(files) => Acceptor::Tls(server_config(&files)?),
        };
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let bound = listener.local_addr().context("the listening address")?;
        tracing::info!(link = %self.link, %bound, "listening");
        eprintln!("segmirror: link {:?}: listening on {bound}", self.link);
        Ok(Endpoint::Listen { listener, acceptor })
    }
}

/// The host part of HOST:PORT or [IPv6]:PORT.
fn host_of(addr: &str) -> anyhow::Result<String> {
    let (host, _port) = addr
        .rsplit_once(':')
        .with_context(|| format!("--connect {addr:?} is not HOST:PORT"))?;
    Ok(host.trim_start_matches('[').trim_end_matches(']').to_string())
}

/// A token cancelled on the first SIGTERM or SIGINT (Ctrl-C).
pub fn shutdown_on_signal() -> anyhow::Result<CancellationToken> {
    let token = CancellationToken::new();
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let cancel = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        cancel.cancel();
    });
    Ok(token)
}

/// Prints every link event as one line on stderr (and as a tracing event), and counts it in `meter`, until the
/// link config is dropped.
fn spawn_event_logger(link: String, role: &'static str, meter: Option<Arc<LinkMeter>>) -> mpsc::Sender<LinkEvent> {
    let (tx, mut rx) = mpsc::channel(EVENT_QUEUE);
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if let Some(meter) = &meter {
                match &event {
                    LinkEvent::SessionStarted => meter.session_started(),
                    LinkEvent::SessionEnded { error, .. } => meter.session_ended(error.is_some()),
                    LinkEvent::ConnectFailed { .. }
                    | LinkEvent::Paused { .. }
                    | LinkEvent::RefusedBusy
                    | LinkEvent::NoHandshakeSlot { .. } => meter.error(),
                }
            }
            let line = match &event {
                LinkEvent::SessionStarted => "connected: session started".to_string(),
                LinkEvent::SessionEnded { end, error } => match (end, error) {
                    (_, Some((class, e))) => format!("session ended ({class:?}): {e}"),
                    (Some(end), None) => format!("session ended: {end:?}"),
                    (None, None) => "session ended".to_string(),
                },
                LinkEvent::ConnectFailed { error } => format!("connect failed: {error}; reconnecting"),
                LinkEvent::Paused { error, pause } => format!("refused: {error}; paused for {pause:?}"),
                LinkEvent::RefusedBusy => "refused a second peer (busy)".to_string(),
                LinkEvent::NoHandshakeSlot {
                    peer,
                    pending,
                    from_address,
                } => format!(
                    "no free handshake slot for {peer} ({pending} connections in their handshake, {from_address} from \
                     its address): answered busy and closed"
                ),
            };
            tracing::info!(%link, role, event = ?event, "link event");
            eprintln!("segmirror {role}: link {link:?}: {line}");
        }
    });
    tx
}

/// The link settings of one side, with events logged (and counted in `meter`, for `--metrics-addr`).
pub fn link_config(
    handshake: HandshakeConfig,
    refusal_pause: Option<Duration>,
    role: &'static str,
    meter: Option<Arc<LinkMeter>>,
) -> LinkConfig {
    let link = handshake.link.clone();
    let mut config = LinkConfig::new(handshake);
    if let Some(pause) = refusal_pause {
        config.refusal_pause = pause;
    }
    config.events = Some(spawn_event_logger(link, role, meter));
    config
}

/// Runs `runner` on the endpoint until `shutdown`: dialling (reconnecting after cuts) or listening (one peer at a
/// time). `Ok` on shutdown; an error only for this side's own failure (the mirror, the source).
pub async fn run_link<R: SessionRunner>(
    endpoint: Endpoint,
    config: LinkConfig,
    mut runner: R,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    match endpoint {
        Endpoint::Dial { addr, dialer } => Ok(dial(&addr, &dialer, &config, &mut runner, &shutdown).await?),
        Endpoint::Listen { listener, acceptor } => {
            let (_runner, r) = listen(listener, acceptor, config, runner, shutdown).await;
            Ok(r?)
        }
    }
}
