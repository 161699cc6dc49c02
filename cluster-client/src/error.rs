//! The one error type of the cluster client: every message names the broker, and for a refused request the API and
//! Kafka's error code with its name.

use kafka_protocol::error::ResponseError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed, timed out, or the peer sent something that is not a Kafka response.
    #[error("broker {broker}: {reason}")]
    Broker { broker: String, reason: String },
    /// The broker answered a request with an error code for the whole request (or the resource asked about).
    #[error("broker {broker}: {api} answered {} for {resource}{}", error_name(*code), message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Api {
        broker: String,
        api: &'static str,
        resource: String,
        code: i16,
        message: Option<String>,
    },
}

impl Error {
    /// Kafka's error code, for a refused request.
    pub fn code(&self) -> Option<i16> {
        match self {
            Error::Api { code, .. } => Some(*code),
            Error::Broker { .. } => None,
        }
    }
}

/// A Kafka error code with its name, for messages people read (`NotCoordinator (16)`).
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(ResponseError::Unknown(_)) | None => format!("error code {code}"),
        Some(e) => format!("{e:?} ({code})"),
    }
}
