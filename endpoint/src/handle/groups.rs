//! FindCoordinator (this endpoint coordinates every group) and the group APIs, handed to [`crate::group`].
//!
//! A transaction coordinator is refused: transactions write, and a transactional producer stops on
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED at once (see `refuse`).

use kafka_protocol::messages::find_coordinator_response::Coordinator as Found;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::{text, Endpoint};
use crate::group::ClientInfo;

const GROUP: i8 = 0;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

pub(super) fn find_coordinator(
    endpoint: &Endpoint,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let refusal = (request.key_type != GROUP).then(|| {
        (
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            format!("link {} is served read-only: no transactions", endpoint.replica.link()),
        )
    });
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| found(endpoint, key, refusal.as_ref()))
            .collect();
    } else {
        let one = found(endpoint, request.key, refusal.as_ref());
        response.error_code = one.error_code;
        response.error_message = one.error_message;
        response.node_id = one.node_id;
        response.host = one.host;
        response.port = one.port;
    }
    response
}

fn found(endpoint: &Endpoint, key: StrBytes, refusal: Option<&(i16, String)>) -> Found {
    let mut out = Found::default();
    out.key = key;
    match refusal {
        Some((code, message)) => {
            out.error_code = *code;
            out.error_message = Some(text(message.clone()));
            out.node_id = BrokerId(-1);
            out.port = -1;
        }
        None => {
            out.node_id = BrokerId(endpoint.config.node_id);
            out.host = text(endpoint.config.advertised_host.clone());
            out.port = endpoint.config.advertised_port;
        }
    }
    out
}

/// A group API, answered by the coordinator; `None` for a request that is not one.
pub(super) async fn answer(
    endpoint: &Endpoint,
    request: RequestKind,
    version: i16,
    header: &RequestHeader,
    host: &str,
) -> Option<ResponseKind> {
    let groups = &endpoint.groups;
    Some(match request {
        RequestKind::JoinGroup(r) => {
            let client = ClientInfo {
                client_id: header.client_id.as_ref().map(|id| id.to_string()).unwrap_or_default(),
                client_host: host.to_string(),
            };
            ResponseKind::JoinGroup(groups.join_group_from(r, version, &client).await)
        }
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(groups.delete_groups(r, version).await),
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups.sync_group(r, version).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups.heartbeat(r, version).await),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups.leave_group(r, version).await),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(groups.offset_commit(r, version).await),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(groups.offset_fetch(r, version).await),
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups.list_groups(r, version).await),
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(groups.describe_groups(r, version).await),
        _ => return None,
    })
}
