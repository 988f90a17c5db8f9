"""Admin APIs through confluent-kafka's AdminClient (librdkafka) and kafka-python's
KafkaAdminClient: CreateTopics, CreatePartitions, DeleteTopics, ListOffsets,
DeleteRecords, DescribeConfigs, DescribeCluster / Metadata."""

import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from helpers import (
    ck_admin,
    ck_consume,
    ck_consumer,
    ck_create_topic,
    ck_expect_offset_error,
    ck_producer,
    ck_watermarks,
    wait_for,
)

T = 20  # admin call timeout, seconds


def _all_topics(admin):
    """Topic names from a Metadata request for all topics (never auto-creates)."""
    return set(admin.list_topics(timeout=10).topics)


def _partition_count(admin, topic):
    md = admin.list_topics(timeout=10)
    t = md.topics.get(topic)
    return None if t is None else len(t.partitions)


def _error_code(future):
    """Kafka error code a failed admin future carries, or None if it succeeded."""
    try:
        future.result(timeout=T)
        return None
    except KafkaException as e:
        return e.args[0].code()


def _produce_values(bootstrap, topic, values, partition=0, timestamps=None):
    p = ck_producer(bootstrap)
    offsets = []

    def cb(err, m):
        assert err is None, err
        offsets.append(m.offset())

    for i, v in enumerate(values):
        kw = {"partition": partition, "on_delivery": cb}
        if timestamps:
            kw["timestamp"] = timestamps[i]
        p.produce(topic, v, **kw)
    assert p.flush(T) == 0
    return sorted(offsets)


# ------------------------------------------------------------------------ CreateTopics


def test_create_topics_validate_only_and_real(kaas, topic_name):
    admin = ck_admin(kaas.bootstrap)
    # validate_only: accepted, but nothing is created
    fs = admin.create_topics([NewTopic(topic_name, num_partitions=4, replication_factor=1)],
                             validate_only=True, operation_timeout=T, request_timeout=T)
    assert fs[topic_name].result(timeout=T) is None
    time.sleep(0.5)
    assert topic_name not in _all_topics(admin), "validate_only created the topic"

    # for real: visible with 4 partitions, leader is our only broker
    ck_create_topic(admin, topic_name, 4)
    md = admin.list_topics(timeout=10)
    t = md.topics[topic_name]
    assert sorted(t.partitions) == [0, 1, 2, 3]
    broker_ids = set(md.brokers)
    for p in t.partitions.values():
        assert p.leader in broker_ids, "partition %d leader %d not a known broker %s" % (p.id, p.leader, broker_ids)
        assert p.error is None, p.error

    # creating it again fails with TOPIC_ALREADY_EXISTS, also in validate_only mode
    for validate in (False, True):
        fs = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)],
                                 validate_only=validate, operation_timeout=T, request_timeout=T)
        assert _error_code(fs[topic_name]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert _partition_count(admin, topic_name) == 4, "a failed re-create changed the topic"


def test_create_topics_several_and_invalid(kaas, topic_name):
    admin = ck_admin(kaas.bootstrap)
    names = ["%s-%d" % (topic_name, i) for i in range(3)]
    bad = "bad/name-" + topic_name  # '/' is not a legal topic character
    fs = admin.create_topics(
        [NewTopic(n, num_partitions=i + 1, replication_factor=1) for i, n in enumerate(names)]
        + [NewTopic(bad, num_partitions=1, replication_factor=1)],
        operation_timeout=T, request_timeout=T)
    for n in names:
        assert fs[n].result(timeout=T) is None
    assert _error_code(fs[bad]) == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    wait_for(lambda: set(names) <= _all_topics(admin), 10, what="created topics listed")
    assert [_partition_count(admin, n) for n in names] == [1, 2, 3]
    assert bad not in _all_topics(admin)


# -------------------------------------------------------------------- CreatePartitions


def test_create_partitions(kaas, topic_name):
    admin = ck_create_topic(kaas.bootstrap, topic_name, 2)
    _produce_values(kaas.bootstrap, topic_name, [b"p0-a", b"p0-b"], partition=0)

    # validate_only does not change the count
    fs = admin.create_partitions([NewPartitions(topic_name, 7)], validate_only=True,
                                 operation_timeout=T, request_timeout=T)
    assert fs[topic_name].result(timeout=T) is None
    time.sleep(0.5)
    assert _partition_count(admin, topic_name) == 2

    fs = admin.create_partitions([NewPartitions(topic_name, 5)], operation_timeout=T, request_timeout=T)
    assert fs[topic_name].result(timeout=T) is None
    wait_for(lambda: _partition_count(admin, topic_name) == 5, 15, what="5 partitions in metadata")

    # shrinking is refused
    fs = admin.create_partitions([NewPartitions(topic_name, 3)], operation_timeout=T, request_timeout=T)
    assert _error_code(fs[topic_name]) == KafkaError.INVALID_PARTITIONS
    assert _partition_count(admin, topic_name) == 5

    # the new partition works: first message at offset 0, old data untouched
    assert _produce_values(kaas.bootstrap, topic_name, [b"p4-x", b"p4-y"], partition=4) == [0, 1]
    got = ck_consume(kaas.bootstrap, topic_name, {0: 2, 4: 2})
    assert [r.value for r in got[4]] == [b"p4-x", b"p4-y"]
    assert [r.value for r in got[0]] == [b"p0-a", b"p0-b"]
    for part in (1, 2, 3):
        assert ck_watermarks(kaas.bootstrap, topic_name, part) == (0, 0)


# ------------------------------------------------------------------------ DeleteTopics


def _topic_id(admin, topic):
    """TopicDescription.topic_id as a string, or None when the client/broker has none."""
    try:
        from confluent_kafka import TopicCollection
    except ImportError:
        return None
    fs = admin.describe_topics(TopicCollection([topic]), request_timeout=T)
    desc = fs[topic].result(timeout=T)
    tid = getattr(desc, "topic_id", None)
    if tid is None:
        return None
    s = str(tid)
    if s in ("AAAAAAAAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000"):
        return None  # zero uuid: broker did not report one
    return s


def test_delete_topic_then_recreate(kaas, topic_name):
    admin = ck_create_topic(kaas.bootstrap, topic_name, 1)
    _produce_values(kaas.bootstrap, topic_name, [b"old-%d" % i for i in range(10)])
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (0, 10)
    old_id = _topic_id(admin, topic_name)

    fs = admin.delete_topics([topic_name], operation_timeout=T, request_timeout=T)
    assert fs[topic_name].result(timeout=T) is None
    wait_for(lambda: topic_name not in _all_topics(admin), 15, what="deleted topic gone from metadata")

    # deleting it again: UNKNOWN_TOPIC_OR_PARTITION
    fs = admin.delete_topics([topic_name], operation_timeout=T, request_timeout=T)
    assert _error_code(fs[topic_name]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # re-create (a broker may need a moment to finish the deletion: bounded retry)
    deadline = time.monotonic() + 15
    while True:
        fs = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)],
                                 operation_timeout=T, request_timeout=T)
        code = _error_code(fs[topic_name])
        if code is None:
            break
        assert code == KafkaError.TOPIC_ALREADY_EXISTS and time.monotonic() < deadline, (
            "re-create failed with %s" % code)
        time.sleep(0.5)
    wait_for(lambda: _partition_count(admin, topic_name) == 1, 15, what="re-created topic in metadata")

    new_id = _topic_id(admin, topic_name)
    if old_id is not None or new_id is not None:
        assert old_id != new_id, "re-created topic kept topic id %s" % old_id

    # the old data is gone and offsets start again at 0
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (0, 0)
    assert _produce_values(kaas.bootstrap, topic_name, [b"new-0"]) == [0]
    got = ck_consume(kaas.bootstrap, topic_name, {0: 1})
    assert [(r.offset, r.value) for r in got[0]] == [(0, b"new-0")]


