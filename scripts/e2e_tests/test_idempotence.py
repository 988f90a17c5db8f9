"""Idempotent producers against real clients: exactly once, in order, across
two kill -9 restarts of the broker mid-stream.

Without idempotence a retried batch whose ack was lost is stored twice (see
test_crash.py). With it, the broker recognises the retry by producer id,
epoch and sequence and answers with the original offset, so every message is
stored once — even when the retry arrives after a crash and restart, which
only works if the producer state is rebuilt exactly from the log.
"""

import pytest

from helpers import (
    ck_consume,
    ck_create_topic,
    ck_produce_through_kills,
    ck_watermarks,
    kp_consume,
    kp_produce,
    kp_producer,
    make_messages,
)

PARTITIONS = 3
TOTAL = 50_000
KILL_AFTER = 8_000
DOWN_FOR = 1.0


def _check_exactly_once_in_order(kaas, topic, msgs, acked, info):
    by_seq = {m.seq: m for m in msgs}
    ends = {p: ck_watermarks(kaas.bootstrap, topic, p)[1] for p in range(PARTITIONS)}
    consumed = ck_consume(kaas.bootstrap, topic, ends, timeout=180)
    seen = {}
    for part, recs in consumed.items():
        assert [r.offset for r in recs] == list(range(ends[part])), "partition %d: offsets not dense" % part
        seqs = [int(dict(r.headers)["seq"]) for r in recs]
        # in order: a partition holds its messages in production order
        assert seqs == sorted(seqs), "partition %d: messages out of order; %s" % (part, info)
        for r, seq in zip(recs, seqs):
            assert seq not in seen, "seq %d stored twice (at %s and %s); %s" % (seq, seen[seq], (part, r.offset), info)
            seen[seq] = (part, r.offset)
            m = by_seq[seq]
            assert (r.key, r.value, r.headers) == (m.key, m.value, m.headers), "record differs from seq %d" % seq
    # exactly once: every acknowledged message is there, at its reported offset
    wrong = [(seq, pos, seen.get(seq)) for seq, pos in acked.items() if seen.get(seq) != pos]
    assert not wrong, "%d acknowledged messages missing or moved (first: %s); %s" % (len(wrong), wrong[:5], info)
    return seen


@pytest.mark.slow
@pytest.mark.crash
def test_confluent_idempotent_producer_exactly_once_across_two_kill9(kaas, topic_name):
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(TOTAL, PARTITIONS, seed=44, max_value=200)
    d, stats = ck_produce_through_kills(
        kaas, topic_name, msgs, {"enable.idempotence": True, "acks": "all"},
        kills=2, total=TOTAL, kill_after=KILL_AFTER, down_for=DOWN_FOR,
    )
    info = "stats=%s acked=%d failed=%d (first failures: %s)" % (
        {k: v for k, v in stats.items()}, len(d.ok), len(d.failed), list(d.failed.items())[:3])
    # the scenario happened: two kills with traffic in flight, and work after each
    assert len(stats["killed_at_acked"]) == 2 and stats["sent_while_down"] > 0, info
    assert not d.failed, "idempotent producer saw failures: " + info
    assert len(d.ok) == TOTAL, info
    seen = _check_exactly_once_in_order(kaas, topic_name, msgs, d.ok, info)
    assert len(seen) == TOTAL, "stored %d distinct messages of %d; %s" % (len(seen), TOTAL, info)


def test_kafka_python_idempotent_producer(kaas, topic_name):
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(5_000, PARTITIONS, seed=45, max_value=200, null_header_values=False)
    producer = kp_producer(kaas.bootstrap, enable_idempotence=True, acks="all")
    try:
        d = kp_produce(producer, topic_name, msgs)
    finally:
        producer.close()
    assert not d.failed, list(d.failed.items())[:3]
    ends = {p: ck_watermarks(kaas.bootstrap, topic_name, p)[1] for p in range(PARTITIONS)}
    assert sum(ends.values()) == len(msgs)
    got = kp_consume(kaas.bootstrap, topic_name, ends)
    stored = sorted(int(dict(r.headers)["seq"]) for recs in got.values() for r in recs)
    assert stored == list(range(len(msgs)))
