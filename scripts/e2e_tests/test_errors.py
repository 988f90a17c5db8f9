"""Error paths: out-of-range fetch offsets, and metadata for unknown topics with and
without auto topic creation."""

import time

import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers import (
    ck_admin,
    ck_consume,
    ck_consumer,
    ck_create_topic,
    ck_expect_offset_error,
    ck_producer,
    ck_watermarks,
    kp_consumer,
    wait_for,
)

NO_AUTO_CREATE = ["--auto-create-topics", "false"]


def _produce(bootstrap, topic, n, partition=0):
    p = ck_producer(bootstrap)
    for i in range(n):
        p.produce(topic, b"m%d" % i, partition=partition)
    assert p.flush(20) == 0


# ------------------------------------------------------------------ offset out of range


def test_confluent_out_of_range_offset_with_reset_error(kaas, topic_name):
    ck_create_topic(kaas.bootstrap, topic_name, 1)
    _produce(kaas.bootstrap, topic_name, 5)
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (0, 5)

    # librdkafka turns the broker's OFFSET_OUT_OF_RANGE into _AUTO_OFFSET_RESET
    ck_expect_offset_error(kaas.bootstrap, topic_name, 0, 100)

    # a position inside the log is fine with the same consumer settings
    got = ck_consume(kaas.bootstrap, topic_name, {0: 5}, start_offsets={0: 3})
    assert [r.offset for r in got[0]] == [3, 4]


def test_kafka_python_out_of_range_offset_raises(kaas, topic_name):
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError

    ck_create_topic(kaas.bootstrap, topic_name, 1)
    _produce(kaas.bootstrap, topic_name, 5)
    c = kp_consumer(kaas.bootstrap)  # auto_offset_reset="none"
    try:
        tp = KTP(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 100)
        deadline = time.monotonic() + 20
        with pytest.raises(OffsetOutOfRangeError):
            while time.monotonic() < deadline:
                recs = c.poll(timeout_ms=500)
                assert not recs, "records from an out-of-range position: %s" % recs
    finally:
        c.close()


def test_confluent_reset_earliest_after_out_of_range(kaas, topic_name):
    """With auto.offset.reset=earliest the same situation recovers from offset 0."""
    ck_create_topic(kaas.bootstrap, topic_name, 1)
    _produce(kaas.bootstrap, topic_name, 5)
    c = ck_consumer(kaas.bootstrap, **{"auto.offset.reset": "earliest"})
    got = []
    try:
        c.assign([TopicPartition(topic_name, 0, 100)])
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.topic() is None, "partition error despite auto.offset.reset=earliest: %s" % m.error()
                continue
            got.append((m.offset(), m.value()))
    finally:
        c.close()
    assert got == [(i, b"m%d" % i) for i in range(5)]


# ------------------------------------------------------------------------ unknown topic


def _metadata_topic_error(client, topic):
    md = client.list_topics(topic=topic, timeout=10)
    t = md.topics.get(topic)
    assert t is not None, "metadata response lacks the requested topic %s" % topic
    return None if t.error is None else t.error.code()


def test_unknown_topic_without_auto_create(kaas_factory, topic_name):
    broker = kaas_factory(NO_AUTO_CREATE, name="kaas-no-autocreate")
    # a producer handle asks for auto-creation (allow_auto_topic_creation=true) ...
    p = ck_producer(broker.bootstrap, **{"message.timeout.ms": 5000})
    assert _metadata_topic_error(p, topic_name) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # ... and so does a consumer handle with allow.auto.create.topics=false
    c = ck_consumer(broker.bootstrap)
    try:
        assert _metadata_topic_error(c, topic_name) == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        c.close()
    # the broker did not create it
    assert topic_name not in ck_admin(broker.bootstrap).list_topics(timeout=10).topics

    # producing to it fails instead of creating it
    errors = []
    p.produce(topic_name, b"x", on_delivery=lambda err, m: errors.append(err))
    assert p.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None, "produce to a missing topic succeeded: %s" % errors
    assert topic_name not in ck_admin(broker.bootstrap).list_topics(timeout=10).topics

    # kafka-python's admin describe (allow_auto_topic_creation=false) agrees
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        topics = admin.describe_topics([topic_name])
        assert [(t["name"], t["error_code"]) for t in topics] == [(topic_name, 3)], topics
    finally:
        admin.close()

    # explicit creation still works on this broker
    ck_create_topic(broker.bootstrap, topic_name, 1)
    _produce(broker.bootstrap, topic_name, 1)
    assert ck_watermarks(broker.bootstrap, topic_name, 0) == (0, 1)


def test_auto_create_on_metadata_and_produce(kaas, topic_name):
    """Default broker: Metadata with allow_auto_topic_creation=true creates the topic,
    with it false (kafka-python admin, librdkafka consumer) it does not."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kaas.bootstrap, request_timeout_ms=20000)
    try:
        topics = admin.describe_topics([topic_name])
        assert [(t["name"], t["error_code"]) for t in topics] == [(topic_name, 3)], topics
    finally:
        admin.close()
    c = ck_consumer(kaas.bootstrap)
    try:
        assert _metadata_topic_error(c, topic_name) == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        c.close()
    assert topic_name not in ck_admin(kaas.bootstrap).list_topics(timeout=10).topics

    # produce to a topic nobody created: the producer's metadata request creates it
    p = ck_producer(kaas.bootstrap)
    delivered = []
    p.produce(topic_name, b"auto", key=b"k", on_delivery=lambda err, m: delivered.append((err, m.partition(), m.offset())))
    assert p.flush(30) == 0
    assert len(delivered) == 1 and delivered[0][0] is None, delivered
    _, part, off = delivered[0]
    assert off == 0
    wait_for(lambda: topic_name in ck_admin(kaas.bootstrap).list_topics(timeout=10).topics, 10, what="auto-created topic listed")
    got = ck_consume(kaas.bootstrap, topic_name, {part: 1})
    assert [(r.key, r.value) for r in got[part]] == [(b"k", b"auto")]
