//! What a scenario observed, step by step, and how two transcripts of the
//! same scenario are compared.

use crate::differences::{Known, KNOWN};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub step: String,
    pub value: Value,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    pub entries: Vec<Entry>,
}

impl Transcript {
    pub fn push(&mut self, step: String, value: Value) {
        self.entries.push(Entry { step, value });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One step where the brokers' answers differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub index: usize,
    pub step: String,
    pub kafka: Option<Value>,
    pub kaas: Option<Value>,
}

/// How a scenario's two transcripts compare.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Differences nobody chose: each one fails the suite.
    pub unexpected: Vec<Mismatch>,
    /// Differences on the documented list.
    pub documented: Vec<&'static Known>,
    /// Documented differences of this scenario that did not show up: the
    /// list is out of date, which also fails the suite.
    pub stale: Vec<&'static Known>,
    /// Why the scenario could not run at all (an API it needs is not
    /// served by both brokers): equal transcripts then prove nothing, so
    /// it fails until both serve it.
    pub unrunnable: Option<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.unexpected.is_empty() && self.stale.is_empty() && self.unrunnable.is_none()
    }
}

/// What the harness writes when a scenario needs an API version the two
/// brokers do not both serve (session.rs).
const NOT_SERVED: &str = "is not served by both brokers";

fn unrunnable(t: &Transcript) -> Option<String> {
    let last = t.entries.last()?;
    let text = last.value.as_str()?;
    (last.step == "stopped" && text.contains(NOT_SERVED)).then(|| text.to_owned())
}

/// Compares step by step. The steps line up because both runs execute the
/// same code; where one run stopped early, the other's extra steps are
/// mismatches against nothing.
pub fn compare(scenario: &str, kafka: &Transcript, kaas: &Transcript) -> Verdict {
    compare_with(scenario, kafka, kaas, KNOWN)
}

pub fn compare_with(
    scenario: &str,
    kafka: &Transcript,
    kaas: &Transcript,
    known: &'static [Known],
) -> Verdict {
    let mut verdict = Verdict::default();
    let n = kafka.len().max(kaas.len());
    for index in 0..n {
        let k = kafka.entries.get(index);
        let s = kaas.entries.get(index);
        if k == s {
            continue;
        }
        let step = k.or(s).map(|e| e.step.clone()).unwrap_or_default();
        let mismatch = Mismatch {
            index,
            step,
            kafka: k.map(|e| e.value.clone()),
            kaas: s.map(|e| e.value.clone()),
        };
        match known.iter().find(|d| d.covers(scenario, &mismatch)) {
            Some(d) => verdict.documented.push(d),
            None => verdict.unexpected.push(mismatch),
        }
    }
    verdict.unrunnable = unrunnable(kafka).or_else(|| unrunnable(kaas));
    verdict.stale = known
        .iter()
        .filter(|d| {
            d.scenario == scenario && !verdict.documented.iter().any(|u| std::ptr::eq(*u, *d))
        })
        .collect();
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(entries: &[(&str, Value)]) -> Transcript {
        let mut t = Transcript::default();
        for (s, v) in entries {
            t.push((*s).into(), v.clone());
        }
        t
    }

    static LIST: &[Known] = &[Known {
        scenario: "demo",
        step: "produce",
        kafka: r#"{"error":"UNKNOWN_PRODUCER_ID"}"#,
        kaas: r#"{"error":"OUT_OF_ORDER_SEQUENCE_NUMBER"}"#,
        why: "test",
    }];

    #[test]
    fn equal_transcripts_pass() {
        let a = t(&[("x", json!(1)), ("y", json!({"a": [1, 2]}))]);
        let v = compare_with("other", &a, &a.clone(), LIST);
        assert!(v.passed() && v.documented.is_empty());
    }

    #[test]
    fn a_different_value_is_unexpected() {
        let a = t(&[("x", json!(1))]);
        let b = t(&[("x", json!(2))]);
        let v = compare_with("other", &a, &b, LIST);
        assert!(!v.passed());
        assert_eq!(v.unexpected[0].step, "x");
    }

    #[test]
    fn a_scenario_that_could_not_run_fails() {
        let a = t(&[
            ("x", json!(1)),
            ("stopped", json!("api 24 is not served by both brokers")),
        ]);
        let v = compare_with("other", &a, &a.clone(), LIST);
        assert!(v.unexpected.is_empty() && !v.passed());
        assert!(v.unrunnable.is_some());
    }

    #[test]
    fn a_run_that_stopped_early_differs() {
        let a = t(&[("x", json!(1)), ("y", json!(2))]);
        let b = t(&[("x", json!(1))]);
        let v = compare_with("other", &a, &b, LIST);
        assert_eq!(v.unexpected.len(), 1);
        assert_eq!(v.unexpected[0].kaas, None);
    }

    #[test]
    fn a_documented_difference_passes_only_with_both_values_exact() {
        let k = t(&[("produce", json!({"error": "UNKNOWN_PRODUCER_ID"}))]);
        let s = t(&[("produce", json!({"error": "OUT_OF_ORDER_SEQUENCE_NUMBER"}))]);
        let v = compare_with("demo", &k, &s, LIST);
        assert!(v.passed());
        assert_eq!(v.documented.len(), 1);
        let s2 = t(&[("produce", json!({"error": "NONE"}))]);
        assert!(!compare_with("demo", &k, &s2, LIST).passed());
    }

    #[test]
    fn a_documented_difference_that_no_longer_occurs_is_stale() {
        let k = t(&[("produce", json!({"error": "UNKNOWN_PRODUCER_ID"}))]);
        let v = compare_with("demo", &k, &k.clone(), LIST);
        assert!(!v.passed());
        assert_eq!(v.stale.len(), 1);
    }
}