# ------------------------------------------------------------------------- ListOffsets


def test_list_offsets_earliest_latest_timestamp(kaas, topic_name):
    admin = ck_create_topic(kaas.bootstrap, topic_name, 1)
    base = int(time.time() * 1000) - 3_600_000
    ts = [base + 1000 * i for i in range(10)]
    assert _produce_values(kaas.bootstrap, topic_name, [b"v%d" % i for i in range(10)], timestamps=ts) == list(range(10))
    tp = TopicPartition(topic_name, 0)

    def lo(spec):
        return admin.list_offsets({tp: spec}, request_timeout=T)[tp].result(timeout=T)

    assert lo(OffsetSpec.earliest()).offset == 0
    assert lo(OffsetSpec.latest()).offset == 10
    r = lo(OffsetSpec.for_timestamp(ts[5]))
    assert (r.offset, r.timestamp) == (5, ts[5])
    assert lo(OffsetSpec.for_timestamp(ts[5] + 500)).offset == 6  # first record at or after
    assert lo(OffsetSpec.for_timestamp(base - 10_000)).offset == 0
    assert lo(OffsetSpec.for_timestamp(ts[-1] + 60_000)).offset == -1  # none that late

    # the consumer-side lookups agree
    c = ck_consumer(kaas.bootstrap)
    try:
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 10)
        res = c.offsets_for_times([TopicPartition(topic_name, 0, ts[7])], timeout=10)
        assert [(x.partition, x.offset) for x in res] == [(0, 7)]
        assert res[0].error is None
        res = c.offsets_for_times([TopicPartition(topic_name, 0, ts[-1] + 60_000)], timeout=10)
        assert res[0].offset == -1  # OFFSET_END: no such message
    finally:
        c.close()


# ----------------------------------------------------------------------- DeleteRecords


