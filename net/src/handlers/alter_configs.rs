//! AlterConfigs and IncrementalAlterConfigs: change a topic's configs.
//!
//! Both APIs answer per resource. A topic's change is decided by
//! `kaas_core::topic_config::alter` (replace the whole set, or apply
//! SET / DELETE / APPEND / SUBTRACT), then published as the topic's next
//! metadata version and applied at once (`Broker::alter_topic_configs`);
//! `validate_only` stops after the decision. A BROKER resource (this
//! broker's id, or blank for the cluster-wide default) changes the dynamic
//! broker configs, decided by `kaas_core::broker_config` and persisted by
//! `Broker::alter_broker_configs` (docs/protocol.md).

use crate::broker::{AdminError, Broker};
use kaas_core::broker_config;
use kaas_core::protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kaas_core::protocol::ErrorCode;
use kaas_core::topic_config::alter::{self, Change, Operation};
use std::collections::BTreeSet;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Which of the two APIs a resource came in.
#[derive(Clone, Copy)]
enum Api {
    /// AlterConfigs: the configs given replace the topic's set.
    Replace,
    /// IncrementalAlterConfigs: each config changed by its operation.
    Incremental,
}

/// One resource of either request.
struct Resource {
    kind: i8,
    name: String,
    /// The configs as given; an unknown operation code is `Err(code)`.
    changes: Vec<(String, Result<Operation, i8>, Option<String>)>,
}

/// Answers each resource, in request order: (type, name, outcome).
async fn answer(
    broker: &Broker,
    api: Api,
    resources: Vec<Resource>,
    validate_only: bool,
) -> Vec<(i8, String, Result<(), AdminError>)> {
    // Kafka refuses every copy of a resource named twice in one request.
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<(i8, String)> = resources
        .iter()
        .filter(|r| !seen.insert((r.kind, r.name.clone())))
        .map(|r| (r.kind, r.name.clone()))
        .collect();
    let mut out = Vec::with_capacity(resources.len());
    for r in resources {
        let outcome = if repeated.contains(&(r.kind, r.name.clone())) {
            Err(AdminError::new(
                ErrorCode::InvalidRequest,
                "Each resource must appear at most once.",
            ))
        } else {
            alter_one(broker, api, &r, validate_only).await
        };
        out.push((r.kind, r.name, outcome));
    }
    out
}

async fn alter_one(
    broker: &Broker,
    api: Api,
    r: &Resource,
    validate_only: bool,
) -> Result<(), AdminError> {
    let changes = r
        .changes
        .iter()
        .map(|(name, op, value)| match op {
            Ok(op) => Ok((name.clone(), *op, value.clone())),
            Err(code) => Err(AdminError::new(
                ErrorCode::InvalidRequest,
                format!("Unknown config operation {code} for {name}"),
            )),
        })
        .collect::<Result<Vec<Change>, _>>()?;
    match r.kind {
        RESOURCE_TOPIC => {
            broker
                .alter_topic_configs(&r.name, validate_only, |current| {
                    let next = match api {
                        Api::Replace => alter::replacing(&changes),
                        Api::Incremental => alter::incremental(current, &changes, &|name| {
                            super::describe_configs::broker_default(broker, name)
                        }),
                    };
                    next.map_err(|refusal| AdminError::new(refusal.code, refusal.message))
                })
                .await
        }
        RESOURCE_BROKER => {
            let per_broker = broker_config::broker_resource(
                &r.name,
                broker.config.broker_id,
                broker_config::ResourceUse::Alter,
            )
            .map_err(|refusal| AdminError::new(refusal.code, refusal.message))?
                == broker_config::BrokerResource::ThisBroker;
            broker
                .alter_broker_configs(per_broker, validate_only, |current| {
                    let next = match api {
                        Api::Replace => broker_config::replacing(&changes),
                        Api::Incremental => broker_config::incremental(current, &changes),
                    };
                    next.map_err(|refusal| AdminError::new(refusal.code, refusal.message))
                })
                .await
        }
        other => Err(AdminError::new(
            ErrorCode::InvalidRequest,
            format!("Unsupported resource type {other}"),
        )),
    }
}

fn error_parts(outcome: Result<(), AdminError>) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (ErrorCode::None.code(), None),
        Err(e) => (e.code.code(), Some(e.message)),
    }
}

pub async fn handle(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let resources = req
        .resources
        .into_iter()
        .map(|r| Resource {
            kind: r.resource_type,
            name: r.resource_name,
            changes: r
                .configs
                .into_iter()
                .map(|c| (c.name, Ok(Operation::Set), c.value))
                .collect(),
        })
        .collect();
    let responses = answer(broker, Api::Replace, resources, req.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, resource_name, outcome)| {
            let (error_code, error_message) = error_parts(outcome);
            alter_configs_response::AlterConfigsResourceResponse {
                error_code,
                error_message,
                resource_type,
                resource_name,
                ..Default::default()
            }
        })
        .collect();
    AlterConfigsResponse {
        responses,
        ..Default::default()
    }
}

pub async fn handle_incremental(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let resources = req
        .resources
        .into_iter()
        .map(|r| Resource {
            kind: r.resource_type,
            name: r.resource_name,
            changes: r
                .configs
                .into_iter()
                .map(|c| {
                    let op = Operation::from_code(c.config_operation).ok_or(c.config_operation);
                    (c.name, op, c.value)
                })
                .collect(),
        })
        .collect();
    let responses = answer(broker, Api::Incremental, resources, req.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, resource_name, outcome)| {
            let (error_code, error_message) = error_parts(outcome);
            incremental_alter_configs_response::AlterConfigsResourceResponse {
                error_code,
                error_message,
                resource_type,
                resource_name,
                ..Default::default()
            }
        })
        .collect();
    IncrementalAlterConfigsResponse {
        responses,
        ..Default::default()
    }
}
