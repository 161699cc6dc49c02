//! How the endpoint presents itself and what it allows a client: the settings the listener (`server`) and the
//! handlers (`handle`) both read, kept apart from both so that neither imports the other for them.

use std::time::Duration;

/// The largest request read by default. A consumer's requests are small (a Fetch of ten thousand partitions is
/// well under 1 MiB); a producer's Produce, read only to be refused, is as large as its `max.request.size`
/// (1 MiB by default), so 8 MiB leaves room and still bounds a client at a few MiB.
pub const MAX_REQUEST_BYTES_DEFAULT: usize = 8 << 20;

/// How the endpoint presents itself and what it allows one client.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The host and port clients are told to connect to (Metadata, FindCoordinator): the listener's address, or
    /// what `--advertised-listener` says behind NAT or in a container.
    pub advertised_host: String,
    pub advertised_port: i32,
    /// The node id this endpoint answers as: the leader of every partition and the coordinator of every group.
    pub node_id: i32,
    /// The cluster id Metadata reports.
    pub cluster_id: String,
    pub limits: Limits,
}

/// What one client, and all of them together, may cost.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Largest request frame read; a larger one ends its connection before its body is read.
    pub max_request_bytes: usize,
    /// Bytes of record data held for fetch responses, over all clients at once.
    pub fetch_memory_bytes: usize,
    /// A connection with no request for this long is closed.
    pub idle: Duration,
    /// The longest a fetch waits for data, whatever its `max_wait_ms` says.
    pub max_fetch_wait: Duration,
    /// A client that has not taken a whole response within this long is disconnected: a response holds its share
    /// of the fetch memory until written, and a client that stopped reading must not keep it.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            max_request_bytes: MAX_REQUEST_BYTES_DEFAULT,
            fetch_memory_bytes: 256 << 20,
            // Kafka's connections.max.idle.ms.
            idle: Duration::from_secs(600),
            max_fetch_wait: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
        }
    }
}
