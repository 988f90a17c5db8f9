//! The differences from Apache Kafka that kaas chooses, each with its
//! reason. A difference covers one step of one scenario and names both
//! answers exactly: if either broker starts answering something else, or
//! the difference goes away, the suite fails and this list is revisited.
//! docs/oracle.md shows the same list (`kaas-diff --differences` prints it).

use crate::transcript::Mismatch;
use serde_json::Value;

#[derive(Debug)]
pub struct Known {
    /// The scenario, or `*` for any (the generated mode's sequences).
    pub scenario: &'static str,
    pub step: &'static str,
    /// Kafka's answer at that step, as JSON.
    pub kafka: &'static str,
    /// kaas's answer at that step, as JSON.
    pub kaas: &'static str,
    pub why: &'static str,
}

impl Known {
    pub fn covers(&self, scenario: &str, m: &Mismatch) -> bool {
        (self.scenario == "*" || self.scenario == scenario)
            && self.step == m.step
            && parse(self.kafka) == m.kafka
            && parse(self.kaas) == m.kaas
    }
}

fn parse(s: &str) -> Option<Value> {
    serde_json::from_str(s).ok()
}

pub static KNOWN: &[Known] = &[
    Known {
        scenario: "versions/api-versions",
        step: "0 Produce",
        kafka: "[0,13]",
        kaas: "[3,13]",
        why: "kaas stores record batches of format v2 only, which Produce carries from v3 on; Kafka 4 still accepts v0-v2 (message formats 0 and 1) for old clients and converts them.",
    },
    Known {
        scenario: "versions/api-versions",
        step: "27 WriteTxnMarkers",
        kafka: "[1,1]",
        kaas: "[1,2]",
        why: "kaas also serves v2 (KIP-1228, Kafka 4.2: each marker names its transaction version, and a version-2 marker must carry an epoch above the producer's). Kafka 4.1, the oracle, has only v1; v1 is answered alike.",
    },
    Known {
        scenario: "versions/api-versions",
        step: "35 DescribeLogDirs",
        kafka: "[1,4]",
        kaas: "null",
        why: "kaas has one log directory, the volume; DescribeLogDirs is not served.",
    },
    Known {
        scenario: "versions/api-versions",
        step: "APIs beyond kaas's codec",
        kafka: "[[17,0,1],[29,1,3],[30,1,3],[31,1,3],[34,1,2],[36,0,2],[38,1,3],[39,1,2],[40,1,2],[41,1,3],[43,0,2],[45,0,1],[46,0,0],[48,0,1],[49,0,1],[50,0,0],[51,0,0],[55,0,2],[57,0,2],[64,0,0],[68,0,1],[69,0,1],[74,0,1],[75,0,0],[76,1,1],[77,1,1],[78,1,1],[79,1,1],[80,0,0],[81,0,0],[83,0,0],[84,0,0],[85,0,0],[86,0,0],[87,0,0],[90,0,0],[91,0,0],[92,0,0]]",
        kaas: "[]",
        why: "Kafka's inter-broker, KRaft controller, SASL, ACL, quota, reassignment, delegation token, KIP-848 consumer group, share group and client telemetry APIs: kaas has no brokers to replicate between, no controller quorum and no security yet, so it advertises none of them (clients never learn of an API that would close the connection).",
    },
    Known {
        scenario: "idempotence/first-batch-not-zero",
        step: "first batch at seq 7",
        kafka: r#"{"base_offset":0,"error":"NONE","log_start":0,"record_errors":[]}"#,
        kaas: r#"{"base_offset":-1,"error":"UNKNOWN_PRODUCER_ID","log_start":0,"record_errors":[]}"#,
        why: "kaas refuses a first sequence above 0 from a producer it has no state for: accepting it would hide a gap of lost batches forever. kaas never loses producer state to retention (segments go only after a snapshot covers them), so the case Kafka's leniency serves does not arise. Clients reset their sequence on UNKNOWN_PRODUCER_ID (docs/idempotence.md).",
    },
    Known {
        scenario: "idempotence/first-batch-not-zero",
        step: "then seq 0",
        kafka: r#"{"base_offset":-1,"error":"OUT_OF_ORDER_SEQUENCE_NUMBER","log_start":0,"record_errors":[]}"#,
        kaas: r#"{"base_offset":0,"error":"NONE","log_start":0,"record_errors":[]}"#,
        why: "The same choice seen one step later: kaas has no state for the producer yet, so sequence 0 starts it.",
    },
    Known {
        scenario: "*",
        step: "configs: min.insync.replicas",
        kafka: r#"{"read_only":false,"sensitive":false,"source":3,"value":"1"}"#,
        kaas: r#"{"read_only":false,"sensitive":false,"source":5,"value":"1"}"#,
        why: "Same value, other source: Kafka 4's storage format writes min.insync.replicas as a cluster-wide dynamic default (source 3, DYNAMIC_DEFAULT_BROKER_CONFIG, for eligible leader replicas); min.insync.replicas is not a dynamic broker config in kaas (it has no replicas), so it is the built-in default (source 5).",
    },
    Known {
        scenario: "list-offsets/max-timestamp-below-log-start",
        step: "max timestamp",
        kafka: r#"{"error":"NONE","offset":0,"timestamp":50}"#,
        kaas: r#"{"error":"NONE","offset":3,"timestamp":30}"#,
        why: "After DeleteRecords moved the log start past the record with the largest timestamp, Kafka still names that deleted record (from its segment's time index), an offset a consumer can no longer fetch; kaas names the record with the largest timestamp still in the log.",
    },
    Known {
        scenario: "admin/metadata-auto-create",
        step: "auto-create answered",
        kafka: r#""UNKNOWN_TOPIC_OR_PARTITION""#,
        kaas: r#""NONE""#,
        why: "kaas creates an auto-created topic before it answers Metadata; Kafka's broker asks its controller to create it and answers a retriable UNKNOWN_TOPIC_OR_PARTITION meanwhile. Clients retry either way; the next step shows both end the same.",
    },
];

/// The list as a markdown table, for docs/oracle.md.
pub fn markdown() -> String {
    let mut out = String::from("| scenario | step | Kafka | kaas | why |\n|---|---|---|---|---|\n");
    for d in KNOWN {
        out.push_str(&format!(
            "| `{}` | {} | `{}` | `{}` | {} |\n",
            d.scenario, d.step, d.kafka, d.kaas, d.why
        ));
    }
    out
}
