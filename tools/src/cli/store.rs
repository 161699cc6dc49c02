//! S3 connection flags shared by every subcommand that opens a store.

use segmirror_transport::{S3Options, Store, StoreUrl};

/// Flags that override what `AmazonS3Builder::from_env` reads from `AWS_*` variables.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct S3Args {
    /// S3 endpoint, e.g. http://127.0.0.1:9000 for a local S3-compatible server (overrides AWS_ENDPOINT_URL).
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region (overrides AWS_REGION).
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Allow a plain-http S3 endpoint (loopback test servers); otherwise AWS_ALLOW_HTTP decides.
    #[arg(long)]
    pub allow_http: bool,
}

impl S3Args {
    pub fn options(&self) -> S3Options {
        S3Options {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            allow_http: self.allow_http.then_some(true),
            ..Default::default()
        }
    }

    /// Open the store a `--store` URL names, which must exist (a reader given a
    /// mistyped folder fails rather than creating an empty store). Credentials come
    /// from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`.
    pub fn open(&self, url: &str) -> anyhow::Result<Store> {
        let url = StoreUrl::parse(url)?;
        Ok(Store::open_existing(&url, &self.options())?)
    }
}

/// True for an argument that names a store rather than a local path.
pub fn is_store_url(arg: &str) -> bool {
    arg.starts_with("s3://") || arg.starts_with("file://")
}
