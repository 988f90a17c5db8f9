"""Compacted topics (issue 12), as clients meet them: a topic with cleanup.policy=compact
takes only keyed records. A record without a key is refused, INVALID_RECORD, and the
client reports it for that record; keyed records go through. Same assertions on kaas and
on Apache Kafka."""

import pytest
from confluent_kafka import KafkaError

from helpers import ck_create_topic, ck_producer, ck_watermarks, kp_producer


def _deliver(producer, topic, records):
    """Sends (key, value) pairs one by one, each flushed alone (a batch with a keyless
    record is refused whole); returns each record's delivery error code (None: delivered)."""
    outcomes = []
    for key, value in records:
        got = []
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, _msg: got.append(err))
        assert producer.flush(30) == 0, "not delivered in time"
        outcomes.append(got[0].code() if got[0] is not None else None)
    return outcomes


def test_confluent_keyless_record_to_a_compacted_topic_is_invalid_record(kaas_or_kafka, topic_name):
    ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = ck_producer(kaas_or_kafka.bootstrap, **{"compression.type": "none", "retries": 0})
    outcomes = _deliver(p, topic_name, [(b"k1", b"a"), (None, b"b"), (b"k2", b"c"), (b"", b"d")])
    assert outcomes == [None, KafkaError.INVALID_RECORD, None, None], outcomes
    assert ck_watermarks(kaas_or_kafka.bootstrap, topic_name, 0) == (0, 3)


def test_kafka_python_keyless_record_to_a_compacted_topic_is_invalid_record(kaas_or_kafka, topic_name):
    from kafka.errors import InvalidRecordError

    ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = kp_producer(kaas_or_kafka.bootstrap, retries=0)
    try:
        assert p.send(topic_name, key=b"k", value=b"a", partition=0).get(timeout=30).offset == 0
        with pytest.raises(InvalidRecordError):
            p.send(topic_name, value=b"b", partition=0).get(timeout=30)
        assert p.send(topic_name, key=b"k", value=b"c", partition=0).get(timeout=30).offset == 1
    finally:
        p.close(timeout=10)


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_confluent_keyless_record_in_a_compressed_batch_is_invalid_record(kaas_or_kafka, topic_name,
                                                                         codec):
    """Inside a compressed batch too: the batch with a keyless record is refused whole (every
    record of it fails, INVALID_RECORD) and nothing is written; a keyed batch goes through."""
    ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = ck_producer(kaas_or_kafka.bootstrap, **{"compression.type": codec, "retries": 0,
                                                "linger.ms": 200})
    got = []
    for key, value in [(b"k1", b"a" * 100), (None, b"b" * 100), (b"k2", b"c" * 100)]:
        p.produce(topic_name, key=key, value=value, partition=0,
                  on_delivery=lambda err, _msg: got.append(err))
    assert p.flush(30) == 0, "not delivered in time"
    codes = [e.code() if e is not None else None for e in got]
    # The keyless record's batch fails whole, and nothing of it is written. The client usually
    # sends all three in one batch; on a loaded machine it may send a keyed record before
    # linger.ms gathered the rest, and that batch of its own goes through (as in Kafka).
    assert codes[1] == KafkaError.INVALID_RECORD, codes
    assert set(codes) <= {None, KafkaError.INVALID_RECORD}, codes
    written = codes.count(None)
    assert ck_watermarks(kaas_or_kafka.bootstrap, topic_name, 0) == (0, written)
    assert _deliver(p, topic_name, [(b"k3", b"d" * 100)]) == [None]
    assert ck_watermarks(kaas_or_kafka.bootstrap, topic_name, 0) == (0, written + 1)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_keyless_record_in_a_compressed_batch_is_invalid_record(kaas_or_kafka,
                                                                            topic_name, codec):
    from kafka.errors import InvalidRecordError

    ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"cleanup.policy": "compact"})
    p = kp_producer(kaas_or_kafka.bootstrap, retries=0, compression_type=codec)
    try:
        with pytest.raises(InvalidRecordError):
            p.send(topic_name, value=b"b" * 100, partition=0).get(timeout=30)
        assert p.send(topic_name, key=b"k", value=b"c" * 100, partition=0).get(timeout=30).offset == 0
    finally:
        p.close(timeout=10)
