//! A fault-injecting TCP proxy on loopback, for tests of links that must
//! survive a bad network: it forwards every accepted connection to one
//! upstream address and, on command, closes all current connections (FIN),
//! resets them (RST), stalls them (holds bytes, connections stay open: what a
//! dead NAT mapping or a cable cut looks like from both ends), or throttles
//! them to N bytes per second per direction.
//!
//! Commands act on the connections open at that moment (drop, reset) or on
//! all forwarding from then on (stall, throttle, pass); new connections are
//! always accepted, so a reconnecting peer gets through once the fault is over.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwarding mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward at full speed.
    Pass,
    /// Forward nothing, keep the connections open.
    Stall,
    /// Forward at most this many bytes per second in each direction.
    Throttle(u64),
}

/// How current connections are ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// Close both sockets normally (FIN).
    Close,
    /// Close both sockets with SO_LINGER 0 (RST).
    Reset,
}

/// Forwarding buffer per direction.
const BUF: usize = 16 << 10;

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    kill: watch::Sender<(u64, Kill)>,
    accepted: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on an ephemeral loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let (kill, kill_rx) = watch::channel((0u64, Kill::Close));
        let accepted = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let (acc, fwd) = (accepted.clone(), forwarded.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                acc.fetch_add(1, Ordering::Relaxed);
                let (mode_rx, mut kill_rx, fwd) = (mode_rx.clone(), kill_rx.clone(), fwd.clone());
                // A kill commanded from now on ends this connection, even while it dials upstream.
                let born = kill_rx.borrow_and_update().0;
                conns.spawn(async move {
                    let Ok(upstream) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    connection(client, upstream, born, mode_rx, kill_rx, fwd).await;
                });
                // Reap finished connections so the set stays small.
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(FaultProxy {
            addr,
            mode,
            kill,
            accepted,
            forwarded,
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every current connection on both sides (FIN).
    pub fn drop_connections(&self) {
        self.kill.send_modify(|(generation, kind)| {
            *generation += 1;
            *kind = Kill::Close;
        });
    }

    /// Resets every current connection on both sides (RST).
    pub fn reset_connections(&self) {
        self.kill.send_modify(|(generation, kind)| {
            *generation += 1;
            *kind = Kill::Reset;
        });
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Stops forwarding; connections stay open.
    pub fn stall(&self) {
        self.set_mode(Mode::Stall);
    }

    /// Forwards at full speed again.
    pub fn pass(&self) {
        self.set_mode(Mode::Pass);
    }

    /// At most `bytes_per_second` per direction.
    pub fn throttle(&self, bytes_per_second: u64) {
        self.set_mode(Mode::Throttle(bytes_per_second.max(1)));
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far, both directions.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connection(
    mut client: TcpStream,
    mut upstream: TcpStream,
    born: u64,
    mode: watch::Receiver<Mode>,
    mut kill: watch::Receiver<(u64, Kill)>,
    forwarded: Arc<AtomicU64>,
) {
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let killed = {
        let (mut cr, mut cw) = client.split();
        let (mut ur, mut uw) = upstream.split();
        let both = async {
            tokio::join!(
                pump(&mut cr, &mut uw, mode.clone(), &forwarded),
                pump(&mut ur, &mut cw, mode.clone(), &forwarded)
            )
        };
        let killed = async {
            loop {
                let (generation, kind) = *kill.borrow_and_update();
                if generation > born {
                    return kind;
                }
                if kill.changed().await.is_err() {
                    // The proxy is gone: end like a close.
                    return Kill::Close;
                }
            }
        };
        tokio::select! {
            _ = both => None,
            kind = killed => Some(kind),
        }
    };
    if killed == Some(Kill::Reset) {
        let _ = client.set_zero_linger();
        let _ = upstream.set_zero_linger();
    }
}

/// Waits while the mode is `Stall`; returns the mode to forward under.
async fn wait_unstalled(mode: &mut watch::Receiver<Mode>) -> Mode {
    loop {
        let m = *mode.borrow_and_update();
        if m != Mode::Stall {
            return m;
        }
        if mode.changed().await.is_err() {
            return Mode::Pass;
        }
    }
}

/// Copies `from` to `to` under the mode; on end of stream or error, shuts `to`'s write side.
async fn pump<R, W>(from: &mut R, to: &mut W, mut mode: watch::Receiver<Mode>, forwarded: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let limit = match wait_unstalled(&mut mode).await {
            // A tenth of a second's worth per read, so throttled traffic flows smoothly.
            Mode::Throttle(bps) => (bps / 10).clamp(1, BUF as u64) as usize,
            _ => BUF,
        };
        let n = match from.read(&mut buf[..limit]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // A stall commanded while the read waited holds these bytes too.
        let m = wait_unstalled(&mut mode).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        forwarded.fetch_add(n as u64, Ordering::Relaxed);
        if let Mode::Throttle(bps) = m {
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / bps as f64)).await;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes every connection.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, data: &[u8]) {
        s.write_all(data).await.expect("write");
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).await.expect("read");
        assert_eq!(back, data);
    }

    #[tokio::test]
    async fn forwards_closes_resets_and_holds_bytes_while_stalled() {
        let proxy = FaultProxy::start(echo().await).await.expect("proxy");
        let mut a = TcpStream::connect(proxy.addr()).await.expect("connect");
        round_trip(&mut a, b"hello").await;

        // Close: the client reads end of stream.
        proxy.drop_connections();
        let mut buf = [0u8; 8];
        assert_eq!(a.read(&mut buf).await.expect("read after close"), 0);

        // Reset: the client's read fails with a reset.
        let mut b = TcpStream::connect(proxy.addr()).await.expect("connect");
        round_trip(&mut b, b"again").await;
        proxy.reset_connections();
        let err = b.read(&mut buf).await.expect_err("reset");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");

        // Stall: bytes written meanwhile arrive, in order, once the link passes again.
        let mut c = TcpStream::connect(proxy.addr()).await.expect("connect");
        round_trip(&mut c, b"before").await;
        proxy.stall();
        let before = proxy.forwarded();
        c.write_all(b"held back").await.expect("write");
        proxy.throttle(1000);
        let mut back = [0u8; 9];
        c.read_exact(&mut back).await.expect("read");
        assert_eq!(&back, b"held back");
        assert_eq!(proxy.forwarded(), before + 18, "both directions counted");
        proxy.pass();
        round_trip(&mut c, b"after").await;
        assert_eq!(proxy.connections(), 3);
    }
}
