"""Many brokers on one data directory (issue 11): three `kaas serve` processes
share a directory, partitions are spread over them, and an idempotent
confluent-kafka producer with acks=all streams into all of them while one broker
is kill -9'd and restarted twice. Its partitions move to the others after the
lease and its bounds, and back when it returns; every acknowledged record must
be there exactly once, at the offset its delivery report named.

A consumer group of three members rides out the kill -9 of its coordinator's
broker: the group's slot moves to another broker with the offsets it committed,
and consumption goes on from there, nothing committed read again and nothing
skipped.
"""

import socket
import struct
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from helpers import (
    CK_IGNORABLE_GLOBAL,
    CK_LOGGER,
    ck_admin,
    ck_consume,
    ck_create_topic,
    ck_produce_through_kills,
    ck_producer,
    ck_watermarks,
    make_messages,
)
from kaas_broker import KaasBroker
from test_franz_go import RECORDS as FRANZ_RECORDS
from test_franz_go import franzgo  # noqa: F401 - the fixture, shared
from test_transactions import java_client_classpath, java_only  # noqa: F401 - the fixture, shared

PARTITIONS = 6
TOTAL = 100_000  # issue 11 item 8a
KILL_AFTER = 3_000
# Short bounds so a dead broker's partitions move within about two seconds.
BOUNDS = ["--lease-ms", "1200", "--clock-skew-bound-ms", "200", "--volume-staleness-bound-ms", "300"]
# Groups form quickly.
GROUP_ARGS = ["--group-initial-rebalance-delay-ms", "300"]


def watermarks(bootstrap, topic, partition, timeout=30.0):
    """ck_watermarks, asked again (boundedly) while the partition moves: right
    after a broker returns, its partitions are handed back to it, and a client
    that read Metadata a moment before is told it asked the old leader."""
    moving = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._UNKNOWN_PARTITION,
              KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError.UNKNOWN_LEADER_EPOCH)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ck_watermarks(bootstrap, topic, partition)
        except KafkaException as e:
            if e.args[0].code() not in moving or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def settled_leaders(bootstrap, topic, timeout=60.0):
    """Each partition's leader, once every partition has one and none changed for 1.5 s
    (right after creation they may still move to where placement puts them)."""
    admin = ck_admin(bootstrap)
    deadline = time.monotonic() + timeout
    seen, since = None, time.monotonic()
    while True:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        now = {p: m.leader for p, m in meta.partitions.items()}
        if now != seen or any(b < 0 for b in now.values()):
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.5:
            return now
        assert time.monotonic() < deadline, "the leaders of %s never settled: %s" % (topic, now)
        time.sleep(0.2)


class OneOfThree:
    """What ck_produce_through_kills needs of "the broker": the bootstrap of the
    whole cluster, and kill -9 / restart of one of its brokers."""

    def __init__(self, brokers, victim):
        self.brokers = brokers
        self.victim = victim

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.brokers)

    def kill9(self):
        self.victim.kill9()

    def restart(self):
        self.victim.restart()


@pytest.fixture
def cluster(request):
    shared = Path(tempfile.mkdtemp(prefix="kaas-e2e-cluster-"))
    brokers = []
    try:
        for i in range(3):
            b = KaasBroker(extra_args=["--broker-id", str(i)] + BOUNDS + GROUP_ARGS, name="kaas-%d" % i,
                           data_dir=shared / "data")
            brokers.append(b)
            b.start()
        yield brokers
    finally:
        failed = getattr(request.node, "_kaas_failed", False)
        for b in brokers:
            b.stop(timeout=10.0)
            b.close(keep=failed)
            if failed:
                print("kept %s's temp dir: %s" % (b.name, b.workdir))
        if failed:
            print("kept the shared data dir: %s" % shared)


