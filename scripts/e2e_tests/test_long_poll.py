"""Fetch long poll: a consumer waiting at the log end gets a message produced a second
later promptly, and while it waits it does not spin (few Fetch requests)."""

import json
import threading
import time

from confluent_kafka import TopicPartition

from helpers import ck_consumer, ck_create_topic, ck_producer, ck_watermarks, kp_consumer

MAX_WAIT_MS = 5000  # the consumer's fetch max wait: far longer than the 1 s gap
PRODUCE_AFTER = 1.0
PROMPT = 2.5  # seconds from the ack to the consumer having the message (< MAX_WAIT_MS)


def _delayed_produce(bootstrap, topic, value, delay, out):
    """After `delay` s produce one message with acks=all; out['acked_at'] = monotonic time."""

    def run():
        try:
            time.sleep(delay)
            p = ck_producer(bootstrap, **{"linger.ms": 0})
            res = []
            p.produce(topic, value, partition=0, on_delivery=lambda err, m: res.append(err))
            p.flush(15)
            out["acked_at"] = time.monotonic()
            out["error"] = res[0] if res else "no delivery report"
        except Exception as e:  # noqa: BLE001 - surfaced by the test via out["error"]
            out["error"] = repr(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_confluent_long_poll(kaas, topic_name):
    ck_create_topic(kaas.bootstrap, topic_name, 1)
    p = ck_producer(kaas.bootstrap)
    for i in range(3):
        p.produce(topic_name, b"old-%d" % i, partition=0)
    assert p.flush(15) == 0
    end = ck_watermarks(kaas.bootstrap, topic_name, 0)[1]
    assert end == 3

    stats = {}

    def on_stats(s):
        d = json.loads(s)
        fetches = sum(b.get("req", {}).get("Fetch", 0) for b in d.get("brokers", {}).values())
        stats["fetch"] = fetches
        stats["at"] = time.monotonic()

    c = ck_consumer(kaas.bootstrap, **{
        "fetch.wait.max.ms": MAX_WAIT_MS,
        "fetch.min.bytes": 1,
        "statistics.interval.ms": 100,
        "stats_cb": on_stats,
    })
    try:
        c.assign([TopicPartition(topic_name, 0, end)])
        # warm up: connected and fetching at the log end, nothing delivered
        warm_until = time.monotonic() + 1.5
        while time.monotonic() < warm_until:
            m = c.poll(0.1)
            assert m is None or m.error() is not None, "unexpected message at offset %s" % m.offset()
        assert "fetch" in stats and stats["fetch"] >= 1, "consumer has not fetched yet: %s" % stats
        fetch_before = stats["fetch"]
        idle_from = time.monotonic()

        out = {}
        t = _delayed_produce(kaas.bootstrap, topic_name, b"late", PRODUCE_AFTER, out)
        got = None
        deadline = time.monotonic() + PRODUCE_AFTER + MAX_WAIT_MS / 1000 + 10
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is None or m.error() is not None:
                continue
            got = m
        got_at = time.monotonic()
        t.join(20)
        assert out.get("error") is None, "delayed produce failed: %s" % out
        assert got is not None, "message produced after %.1f s never arrived" % PRODUCE_AFTER
        assert (got.offset(), got.value()) == (3, b"late")
        delay = got_at - out["acked_at"]
        assert delay < PROMPT, "message arrived %.2f s after its ack (fetch.wait.max.ms=%d)" % (delay, MAX_WAIT_MS)

        # let one more stats tick land, then count the Fetch requests sent while idle
        time.sleep(0.25)
        c.poll(0.05)
        waited = out["acked_at"] - idle_from
        fetches = stats["fetch"] - fetch_before
        # a long-polling broker holds each Fetch up to 5 s: ~1-2 requests in the idle
        # second (plus the one returning the data). A broker that answers empty at once
        # makes the client spin: hundreds.
        print("long poll: %d Fetch requests in %.2f s idle; message %.3f s after its ack" % (fetches, waited, delay))
        assert fetches <= 10, "%d Fetch requests in %.2f s of waiting at the log end" % (fetches, waited)
    finally:
        c.close()


def test_kafka_python_long_poll(kaas, topic_name):
    from kafka import TopicPartition as KTP

    ck_create_topic(kaas.bootstrap, topic_name, 1)
    c = kp_consumer(kaas.bootstrap, fetch_max_wait_ms=MAX_WAIT_MS, fetch_min_bytes=1,
                    request_timeout_ms=MAX_WAIT_MS + 10000)
    try:
        tp = KTP(topic_name, 0)
        c.assign([tp])
        c.seek(tp, 0)
        warm_until = time.monotonic() + 1.0
        while time.monotonic() < warm_until:
            assert not c.poll(timeout_ms=100), "unexpected records in an empty topic"
        out = {}
        t = _delayed_produce(kaas.bootstrap, topic_name, b"late", PRODUCE_AFTER, out)
        got = []
        deadline = time.monotonic() + PRODUCE_AFTER + MAX_WAIT_MS / 1000 + 10
        while not got and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=50).values():
                got.extend(recs)
        got_at = time.monotonic()
        t.join(20)
        assert out.get("error") is None, "delayed produce failed: %s" % out
        assert [(r.offset, r.value) for r in got] == [(0, b"late")]
        delay = got_at - out["acked_at"]
        assert delay < PROMPT, "message arrived %.2f s after its ack (fetch_max_wait_ms=%d)" % (delay, MAX_WAIT_MS)
    finally:
        c.close()
