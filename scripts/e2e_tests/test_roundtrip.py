"""Produce 20,000 messages with acks=all through a real client, read them back with
assign() from the beginning, and compare everything byte for byte."""

import pytest

from helpers import (
    check_roundtrip,
    ck_consume,
    ck_create_topic,
    ck_produce,
    ck_producer,
    ck_watermarks,
    kp_consume,
    kp_produce,
    kp_producer,
    make_messages,
)

N = 20_000
PARTITIONS = 3


@pytest.mark.slow
def test_confluent_roundtrip_20k(kaas, topic_name):
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(N, PARTITIONS, seed=1)
    p = ck_producer(kaas.bootstrap)
    delivery = ck_produce(p, topic_name, msgs)

    ends = {part: 0 for part in range(PARTITIONS)}
    for part, off in delivery.ok.values():
        ends[part] = max(ends[part], off + 1)
    # the broker's high watermark agrees with the delivery reports
    for part, end in ends.items():
        assert ck_watermarks(kaas.bootstrap, topic_name, part) == (0, end), "partition %d watermarks" % part

    consumed = ck_consume(kaas.bootstrap, topic_name, ends, timeout=120)
    counts = check_roundtrip(msgs, delivery, consumed, PARTITIONS)
    assert sum(counts.values()) == N
    assert all(c > 0 for c in counts.values()), counts


@pytest.mark.slow
def test_kafka_python_roundtrip_20k(kaas, topic_name):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kaas.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(topic_name, num_partitions=PARTITIONS, replication_factor=1)])
        assert topic_name in admin.list_topics()
    finally:
        admin.close()

    # kafka-python cannot send null header values; everything else is the same mix
    msgs = make_messages(N, PARTITIONS, seed=2, null_header_values=False)
    p = kp_producer(kaas.bootstrap)
    try:
        delivery = kp_produce(p, topic_name, msgs)
    finally:
        p.close(timeout=10)

    ends = {part: 0 for part in range(PARTITIONS)}
    for part, off in delivery.ok.values():
        ends[part] = max(ends[part], off + 1)
    consumed = kp_consume(kaas.bootstrap, topic_name, ends, timeout=180)
    counts = check_roundtrip(msgs, delivery, consumed, PARTITIONS)
    assert sum(counts.values()) == N
    assert all(c > 0 for c in counts.values()), counts


@pytest.mark.slow
def test_cross_client(kaas, topic_name):
    """Written by librdkafka (lz4 batches, null header values), read by kafka-python."""
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(3000, PARTITIONS, seed=3, null_header_values=True)
    delivery = ck_produce(ck_producer(kaas.bootstrap, **{"compression.type": "lz4"}), topic_name, msgs)
    ends = {part: 0 for part in range(PARTITIONS)}
    for part, off in delivery.ok.values():
        ends[part] = max(ends[part], off + 1)
    consumed = kp_consume(kaas.bootstrap, topic_name, ends, timeout=120)
    check_roundtrip(msgs, delivery, consumed, PARTITIONS)
