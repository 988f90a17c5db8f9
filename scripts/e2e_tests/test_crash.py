"""Crash consistency: kill -9 the broker while a producer is streaming, restart it on
the same data dir, and check that every acknowledged message is still there, at the
offset its delivery report named.

The producer is not idempotent, so a batch that was written but whose ack was lost
can be retried and stored twice: duplicates of that kind are allowed. Lost or moved
acknowledged messages are not.
"""

import pytest

from helpers import (
    ck_consume,
    ck_create_topic,
    ck_produce_through_kills,
    ck_watermarks,
    make_messages,
)

PARTITIONS = 3
TOTAL = 12_000  # messages offered to the producer
KILL_AFTER = 3_000  # acknowledged messages before the kill
DOWN_FOR = 1.5  # seconds the producer keeps producing into a dead broker


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("acks", ["all", "1"])
def test_kill9_midstream_keeps_every_acknowledged_message(kaas, topic_name, acks):
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(TOTAL, PARTITIONS, seed=20, max_value=300)
    d, stats = ck_produce_through_kills(kaas, topic_name, msgs, {"acks": acks}, kills=1, total=TOTAL,
                                       kill_after=KILL_AFTER, down_for=DOWN_FOR)
    info = "acks=%s stats=%s acked=%d failed=%d (first failures: %s)" % (
        acks, stats, len(d.ok), len(d.failed), list(d.failed.items())[:3])

    print(info)
    # the scenario really happened: acks before the kill, and after the restart
    assert stats["killed_at_acked"][0] >= KILL_AFTER, info
    assert stats["sent_while_down"] > 0, info
    acked_after_kill = [s for s in d.ok if s >= stats["offered_before_kill"][0]]
    assert len(acked_after_kill) >= 1000, "producer did not continue after restart: " + info

    # no two acknowledged messages were given the same offset
    where = {}
    for seq, pos in d.ok.items():
        assert pos not in where, "seq %d and %d both acknowledged at %s; %s" % (where[pos], seq, pos, info)
        where[pos] = seq

    # one more kill -9 and restart with no traffic: recovery of a quiet log
    kaas.kill9()
    kaas.restart()

    by_seq = {m.seq: m for m in msgs}
    ends = {}
    for part in range(PARTITIONS):
        low, high = ck_watermarks(kaas.bootstrap, topic_name, part)
        assert low == 0, "partition %d: log start moved to %d; %s" % (part, low, info)
        max_acked = max((off for p, off in d.ok.values() if p == part), default=-1)
        assert high >= max_acked + 1, "partition %d: high watermark %d below acknowledged offset %d; %s" % (
            part, high, max_acked, info)
        ends[part] = high
    consumed = ck_consume(kaas.bootstrap, topic_name, ends, timeout=120)

    log = {}
    for part, recs in consumed.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(ends[part])), "partition %d: offsets not dense 0..%d" % (part, ends[part] - 1)
        for r in recs:
            # every stored record is an intact copy of a produced message
            hdr = dict(r.headers)
            assert "seq" in hdr, "partition %d offset %d: record without seq header" % (part, r.offset)
            m = by_seq[int(hdr["seq"])]
            assert (r.key, r.value, r.headers) == (m.key, m.value, m.headers), (
                "partition %d offset %d: record differs from produced seq %d" % (part, r.offset, m.seq))
            log[(part, r.offset)] = m.seq

    print("log after restart: %s records, %d acknowledged, %d duplicates of retried batches" % (
        {p: len(v) for p, v in consumed.items()}, len(d.ok), len(log) - len(set(log.values()))))
    missing = [(seq, pos) for seq, pos in d.ok.items() if log.get(pos) != seq]
    assert not missing, "%d acknowledged messages not at their offsets after kill -9 (first: %s, found there: %s); %s" % (
        len(missing), missing[:5], [log.get(pos) for _, pos in missing[:5]], info)