@pytest.mark.slow
@pytest.mark.crash
def test_idempotent_acks_all_across_three_brokers_survives_kill9_of_one_twice(cluster, topic_name):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    ck_create_topic(bootstrap, topic_name, PARTITIONS)
    # The victim leads partitions: placement is a hash of the topic's (random) name, so a
    # fixed broker leads none of them in about one run in eleven ((2/3)^6).
    leaders = settled_leaders(bootstrap, topic_name)
    victim = cluster[max(set(leaders.values()), key=list(leaders.values()).count)]
    print("partition leaders %s; the victim is broker %s" % (leaders, victim.name))
    target = OneOfThree(cluster, victim)
    msgs = make_messages(TOTAL, PARTITIONS, seed=11, max_value=300)
    d, stats = ck_produce_through_kills(
        target, topic_name, msgs, {"acks": "all", "enable.idempotence": True}, kills=2, total=TOTAL,
        kill_after=KILL_AFTER, down_for=3.0)
    info = "stats=%s acked=%d failed=%d (first failures: %s)" % (
        stats, len(d.ok), len(d.failed), list(d.failed.items())[:3])
    print(info)
    assert not d.failed, info
    assert len(stats["killed_at_acked"]) == 2 and stats["sent_while_down"] > 0, info
    # the scenario really happened: the survivors took the victim's partitions
    # over while it was down, and released them to it when it came back
    survivors = "".join(b.log_tail(max_lines=100000, max_bytes=1 << 24) for b in cluster if b is not victim)
    assert "took the partition over" in survivors, info
    assert "released the partition to its new place" in survivors, info

    ends = {p: watermarks(target.bootstrap, topic_name, p)[1] for p in range(PARTITIONS)}
    got = ck_consume(target.bootstrap, topic_name, ends, timeout=120)
    by_seq = {m.seq: m for m in msgs}
    at = {(p, r.offset): r for p, recs in got.items() for r in recs}
    for seq, (p, off) in d.ok.items():
        r = at.get((p, off))
        assert r is not None, "seq %d acknowledged at %s is missing; %s" % (seq, (p, off), info)
        assert (r.key, r.value) == (by_seq[seq].key, by_seq[seq].value), \
            "offset %s holds another record than seq %d; %s" % ((p, off), seq, info)
    # idempotence: nothing but the acknowledged records, so none twice
    assert len(at) == len(d.ok), "%d records for %d acknowledged; %s" % (len(at), len(d.ok), info)


GROUP_PER_PARTITION = 400


