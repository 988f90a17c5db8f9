"""Consumer groups with real clients: JoinGroup/SyncGroup/Heartbeat/LeaveGroup rebalances,
committed offsets (OffsetCommit/OffsetFetch) and group membership surviving kill -9, static
membership, and the group admin APIs (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).

Brokers run with a short group.initial.rebalance.delay.ms so groups form quickly; consumers
heartbeat every 500 ms so they learn of rebalances promptly.
"""

import time

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)

from helpers import CK_IGNORABLE_GLOBAL, CK_LOGGER, ck_admin, ck_create_topic, ck_producer, wait_for

PARTITIONS = 6
PER_PARTITION = 50
BROKER_ARGS = ["--group-initial-rebalance-delay-ms", "300"]


@pytest.fixture
def broker(kaas_factory):
    return kaas_factory(extra_args=BROKER_ARGS)


def produce_per_partition(bootstrap, topic, partitions, per_partition):
    """Values b"<partition>:<i>" for i in 0..per_partition on every partition."""
    p = ck_producer(bootstrap)
    failed = []
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, value=b"%d:%d" % (part, i), partition=part,
                      on_delivery=lambda err, m: err and failed.append(err))
        p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:3]


def group_consumer(bootstrap, group, **conf):
    c = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "max.poll.interval.ms": 60000,
        "fetch.wait.max.ms": 100,
        "logger": CK_LOGGER,
    }
    c.update(conf)
    return Consumer(c)


class Tracked:
    """A subscribed consumer that records its assignments as the rebalance callbacks see
    them; poll() drives both."""

    def __init__(self, consumer, topic):
        self.c = consumer
        self.assigned = set()
        self.assign_events = 0
        self.records = []
        consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        self.assign_events += 1
        self.assigned = {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.assigned = set()

    def poll(self, timeout=0.1):
        for m in self.c.consume(num_messages=500, timeout=timeout):
            err = m.error()
            if err is not None:
                if err.code() in CK_IGNORABLE_GLOBAL or m.topic() is None:
                    continue
                raise AssertionError("consumer error: %s" % err)
            self.records.append((m.partition(), m.offset(), m.value()))


def poll_until(consumers, pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s; assignments: %s" % (
                timeout, what, [sorted(t.assigned) for t in consumers]))
        for t in consumers:
            t.poll(0.05)