def test_delete_records_moves_log_start(kaas, topic_name):
    admin = ck_create_topic(kaas.bootstrap, topic_name, 2)
    _produce_values(kaas.bootstrap, topic_name, [b"a%d" % i for i in range(20)], partition=0)
    _produce_values(kaas.bootstrap, topic_name, [b"b%d" % i for i in range(5)], partition=1)

    fs = admin.delete_records([TopicPartition(topic_name, 0, 7)], request_timeout=T, operation_timeout=T)
    res = fs[TopicPartition(topic_name, 0)].result(timeout=T)
    assert res.low_watermark == 7

    tp0 = TopicPartition(topic_name, 0)
    assert admin.list_offsets({tp0: OffsetSpec.earliest()}, request_timeout=T)[tp0].result(T).offset == 7
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (7, 20)
    assert ck_watermarks(kaas.bootstrap, topic_name, 1) == (0, 5), "other partition affected"

    # reading from the beginning now starts at offset 7
    got = ck_consume(kaas.bootstrap, topic_name, {0: 20})
    assert [(r.offset, r.value) for r in got[0]] == [(i, b"a%d" % i) for i in range(7, 20)]

    # below the new log start is out of range now
    ck_expect_offset_error(kaas.bootstrap, topic_name, 0, 3)

    # offset -1 means "up to the high watermark"
    fs = admin.delete_records([TopicPartition(topic_name, 1, -1)], request_timeout=T, operation_timeout=T)
    assert fs[TopicPartition(topic_name, 1)].result(timeout=T).low_watermark == 5
    assert ck_watermarks(kaas.bootstrap, topic_name, 1) == (5, 5)

    # beyond the high watermark: OFFSET_OUT_OF_RANGE, nothing changes
    fs = admin.delete_records([TopicPartition(topic_name, 0, 21)], request_timeout=T, operation_timeout=T)
    assert _error_code(fs[TopicPartition(topic_name, 0)]) == KafkaError.OFFSET_OUT_OF_RANGE
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (7, 20)

    # the new log start survives a restart
    kaas.restart()
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (7, 20)
    assert ck_watermarks(kaas.bootstrap, topic_name, 1) == (5, 5)


# --------------------------------------------------------------------- DescribeConfigs


def test_describe_configs_topic(kaas, topic_name):
    admin = ck_create_topic(kaas.bootstrap, topic_name, 1, config={"retention.ms": "86400000"})
    res = ConfigResource(ResourceType.TOPIC, topic_name)
    entries = admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)
    assert entries, "no config entries for a topic"
    for name, e in entries.items():
        assert e.name == name
    assert "retention.ms" in entries, sorted(entries)
    assert entries["retention.ms"].value == "86400000"
    assert not entries["retention.ms"].is_default
    # a default is reported as such
    if "cleanup.policy" in entries:
        assert entries["cleanup.policy"].value in ("delete", "compact", "delete,compact", "compact,delete")

    missing = ConfigResource(ResourceType.TOPIC, topic_name + "-missing")
    fut = admin.describe_configs([missing], request_timeout=T)[missing]
    assert _error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


# --------------------------------------------------------------- DescribeCluster/Metadata


def test_describe_cluster_one_broker(kaas):
    admin = ck_admin(kaas.bootstrap)
    md = admin.list_topics(timeout=10)
    assert len(md.brokers) == 1, md.brokers
    (b,) = md.brokers.values()
    assert (b.host, b.port) == ("127.0.0.1", kaas.port), "advertised %s:%s" % (b.host, b.port)
    assert md.controller_id == b.id
    assert md.cluster_id

    dc = admin.describe_cluster(request_timeout=T).result(timeout=T)
    assert [(n.id, n.host, n.port) for n in dc.nodes] == [(b.id, "127.0.0.1", kaas.port)]
    assert dc.cluster_id == md.cluster_id
    assert dc.controller is not None and dc.controller.id == b.id


# ----------------------------------------------------------------- kafka-python admin


def test_kafka_python_admin(kaas, topic_name):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=kaas.bootstrap, request_timeout_ms=20000)
    try:
        cluster = admin.describe_cluster()
        brokers = cluster["brokers"]
        assert len(brokers) == 1, cluster
        assert (brokers[0]["host"], brokers[0]["port"]) == ("127.0.0.1", kaas.port), cluster
        assert cluster["controller_id"] == brokers[0]["broker_id"], cluster
        assert cluster["cluster_id"], cluster

        admin.create_topics([KNewTopic(topic_name, num_partitions=1, replication_factor=1)], validate_only=True)
        assert topic_name not in admin.list_topics()
        admin.create_topics([KNewTopic(topic_name, num_partitions=1, replication_factor=1)])
        wait_for(lambda: topic_name in admin.list_topics(), 10, what="topic listed")

        admin.create_partitions({topic_name: 3})
        wait_for(lambda: _partition_count(ck_admin(kaas.bootstrap), topic_name) == 3, 10, what="3 partitions")

        _produce_values(kaas.bootstrap, topic_name, [b"x%d" % i for i in range(10)], partition=2)
        res = admin.delete_records({KTP(topic_name, 2): 4})
        assert res[KTP(topic_name, 2)]["low_watermark"] == 4, res
        assert ck_watermarks(kaas.bootstrap, topic_name, 2) == (4, 10)

        admin.delete_topics([topic_name])
        wait_for(lambda: topic_name not in admin.list_topics(), 15, what="topic deleted")
    finally:
        admin.close()