class Member:
    """A subscribed consumer of the group: what it consumed, and the offsets
    whose commit the coordinator acknowledged."""

    def __init__(self, bootstrap, group, topic):
        self.c = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000,
            "fetch.wait.max.ms": 100,
            "logger": CK_LOGGER,
        })
        self.assigned = set()
        self.records = []
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        self.assigned = {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.assigned = set()

    def poll_and_commit(self, topic, acked):
        """Consumes a small batch and commits it synchronously; `acked` keeps the
        highest offset per partition whose commit was acknowledged. A commit that
        fails (the coordinator is moving) is simply not acknowledged."""
        got = {}
        for m in self.c.consume(num_messages=50, timeout=0.05):
            err = m.error()
            if err is not None:
                # A broker that has not read the new topic's file yet says it
                # does not know it; the next metadata refresh finds it.
                if err.code() in CK_IGNORABLE_GLOBAL or m.topic() is None or \
                        err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise AssertionError("consumer error: %s" % err)
            self.records.append((m.partition(), m.offset()))
            got[m.partition()] = max(got.get(m.partition(), -1), m.offset() + 1)
        if not got:
            return
        offsets = [TopicPartition(topic, p, o) for p, o in sorted(got.items())]
        try:
            self.c.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            return
        for p, o in got.items():
            acked[p] = max(acked.get(p, 0), o)


def find_coordinator(broker, group, key_type=0):
    """(error code, node id) of FindCoordinator v1 for `group` (key_type 0) or a
    transactional id (key_type 1), asked of one broker on the wire (the admin
    client hides which broker it asked)."""
    client = b"kaas-e2e"
    key = group.encode()
    body = (struct.pack(">hhih", 10, 1, 7, len(client)) + client + struct.pack(">h", len(key)) + key
            + struct.pack(">b", key_type))
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.settimeout(5)
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            assert chunk, "connection closed"
            head += chunk
        (size,) = struct.unpack(">i", head)
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            assert chunk, "connection closed"
            data += chunk
    # correlation id, throttle time, error code, error message (nullable), node id
    _, _, error = struct.unpack_from(">iih", data, 0)
    (msg_len,) = struct.unpack_from(">h", data, 10)
    (node,) = struct.unpack_from(">i", data, 12 + max(msg_len, 0))
    return error, node


def coordinator_of(brokers, group, timeout=60, key_type=0):
    """The coordinator every broker in `brokers` names for `group` (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        answers = {find_coordinator(b, group, key_type) for b in brokers}
        if len(answers) == 1:
            error, node = answers.pop()
            if error == 0:
                return node
        assert time.monotonic() < deadline, "no agreed coordinator of %s: %s" % (group, answers)
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.crash
def settled_coordinator(cluster, key: str, key_type: int = 0) -> int:
    """The index of `key`'s coordinator once slots have settled where placement
    puts them: just after the start they move from the first broker up to the
    others, and a test of a coordinator's kill -9 must kill the one it measures."""
    deadline = time.monotonic() + 60
    coordinator, since = None, time.monotonic()
    while True:
        now = coordinator_of(cluster, key, key_type=key_type)
        if now != coordinator:
            coordinator, since = now, time.monotonic()
        elif time.monotonic() - since >= 3.0:
            return coordinator
        assert time.monotonic() < deadline, "the coordinator of %s never settled" % key
        time.sleep(0.2)


def test_a_consumer_group_survives_kill9_of_its_coordinators_broker(cluster, topic_name):
    bootstrap = ",".join(b.bootstrap for b in cluster)
    group = "failover-" + topic_name
    # The group forms once its slot has stopped moving (see settled_coordinator):
    # a member that joined while the slot moved at start once stayed without
    # partitions for 60 s under a loaded machine (two e2e workers), a case of
    # its own, not this test's (left open).
    settled_coordinator(cluster, group)
    ck_create_topic(bootstrap, topic_name, PARTITIONS)
    p = ck_producer(bootstrap, acks="all")
    failed = []
    for i in range(GROUP_PER_PARTITION):
        for part in range(PARTITIONS):
            p.produce(topic_name, value=b"%d:%d" % (part, i), partition=part,
                      on_delivery=lambda err, m: err and failed.append(err))
        p.poll(0)
    assert p.flush(60) == 0
    assert not failed, failed[:3]

    members = [Member(bootstrap, group, topic_name) for _ in range(3)]
    acked = {}
    consumed = lambda: len({r for m in members for r in m.records})  # noqa: E731
    total = PARTITIONS * GROUP_PER_PARTITION
    deadline = time.monotonic() + 60
    while not (all(m.assigned for m in members) and consumed() >= total // 3):
        assert time.monotonic() < deadline, "the group never formed and consumed a third: %s" % (
            [sorted(m.assigned) for m in members])
        for m in members:
            m.poll_and_commit(topic_name, acked)
    before = dict(acked)
    home = coordinator_of(cluster, group)
    victim = cluster[home]

    victim.kill9()
    # The members keep polling and committing; the group's slot moves to a live
    # broker after the lease and its bounds, with every acknowledged commit.
    deadline = time.monotonic() + 120
    while consumed() < total:
        assert time.monotonic() < deadline, "consumed %d of %d after the kill; acked %s" % (
            consumed(), total, acked)
        for m in members:
            m.poll_and_commit(topic_name, acked)
    survivors = [b for b in cluster if b is not victim]
    moved = coordinator_of(survivors, group)
    assert moved != home, "the group is still coordinated by the killed broker %d" % home

    # Nothing skipped: every offset of every partition was read.
    for part in range(PARTITIONS):
        offsets = {o for m in members for p, o in m.records if p == part}
        assert offsets == set(range(GROUP_PER_PARTITION)), "partition %d: missing %s" % (
            part, sorted(set(range(GROUP_PER_PARTITION)) - offsets)[:10])
    # Nothing committed before the kill was read again (the offsets survived the
    # move: a group that lost them would start over from the earliest), and what
    # was read twice is bounded by what was not yet committed.
    seen = {}
    for m in members:
        for r in m.records:
            seen[r] = seen.get(r, 0) + 1
    again = [r for r, n in seen.items() if n > 1]
    for part, off in again:
        assert off >= before.get(part, 0), "offset %d of partition %d was committed before the kill, yet " \
            "read again" % (off, part)
    assert len(again) <= total - sum(before.values()), again[:10]
    # The new coordinator serves the offsets committed since.
    committed = members[0].c.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=20)
    for tp in committed:
        assert tp.offset >= before.get(tp.partition, 0), (tp, before)
    for m in members:
        m.c.close()
    log = "".join(b.log_tail(max_lines=100000, max_bytes=1 << 24) for b in survivors)
    assert "took the slot over" in log

    # The broker returns and gets its slot back, offsets included.
    victim.restart()
    deadline = time.monotonic() + 60
    while coordinator_of(cluster, group) != home:
        assert time.monotonic() < deadline, "the group's slot never came back to broker %d" % home
        time.sleep(0.2)
    late = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": CK_LOGGER})
    try:
        back = late.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=20)
        # At least what was acknowledged (a commit answered with an error may
        # still have landed, as a timed-out request's may).
        for tp in back:
            assert tp.offset >= acked.get(tp.partition, 0), (tp, acked)
    finally:
        late.close()


