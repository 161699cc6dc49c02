//! ApiVersions: the table of [`super::SERVED`], and no features (this endpoint has no KRaft feature levels).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::{Outcome, SERVED};

/// UNSUPPORTED_VERSION: the client asked ApiVersions in a version newer than ours; it retries with v0.
const UNSUPPORTED_VERSION: i16 = 35;

pub(super) fn answer(version: i16, body: &mut Bytes) -> Outcome {
    let (min, max) = SERVED
        .iter()
        .find(|&&(key, _, _)| key == kafka_protocol::messages::ApiKey::ApiVersions)
        .map_or((0, 0), |&(_, min, max)| (min, max));
    let mut response = ApiVersionsResponse::default();
    response.api_keys = SERVED
        .iter()
        .map(|&(key, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = key as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    let encode_as = if (min..=max).contains(&version) {
        if let Err(e) = ApiVersionsRequest::decode(body, version) {
            return Outcome::Malformed(format!("ApiVersions v{version}: {e:#}"));
        }
        version
    } else {
        // As a broker does: the error and the table, in v0, which every client reads.
        response.error_code = UNSUPPORTED_VERSION;
        0
    };
    let mut out = BytesMut::new();
    match response.encode(&mut out, encode_as) {
        Ok(()) => Outcome::Respond(out, None),
        Err(e) => Outcome::Malformed(format!("encoding ApiVersions v{encode_as}: {e:#}")),
    }
}
