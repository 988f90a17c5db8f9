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