@pytest.mark.slow
def test_rolling_restart_of_all_three_brokers_under_an_idempotent_producer(cluster, topic_name):
    """Each broker in turn is stopped with SIGTERM (it hands its partitions over
    at once) and started again, while an idempotent acks=all producer streams:
    no delivery fails, and every acknowledged record is there exactly once."""
    import time

    from helpers import Delivery, ck_producer

    bootstrap = ",".join(b.bootstrap for b in cluster)
    ck_create_topic(bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(12_000, PARTITIONS, seed=12, max_value=200)
    p = ck_producer(bootstrap, **{"acks": "all", "enable.idempotence": True, "linger.ms": 2,
                                   "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                   "retry.backoff.max.ms": 500, "reconnect.backoff.ms": 50,
                                   "reconnect.backoff.max.ms": 500})
    d = Delivery()

    def cb_for(seq):
        def cb(err, m):
            if err is not None:
                d.failed[seq] = str(err)
            else:
                d.ok[seq] = (m.partition(), m.offset())
        return cb

    per_step = len(msgs) // (len(cluster) + 1)
    i = 0
    for step in range(len(cluster) + 1):
        for m in msgs[i:i + per_step] if step < len(cluster) else msgs[i:]:
            for _ in range(200):
                kwargs = dict(value=m.value, key=m.key, on_delivery=cb_for(m.seq))
                if m.partition is not None:
                    kwargs["partition"] = m.partition
                try:
                    p.produce(topic_name, **kwargs)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        i += per_step
        deadline = time.monotonic() + 60
        while len(d.ok) + len(d.failed) < min(i, len(msgs)) and time.monotonic() < deadline:
            p.poll(0.05)
        if step < len(cluster):
            cluster[step].restart()  # SIGTERM, hand-over, start again on the same port
    assert p.flush(120) == 0
    info = "acked=%d failed=%d (first failures: %s)" % (len(d.ok), len(d.failed), list(d.failed.items())[:3])
    assert not d.failed, info
    assert len(d.ok) == len(msgs), info
    handed = "".join(b.log_tail(max_lines=100000, max_bytes=1 << 24) for b in cluster)
    assert "released the partition to its new place" in handed, info

    ends = {q: watermarks(bootstrap, topic_name, q)[1] for q in range(PARTITIONS)}
    got = ck_consume(bootstrap, topic_name, ends, timeout=120)
    by_seq = {m.seq: m for m in msgs}
    at = {(q, r.offset): r for q, recs in got.items() for r in recs}
    for seq, (q, off) in d.ok.items():
        r = at.get((q, off))
        assert r is not None and (r.key, r.value) == (by_seq[seq].key, by_seq[seq].value), \
            "seq %d acknowledged at %s: %s; %s" % (seq, (q, off), r, info)
    assert len(at) == len(d.ok), "%d records for %d acknowledged; %s" % (len(at), len(d.ok), info)


# A transaction across brokers waits for the marker queue's watchers (100 ms a hop,
# docs/cluster.md): about 0.7 s each here, so these copies are kept short. The Java
# loop commits 250 records a transaction: 6,000 records are 24 transactions, each kill
# (at 30 % and 60 % of the copy) lands inside one, and the test takes about 35 s
# where 10,000 took 58 s. The confluent-kafka app copies 15,000, half of what its
# single-broker twin copies, for the same reason.
JAVA_CLUSTER_EOS_RECORDS = 6_000
CLUSTER_EOS_RECORDS = 15_000


def eos_copy_through_coordinator_kills(cluster, topic_name, tmp_path, records, **copy_args):
    """run_eos_copy (test_transactions.py) across the three brokers while the broker
    coordinating the app's transactional id is kill -9'd twice, each time inside a
    transaction, and kept down until the others may take its items: its slot moves to
    another broker and back, the partitions it led too. run_eos_copy checks that the
    output is every input record exactly once."""
    from test_transactions import run_eos_copy

    txn_id = topic_name + "-eos"  # the id run_eos_copy gives the app
    victim = cluster[settled_coordinator(cluster, txn_id, key_type=1)]

    class DownForAWhile(OneOfThree):
        """Restarted only after the others may take its items (1.7 s of
        silence here): a quicker return would keep them, its process lock
        proving its previous life dead."""

        def restart(self):
            time.sleep(3.0)
            self.victim.restart()

    r = run_eos_copy(DownForAWhile(cluster, victim), topic_name, tmp_path,
                     [(0.3, "broker"), (0.6, "broker")], records, **copy_args)
    assert sum("broker killed" in h for h in r["history"]) == 2, r["history"]
    survivors = "".join(b.log_tail(max_lines=100000, max_bytes=1 << 24) for b in cluster if b is not victim)
    assert "took the slot over" in survivors, r["history"]
    return r


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(300)
def test_eos_copy_survives_kill9_of_its_transaction_coordinators_broker(cluster, topic_name, tmp_path):
    """Issue 11 item 8c: the exactly-once consume-transform-produce app of
    test_transactions.py (confluent-kafka) copies its input across three brokers
    while the broker coordinating its transactional id is kill -9'd twice."""
    eos_copy_through_coordinator_kills(cluster, topic_name, tmp_path, CLUSTER_EOS_RECORDS)


@java_only
@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(300)
def test_java_eos_copy_survives_kill9_of_its_transaction_coordinators_broker(cluster, topic_name, tmp_path,
                                                                            java_client_classpath):
    """The same with the Java client's loop (java/ EosCopy: sendOffsetsToTransaction with
    the consumer's group metadata, read_committed, transaction version 2): the Java
    producer and consumer follow the coordinators and leaders as they move."""
    command = ["java", "-Xss1m", "-XX:TieredStopAtLevel=1", "-cp", java_client_classpath, "kaas.e2e.EosCopy"]
    eos_copy_through_coordinator_kills(cluster, topic_name, tmp_path, JAVA_CLUSTER_EOS_RECORDS,
                                       timeout=180, command=command)



def test_franz_go_produces_and_consumes_in_a_group_across_three_brokers(cluster, franzgo, topic_name):
    """franz-go (scripts/e2e_tests/go) against the three brokers: its idempotent acks=all
    producer sends to each partition's leader, wherever placement put it, and its group
    consumer finds a coordinator that may be any of them and commits there; every record is
    produced, consumed and committed exactly once."""
    import json
    import subprocess

    bootstrap = ",".join(b.bootstrap for b in cluster)
    out = subprocess.run([str(franzgo), bootstrap, topic_name, str(FRANZ_RECORDS)],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, "franz-go failed:\n%s\n%s" % (out.stdout[-3000:], out.stderr[-3000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["produced"] == result["consumed"] == FRANZ_RECORDS, result
    assert result["committed"] == result["end_offsets"] == FRANZ_RECORDS, result
    assert result["duplicates"] == 0 and result["partitions"] == 3, result
    meta = ck_admin(bootstrap).list_topics(topic_name, timeout=10).topics[topic_name]
    print("partition leaders: %s" % {p: m.leader for p, m in meta.partitions.items()})