def poll_for(consumers, seconds):
    """Keeps every consumer polling (heartbeats, rebalance callbacks) for a while."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for t in consumers:
            t.poll(0.05)


def test_two_consumers_split_partitions_and_the_survivor_takes_all(broker, topic_name):
    ck_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    produce_per_partition(broker.bootstrap, topic_name, PARTITIONS, PER_PARTITION)
    group = "split-" + topic_name
    a = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([a], lambda: len(a.assigned) == PARTITIONS, 30, "the first consumer to own every partition")
    b = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([a, b], lambda: a.assigned and b.assigned and len(a.assigned | b.assigned) == PARTITIONS,
               30, "the two consumers to split the partitions")
    assert not (a.assigned & b.assigned), "a partition is owned twice: %s %s" % (a.assigned, b.assigned)
    assert len(a.assigned) == len(b.assigned) == PARTITIONS // 2

    # b leaves (LeaveGroup): a takes everything back.
    b.c.close()
    poll_until([a], lambda: len(a.assigned) == PARTITIONS, 30, "the remaining consumer to own every partition")
    # ... and consumes every message of every partition.
    poll_until([a], lambda: len({(p, o) for p, o, _ in a.records}) >= PARTITIONS * PER_PARTITION, 30,
               "all messages consumed")
    a.c.close()

    admin = ck_admin(broker.bootstrap)
    d = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert d.state == ConsumerGroupState.EMPTY, d.state
    assert d.members == []


def test_committed_offsets_survive_kill9_and_consumption_resumes_after_the_last_commit(broker, topic_name):
    ck_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    produce_per_partition(broker.bootstrap, topic_name, PARTITIONS, PER_PARTITION)
    group = "resume-" + topic_name
    a = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([a], lambda: len(a.records) >= PARTITIONS * PER_PARTITION // 2, 30, "half the messages")

    # Commit exactly what was consumed so far: the next offset of each partition.
    done = {}
    for part, off, _ in a.records:
        done[part] = max(done.get(part, -1), off)
    commit = [TopicPartition(topic_name, p, off + 1) for p, off in sorted(done.items())]
    a.c.commit(offsets=commit, asynchronous=False)
    committed = {tp.partition: tp.offset for tp in a.c.committed(commit, timeout=10)}
    assert committed == {p: off + 1 for p, off in done.items()}
    # Consume more without committing: this progress must not survive.
    a.poll(0.5)

    broker.kill9()
    broker.restart()
    a.c.close()

    b = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([b], lambda: len(b.records) >= PARTITIONS * PER_PARTITION - sum(committed.values()), 60,
               "the rest of the messages after the restart")
    b.c.close()
    first = {}
    for part, off, value in b.records:
        first.setdefault(part, (off, value))
    for part in range(PARTITIONS):
        start = committed.get(part, 0)
        offsets = sorted(o for p, o, _ in b.records if p == part)
        if start == PER_PARTITION:
            assert offsets == [], "partition %d was fully committed, yet re-read %s" % (part, offsets)
            continue
        assert first[part][0] == start, "partition %d resumed at %d, committed %d" % (part, first[part][0], start)
        assert first[part][1] == b"%d:%d" % (part, start)
        assert offsets == list(range(start, PER_PARTITION)), "partition %d: not exactly the rest" % part


def test_kafka_python_consumer_group_commits_and_resumes(broker, topic_name):
    from kafka import KafkaConsumer, TopicPartition as KTP

    parts = 3
    ck_create_topic(broker.bootstrap, topic_name, parts)
    produce_per_partition(broker.bootstrap, topic_name, parts, 20)
    group = "kp-" + topic_name

    def consumer():
        return KafkaConsumer(
            topic_name,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
            request_timeout_ms=30000,
        )

    c = consumer()
    seen = {}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in seen.values()) < parts * 10:
        assert time.monotonic() < deadline, "kafka-python consumed only %s" % {p: len(v) for p, v in seen.items()}
        for tp, recs in c.poll(timeout_ms=200, max_records=5).items():
            seen.setdefault(tp.partition, []).extend(r.offset for r in recs)
    assert c.assignment() == {KTP(topic_name, p) for p in range(parts)}
    c.commit()
    positions = {p: c.position(KTP(topic_name, p)) for p in range(parts)}
    c.close()

    c2 = consumer()
    try:
        wait_for(lambda: c2.poll(timeout_ms=200) is not None and c2.assignment(), 30, what="kafka-python rejoin")
        for p in range(parts):
            assert c2.committed(KTP(topic_name, p)) == positions[p]
    finally:
        c2.close()


def test_a_group_rides_out_a_broker_kill9_without_a_rebalance(broker, topic_name):
    """The group's members are stored when a generation completes: after kill -9 and a
    restart the group is Stable again, both members keep their partitions (no assign
    callback) and commit with their old member id and generation."""
    ck_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    group = "restart-" + topic_name
    a = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    b = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([a, b], lambda: a.assigned and b.assigned and len(a.assigned | b.assigned) == PARTITIONS,
               30, "two consumers to split the partitions")
    # Let any rebalance the two joins caused settle.
    poll_for([a, b], 2)
    before = [(set(t.assigned), t.assign_events) for t in (a, b)]

    broker.kill9()
    broker.restart()
    # Long enough for several heartbeats to reach the restarted broker.
    poll_for([a, b], 4)
    for t in (a, b):
        # Raises (CommitFailed / UNKNOWN_MEMBER_ID) if the member was forgotten.
        t.c.commit(offsets=[TopicPartition(topic_name, p, 0) for p in sorted(t.assigned)],
                   asynchronous=False)
    assert [(set(t.assigned), t.assign_events) for t in (a, b)] == before, "a member was rebalanced"

    admin = ck_admin(broker.bootstrap)
    d = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert d.state == ConsumerGroupState.STABLE
    assert len(d.members) == 2
    a.c.close()
    b.c.close()


def test_static_member_rejoin_within_session_timeout_causes_no_rebalance(broker, topic_name):
    ck_create_topic(broker.bootstrap, topic_name, PARTITIONS)
    group = "static-" + topic_name
    conf = {"session.timeout.ms": 10000}
    a = Tracked(group_consumer(broker.bootstrap, group, **{"group.instance.id": "a"}, **conf), topic_name)
    b = Tracked(group_consumer(broker.bootstrap, group, **{"group.instance.id": "b"}, **conf), topic_name)
    poll_until([a, b], lambda: a.assigned and b.assigned and len(a.assigned | b.assigned) == PARTITIONS,
               30, "two static members to split the partitions")
    # Let any rebalance the two joins caused settle.
    poll_for([a, b], 2)
    a_parts, b_events = set(a.assigned), b.assign_events

    # "a" restarts: a static member does not leave, and its successor rejoins with the same
    # instance id before the session times out.
    a.c.close()
    a2 = Tracked(group_consumer(broker.bootstrap, group, **{"group.instance.id": "a"}, **conf), topic_name)
    poll_until([a2, b], lambda: a2.assigned, 30, "the restarted static member's assignment")
    poll_for([a2, b], 3)
    assert a2.assigned == a_parts, "the restarted member got %s, had %s" % (a2.assigned, a_parts)
    assert b.assign_events == b_events, "the other member was rebalanced"

    admin = ck_admin(broker.bootstrap)
    d = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert d.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in d.members) == ["a", "b"]
    a2.c.close()
    b.c.close()


def test_group_admin_list_describe_offsets_delete(broker, topic_name):
    ck_create_topic(broker.bootstrap, topic_name, 2)
    admin = ck_admin(broker.bootstrap)
    group = "admin-" + topic_name

    # An offsets-only commit (generation -1) through the admin client.
    tps = [TopicPartition(topic_name, 0, 5), TopicPartition(topic_name, 1, 7)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout=20)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=20)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {0: 5, 1: 7}

    groups = admin.list_consumer_groups().result(timeout=20)
    ours = [g for g in groups.valid if g.group_id == group]
    assert len(ours) == 1 and ours[0].state == ConsumerGroupState.EMPTY

    # A group with a member cannot be deleted.
    t = Tracked(group_consumer(broker.bootstrap, group), topic_name)
    poll_until([t], lambda: len(t.assigned) == 2, 30, "the consumer to join")
    with pytest.raises(KafkaException) as e:
        admin.delete_consumer_groups([group])[group].result(timeout=20)
    assert "NON_EMPTY_GROUP" in str(e.value)
    t.c.close()

    admin.delete_consumer_groups([group])[group].result(timeout=20)
    groups = admin.list_consumer_groups().result(timeout=20)
    assert group not in [g.group_id for g in groups.valid]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=20)
    assert listed.topic_partitions in (None, [])
