//! Naming a store: `s3://bucket/prefix`, `file:///path` or a plain path, and the
//! explicit S3 settings that override the `AWS_*` environment.

use std::fmt;
use std::path::PathBuf;

use object_store::path::Path as ObjectPath;

use segmirror_contract::error::{Error, Result};

/// Where a store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// A local folder (a plain path or `file:///abs/path`), always absolute here.
    Local { root: PathBuf },
    /// `s3://bucket/prefix`; `prefix` has no leading or trailing `/` and may be empty.
    S3 { bucket: String, prefix: String },
}

impl StoreUrl {
    /// `s3://bucket[/prefix]`, `file:///absolute/path`, or a plain path (relative
    /// paths are made absolute against the current directory).
    pub fn parse(url: &str) -> Result<StoreUrl> {
        let bad = |reason: String| Error::BadUrl {
            url: url.to_string(),
            reason,
        };
        if url.trim().is_empty() {
            return Err(bad("empty".into()));
        }
        if !url.contains("://") {
            let root = std::path::absolute(url).map_err(|e| bad(format!("cannot make the path absolute: {e}")))?;
            return Ok(StoreUrl::Local { root });
        }
        // `Url` resolves dot segments (`a/../b` becomes `b`); refuse them first.
        if let Some((_, rest)) = url.split_once("://") {
            if rest
                .split(['/', '\\'])
                .any(|c| c == "." || c == ".." || c.eq_ignore_ascii_case("%2e%2e"))
            {
                return Err(bad("'.' and '..' path components are not allowed".into()));
            }
        }
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("query strings and fragments are not supported; use options".into()));
        }
        match parsed.scheme() {
            "file" => {
                let root = parsed
                    .to_file_path()
                    .map_err(|_| bad("a file URL must be file:///absolute/path".into()))?;
                Ok(StoreUrl::Local { root })
            }
            "s3" => {
                let bucket = parsed.host_str().unwrap_or_default().to_string();
                if bucket.is_empty() {
                    return Err(bad("no bucket name".into()));
                }
                if !parsed.username().is_empty() || parsed.password().is_some() || parsed.port().is_some() {
                    return Err(bad(
                        "credentials and ports do not belong in an s3:// URL; use options".into()
                    ));
                }
                let prefix = parsed.path().trim_matches('/').to_string();
                if !prefix.is_empty() {
                    ObjectPath::parse(&prefix).map_err(|e| bad(format!("prefix: {e}")))?;
                    if prefix.split('/').any(|p| p == "." || p == "..") {
                        return Err(bad("prefix components '.' and '..' are not allowed".into()));
                    }
                }
                Ok(StoreUrl::S3 { bucket, prefix })
            }
            other => Err(bad(format!(
                "unsupported scheme '{other}' (use a path, file:// or s3://)"
            ))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Local { root } => write!(f, "{}", root.display()),
            StoreUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// Explicit S3 settings (from command-line flags). Each one overrides the
/// corresponding `AWS_*` environment variable read by `AmazonS3Builder::from_env`
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`, `AWS_ENDPOINT_URL`/`AWS_ENDPOINT`, `AWS_ALLOW_HTTP`).
#[derive(Clone, Default)]
pub struct S3Options {
    /// e.g. `http://127.0.0.1:9000` for a local S3-compatible server (path-style requests).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Permit `http://` endpoints (loopback test servers).
    pub allow_http: Option<bool>,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |o: &Option<String>| o.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &redacted(&self.secret_access_key))
            .field("session_token", &redacted(&self.session_token))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        assert_eq!(
            StoreUrl::parse("s3://bucket/a/b/").unwrap(),
            StoreUrl::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            StoreUrl::parse("s3://bucket").unwrap(),
            StoreUrl::S3 {
                bucket: "bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            StoreUrl::parse("file:///var/lib/segmirror").unwrap(),
            StoreUrl::Local {
                root: PathBuf::from("/var/lib/segmirror")
            }
        );
        assert_eq!(
            StoreUrl::parse("/tmp/x").unwrap(),
            StoreUrl::Local {
                root: PathBuf::from("/tmp/x")
            }
        );
        match StoreUrl::parse("rel/dir").unwrap() {
            StoreUrl::Local { root } => {
                assert!(root.is_absolute());
                assert!(root.ends_with("rel/dir"));
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "",
            "s3://",
            "s3:///prefix",
            "s3://b/a/../c",
            "s3://b/a//c",
            "s3://key:secret@b/p",
            "s3://b:9000/p",
            "s3://b/p?region=x",
            "gs://b/p",
            "file://host/path",
        ] {
            assert!(matches!(StoreUrl::parse(bad), Err(Error::BadUrl { .. })), "{bad}");
        }
        assert_eq!(StoreUrl::parse("s3://b/p").unwrap().to_string(), "s3://b/p");
    }

    #[test]
    fn secrets_are_not_debug_printed() {
        let o = S3Options {
            secret_access_key: Some("hunter2".into()),
            session_token: Some("tok".into()),
            ..Default::default()
        };
        let s = format!("{o:?}");
        assert!(!s.contains("hunter2") && !s.contains("tok\""), "{s}");
    }
}
