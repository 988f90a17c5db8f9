//! ApiVersions: which APIs and versions this broker serves.

use super::SUPPORTED_APIS;
use kaas_core::protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
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

/// The feature clients look for to speak transaction version 2 (KIP-890
/// part 2: EndTxn v5, Produce v12 and TxnOffsetCommit v5 in transactions).
const TRANSACTION_VERSION: &str = "transaction.version";
/// The levels this broker supports, whatever level it finalizes (as Kafka
/// 4.1 answers: supported 0..2, finalized the cluster's level).
const TRANSACTION_VERSION_SUPPORTED_MAX: i16 = 2;

/// Finalized features never change on a kaas broker: one epoch for all.
const FINALIZED_FEATURES_EPOCH: i64 = 0;

/// `transaction_version`: the finalized level of `transaction.version`
/// (`BrokerConfig::transaction_version`, `kaas serve --transaction-version`).
pub fn handle(
    _req: ApiVersionsRequest,
    _version: i16,
    transaction_version: i16,
) -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: ErrorCode::None.code(),
        api_keys: api_keys(),
        supported_features: vec![SupportedFeatureKey {
            name: TRANSACTION_VERSION.into(),
            min_version: 0,
            max_version: TRANSACTION_VERSION_SUPPORTED_MAX,
            ..Default::default()
        }],
        finalized_features_epoch: FINALIZED_FEATURES_EPOCH,
        finalized_features: vec![FinalizedFeatureKey {
            name: TRANSACTION_VERSION.into(),
            max_version_level: transaction_version,
            min_version_level: transaction_version,
            ..Default::default()
        }],
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
