//! What a consumer group member subscribes to, read from its JoinGroup
//! metadata. The broker needs it for two rules: OffsetDelete refuses topics
//! the group consumes (GROUP_SUBSCRIBED_TO_TOPIC), and a stable group's
//! offsets of topics it no longer consumes expire (KIP-496).

use crate::protocol::messages::ConsumerProtocolSubscription;
use crate::protocol::Reader;
use bytes::Bytes;

/// The topics in a `consumer` protocol subscription, or `None` if the bytes
/// are not one. Every version of the subscription starts with version 0's
/// fields, so it is read as version 0 whatever version it declares: a newer
/// client still parses.
pub fn subscribed_topics(metadata: &Bytes) -> Option<Vec<String>> {
    let mut r = Reader::new(metadata.clone());
    let version = r.i16().ok()?;
    if version < 0 {
        return None;
    }
    ConsumerProtocolSubscription::decode(&mut r, 0)
        .ok()
        .map(|s| s.topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Writer;
    use bytes::BytesMut;

    pub(crate) fn subscription(version: i16, topics: &[&str]) -> Bytes {
        let sub = ConsumerProtocolSubscription {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        };
        let mut buf = BytesMut::new();
        let mut w = Writer::new(&mut buf);
        w.i16(version);
        sub.encode(&mut w, version).expect("encodes");
        buf.freeze()
    }

    #[test]
    fn subscription_topics_are_read_as_version_0_whatever_the_version() {
        for v in 0..=3 {
            assert_eq!(
                subscribed_topics(&subscription(v, &["a", "b"])),
                Some(vec!["a".to_string(), "b".to_string()])
            );
        }
        assert_eq!(subscribed_topics(&Bytes::from_static(b"\x00")), None);
        assert_eq!(
            subscribed_topics(&Bytes::from_static(b"\x00\x00\x00\x00\x00\x09ab")),
            None
        );
    }
}
