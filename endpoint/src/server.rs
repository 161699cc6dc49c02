//! The listener: accepts clients (plaintext or TLS), reads their request frames within bounds, answers them in
//! order, and keeps every client's cost bounded.
//!
//! Why the limits (`config::Limits`) are applied here and not in the handlers: a hostile or broken client shows itself first as bytes on a
//! socket. The frame size is checked before a byte of the body is read, a connection over the limit is closed at
//! once, an idle one after `idle`, and a request that does not decode ends that connection only (Kafka does the
//! same: it closes the channel of a request it cannot parse). One request at a time per connection, as a Kafka
//! broker processes them, so a client cannot queue unbounded work; the bytes of fetch responses in flight, over
//! all clients, are bounded by one semaphore (`handle::Endpoint`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::handle::Endpoint;

mod connection;

pub use connection::{ClientStream, ConnectionError};

/// Serve `endpoint` on `listener` until `shutdown` completes; TLS when `tls` is given (client certificates as that
/// config requires). Returns when shut down; an accept error is logged and retried after a pause.
pub async fn serve(
    listener: TcpListener,
    endpoint: Arc<Endpoint>,
    tls: Option<Arc<ServerConfig>>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(endpoint.limits().max_connections));
    let acceptor = tls.map(TlsAcceptor::from);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or a reset before accept: pause rather than spin.
                tracing::warn!(error = %e, "accepting a client failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "refusing a client: {} connections already served", endpoint.limits().max_connections);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let endpoint = endpoint.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match acceptor {
                None => run(stream, &endpoint, peer).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await;
                    match handshake {
                        Ok(Ok(tls)) => run(tls, &endpoint, peer).await,
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake refused"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serve one client on an established stream (TLS already done) until it closes or is refused: what [`serve`]
/// runs per connection, public so that tests and fuzz targets can drive it over an in-memory pipe.
pub async fn serve_connection<S: ClientStream>(
    stream: S,
    endpoint: &Endpoint,
    peer: Option<std::net::SocketAddr>,
) -> Result<(), connection::ConnectionError> {
    connection::Connection::new(stream, endpoint, peer).run().await
}

async fn run<S: ClientStream>(stream: S, endpoint: &Endpoint, peer: std::net::SocketAddr) {
    match serve_connection(stream, endpoint, Some(peer)).await {
        Ok(()) => tracing::debug!(%peer, "client closed"),
        Err(e) => tracing::info!(%peer, "client connection ended: {e}"),
    }
}
