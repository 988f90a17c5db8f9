//! CreateTopics, including validate_only.

use crate::broker::{AdminError, Broker};
use kaas_core::protocol::messages::create_topics_request::CreatableTopic;
use kaas_core::protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kaas_core::protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kaas_core::protocol::{ErrorCode, Uuid};
use std::collections::BTreeMap;
use std::sync::Arc;

pub async fn handle(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    _version: i16,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    let mut seen = std::collections::BTreeSet::new();
    for t in req.topics {
        let name = t.name.clone();
        let mut result = CreatableTopicResult {
            name: name.clone(),
            num_partitions: -1,
            replication_factor: -1,
            ..Default::default()
        };
        if !seen.insert(name.clone()) {
            result.error_code = ErrorCode::InvalidRequest.code();
            result.error_message = Some(format!(
                "Create topics request from client contains multiple entries for topic {name}"
            ));
            results.push(result);
            continue;
        }
        match create(broker, &t, req.validate_only).await {
            Ok((id, partitions, configs)) => {
                result.topic_id = id;
                result.num_partitions = partitions;
                result.replication_factor = 1;
                result.configs = Some(
                    super::describe_configs::topic_entries(broker, &configs)
                        .into_iter()
                        .map(|e| CreatableTopicConfigs {
                            name: e.name,
                            value: e.value,
                            read_only: e.read_only,
                            config_source: e.config_source,
                            is_sensitive: false,
                            ..Default::default()
                        })
                        .collect(),
                );
            }
            Err(e) => {
                result.error_code = e.code.code();
                result.error_message = Some(e.message);
            }
        }
        results.push(result);
    }
    CreateTopicsResponse {
        topics: results,
        ..Default::default()
    }
}

async fn create(
    broker: &Arc<Broker>,
    t: &CreatableTopic,
    validate_only: bool,
) -> Result<(Uuid, i32, BTreeMap<String, String>), AdminError> {
    let mut configs = BTreeMap::new();
    for c in &t.configs {
        kaas_core::topic_config::validate(&c.name, c.value.as_deref())
            .map_err(|m| AdminError::new(ErrorCode::InvalidConfig, m))?;
        if let Some(v) = &c.value {
            configs.insert(c.name.clone(), v.trim().to_string());
        }
    }
    let partitions = if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(AdminError::new(ErrorCode::InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."));
        }
        for (i, a) in t.assignments.iter().enumerate() {
            if a.partition_index != i as i32 {
                return Err(AdminError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                ));
            }
            if a.broker_ids != [broker.config.broker_id] {
                return Err(AdminError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "Replica assignment {:?} names brokers other than the only broker {}",
                        a.broker_ids, broker.config.broker_id
                    ),
                ));
            }
        }
        t.assignments.len() as i32
    } else if t.num_partitions == -1 {
        broker.config.default_partitions
    } else {
        t.num_partitions
    };
    if validate_only {
        broker.validate_new_topic(&t.name, partitions, t.replication_factor, &configs)?;
        return Ok((Uuid::ZERO, partitions, configs));
    }
    let topic = broker
        .create_topic(&t.name, partitions, t.replication_factor, configs)
        .await?;
    Ok((topic.id, partitions, topic.configs.clone()))
}
