//! ApiVersions: which APIs and versions this broker serves.

use super::SUPPORTED_APIS;
use kaas_core::protocol::messages::api_versions_response::ApiVersion;
use kaas_core::protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kaas_core::protocol::ErrorCode;

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|&(api_key, min_version, max_version)| ApiVersion {
            api_key,
            min_version,
            max_version,
            ..Default::default()
        })
        .collect()
}

pub fn handle(_req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: ErrorCode::None.code(),
        api_keys: api_keys(),
        ..Default::default()
    }
}

/// The answer to an ApiVersions version we do not serve (sent as v0).
pub fn unsupported() -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: ErrorCode::UnsupportedVersion.code(),
        api_keys: api_keys(),
        ..Default::default()
    }
}
