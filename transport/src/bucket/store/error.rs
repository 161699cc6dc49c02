//! The object-store client's errors, converted into the crate's [`Error`] once: classified (transient or not)
//! here, then carried opaque, so that `object_store`'s types stay inside the bucket code.

use segmirror_contract::error::Error;

/// Convert an `object_store` error about `key`, classifying it once.
pub(crate) fn from_store(key: &str, operation: &'static str, source: object_store::Error) -> Error {
    let key = key.to_string();
    match source {
        object_store::Error::NotFound { .. } => Error::NotFound { key },
        object_store::Error::AlreadyExists { .. } => Error::AlreadyExists { key },
        // A create-if-absent on S3 answers 412 Precondition Failed.
        object_store::Error::Precondition { .. } if operation == PUT_IF_ABSENT => Error::AlreadyExists { key },
        e @ (object_store::Error::NotSupported { .. } | object_store::Error::NotImplemented { .. }) => {
            Error::NotSupported {
                key,
                operation,
                source: Box::new(e),
            }
        }
        source => Error::Store {
            key,
            operation,
            transient: classify(&source),
            source: Box::new(source),
        },
    }
}

/// Name of the create-if-absent operation (a precondition failure there means "exists").
pub(crate) const PUT_IF_ABSENT: &str = "put if absent";

/// Is an `object_store` error transient? Decided from the error's kind, then from
/// the first `std::io::Error` in its source chain, then from the HTTP status in
/// its message.
///
/// - Not found, exists, precondition, not modified, unsupported, invalid path,
///   permission denied, unauthenticated, configuration errors: permanent.
/// - An I/O error: transient for interruptions, timeouts and broken connections,
///   permanent otherwise (a full or read-only disk does not heal by retrying).
/// - An HTTP status 4xx other than 408 and 429: permanent (a request the server
///   refuses will be refused again). Note that the S3 client has already retried
///   5xx answers and connection failures with its own backoff before we see them;
///   we retry them once more at the operation level, which also restarts streams
///   that broke in the middle.
/// - Anything else (5xx, timeouts, panicked tasks): transient.
pub(crate) fn classify(error: &object_store::Error) -> bool {
    use object_store::Error as E;
    match error {
        E::NotFound { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::InvalidPath { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. } => false,
        other => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(other);
            while let Some(e) = source {
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    return transient_io(io.kind());
                }
                source = e.source();
            }
            !is_permanent_http_status(&other.to_string())
        }
    }
}

fn transient_io(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::Interrupted
            | K::TimedOut
            | K::WouldBlock
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::ConnectionRefused
            | K::NotConnected
            | K::BrokenPipe
            | K::UnexpectedEof
    )
}

/// `... status code: 4xx ...` with a status other than 408 (timeout) and 429 (slow down).
fn is_permanent_http_status(message: &str) -> bool {
    let Some(at) = message.find("status code: ") else {
        return false;
    };
    let digits: String = message[at + "status code: ".len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    match digits.parse::<u16>() {
        Ok(408 | 429) => false,
        Ok(code) => (400..500).contains(&code),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(source: Box<dyn std::error::Error + Send + Sync>) -> object_store::Error {
        object_store::Error::Generic { store: "test", source }
    }

    #[test]
    fn classification() {
        let not_found = object_store::Error::NotFound {
            path: "k".into(),
            source: "gone".into(),
        };
        assert!(!classify(&not_found));
        assert!(matches!(from_store("k", "get", not_found), Error::NotFound { .. }));
        let reset = generic(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
        assert!(classify(&reset));
        assert!(from_store("k", "get", reset).is_transient());
        let full = generic(Box::new(std::io::Error::from(std::io::ErrorKind::StorageFull)));
        assert!(!classify(&full));
        assert!(classify(&generic(
            "Server returned non-2xx status code: 503 Service Unavailable: slow".into()
        )));
        assert!(classify(&generic(
            "Server returned non-2xx status code: 429 Too Many Requests".into()
        )));
        assert!(!classify(&generic(
            "Server returned non-2xx status code: 400 Bad Request: region".into()
        )));
        assert!(classify(&generic("something odd".into())));
        let pre = object_store::Error::Precondition {
            path: "k".into(),
            source: "412".into(),
        };
        assert!(matches!(
            from_store("k", PUT_IF_ABSENT, pre),
            Error::AlreadyExists { .. }
        ));
    }
}
