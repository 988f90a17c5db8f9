"""Many brokers on one data directory (issue 11): three `kaas serve` processes
share a directory, partitions are spread over them, and an idempotent
confluent-kafka producer with acks=all streams into all of them while one broker
is kill -9'd and restarted twice. Its partitions move to the others after the
lease and its bounds, and back when it returns; every acknowledged record must
be there exactly once, at the offset its delivery report named.
"""

import tempfile
from pathlib import Path

import pytest

from helpers import ck_consume, ck_create_topic, ck_produce_through_kills, ck_watermarks, make_messages
from kaas_broker import KaasBroker

PARTITIONS = 6
TOTAL = 30_000
KILL_AFTER = 3_000
# Short bounds so a dead broker's partitions move within about two seconds.
BOUNDS = ["--lease-ms", "1200", "--clock-skew-bound-ms", "200", "--volume-staleness-bound-ms", "300"]


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
            b = KaasBroker(extra_args=["--broker-id", str(i)] + BOUNDS, name="kaas-%d" % i,
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
    victim = cluster[1]
    target = OneOfThree(cluster, victim)
    ck_create_topic(target.bootstrap, topic_name, PARTITIONS)
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

    ends = {p: ck_watermarks(target.bootstrap, topic_name, p)[1] for p in range(PARTITIONS)}
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

    ends = {q: ck_watermarks(bootstrap, topic_name, q)[1] for q in range(PARTITIONS)}
    got = ck_consume(bootstrap, topic_name, ends, timeout=120)
    by_seq = {m.seq: m for m in msgs}
    at = {(q, r.offset): r for q, recs in got.items() for r in recs}
    for seq, (q, off) in d.ok.items():
        r = at.get((q, off))
        assert r is not None and (r.key, r.value) == (by_seq[seq].key, by_seq[seq].value), \
            "seq %d acknowledged at %s: %s; %s" % (seq, (q, off), r, info)
    assert len(at) == len(d.ok), "%d records for %d acknowledged; %s" % (len(at), len(d.ok), info)
