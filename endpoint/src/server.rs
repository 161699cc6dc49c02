//! The listener (placeholder).
/// How the endpoint listens and what it allows.
#[derive(Debug, Clone)]
pub struct EndpointConfig {}
/// Serve until shut down (placeholder).
pub async fn serve() {}
