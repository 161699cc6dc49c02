//! DescribeConfigs: a topic's configs as the source had them (what the link carries), all read-only.
//!
//! Only topic resources are described; a broker resource is answered with no configs (this endpoint has none a
//! client could act on). A config the link does not carry is absent rather than given a guessed default.

use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::metadata::UNKNOWN_TOPIC_OR_PARTITION;
use super::{text, Endpoint};

const TOPIC: i8 = 2;
/// DescribeConfigs' config source: a topic's own setting.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

pub(super) fn answer(endpoint: &Endpoint, request: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let topics = endpoint.replica.topics();
    let mut response = DescribeConfigsResponse::default();
    response.results = request
        .resources
        .into_iter()
        .map(|resource| {
            let mut result = DescribeConfigsResult::default();
            result.resource_type = resource.resource_type;
            if resource.resource_type == TOPIC {
                match topics.iter().find(|t| t.name == resource.resource_name.as_str()) {
                    Some(topic) => {
                        result.configs = topic
                            .configs
                            .iter()
                            .filter(|(name, _)| {
                                resource
                                    .configuration_keys
                                    .as_ref()
                                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
                            })
                            .map(|(name, value)| {
                                let mut c = DescribeConfigsResourceResult::default();
                                c.name = text(name.clone());
                                c.value = Some(text(value.clone()));
                                c.read_only = true;
                                c.config_source = DYNAMIC_TOPIC_CONFIG;
                                c
                            })
                            .collect();
                    }
                    None => {
                        result.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                        result.error_message = Some(text(format!(
                            "topic {} is not mirrored by link {}",
                            resource.resource_name.as_str(),
                            endpoint.replica.link()
                        )));
                    }
                }
            }
            result.resource_name = resource.resource_name;
            result
        })
        .collect();
    response
}
