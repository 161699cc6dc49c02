//! `--metrics-addr`, the HTTP side of the long-running commands (served by `segmirror_service::serve`).

/// `--metrics-addr`, flattened into each long-running command.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (`GET /metrics`) and the admin API (`/v1/links`, see docs/openapi.yaml) on
    /// HOST:PORT (e.g. 127.0.0.1:9464; port 0 picks a free one, printed at start). Default: no HTTP server.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}
