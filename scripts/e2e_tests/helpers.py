"""Client helpers shared by the e2e tests: message generation, produce/consume with
confluent-kafka (librdkafka) and kafka-python, and a client-independent checker.

Consumers never use consumer groups: they assign() partitions and start at explicit
offsets, with auto-commit off. confluent-kafka insists on a group.id (the Python
wrapper refuses to build a Consumer without one) and librdkafka then looks up the
group coordinator in the background even though assign() never needs it; errors from
that lookup arrive as consumer errors without a topic and are tolerated here.
kafka-python runs with group_id=None and sends no group requests at all.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Msg:
    """One message to produce. `seq` is its index in the produced stream."""

    seq: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Tuple[Tuple[str, Optional[bytes]], ...]
    partition: Optional[int]  # None: let the client's partitioner choose (by key)
    timestamp: int  # ms since epoch, CreateTime


@dataclass(frozen=True)
class Rec:
    """One consumed record, normalised across clients."""

    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Tuple[Tuple[str, Optional[bytes]], ...]
    timestamp: int
    timestamp_type: str  # "create" | "append" | "none"


def make_messages(
    n: int,
    partitions: int,
    seed: int,
    explicit_every: int = 4,
    null_header_values: bool = True,
    compressible: bool = False,
    max_value: int = 600,
) -> List[Msg]:
    """Deterministic, varied messages: null and empty keys/values, duplicate and
    non-ASCII header keys, empty header values, binary payloads, explicit and
    key-based partition choice, explicit timestamps."""
    rng = random.Random(seed)
    base_ts = int(time.time() * 1000) - 60_000
    out = []
    for i in range(n):
        if i % 97 == 0:
            key = None
        elif i % 101 == 0:
            key = b""
        else:
            key = b"key-%d" % (i % 1000)
        if i % 113 == 0:
            value = b""
        elif i % 211 == 0:
            value = None  # a tombstone: null, not empty
        elif compressible:
            word = b"kaas-%d-" % (i % 7)
            value = (word * (max_value // len(word) + 1))[: rng.randint(max_value // 2, max_value)]
        else:
            value = rng.randbytes(rng.randint(1, max_value))
        headers: List[Tuple[str, Optional[bytes]]] = [("seq", b"%d" % i)]
        if i % 3 == 0:
            headers.append(("bin\u00e6\u2211", rng.randbytes(rng.randint(0, 32))))
        if i % 5 == 0:
            headers += [("dup", b"first"), ("dup", b"second"), ("empty", b"")]
        if null_header_values and i % 7 == 0:
            headers.append(("null", None))
        partition = (i % partitions) if (key is None or i % explicit_every == 0) else None
        out.append(Msg(i, key, value, tuple(headers), partition, base_ts + i))
    return out


def _norm_headers(h) -> Tuple[Tuple[str, Optional[bytes]], ...]:
    if not h:
        return ()
    return tuple((k if isinstance(k, str) else k.decode("utf-8"), None if v is None else bytes(v)) for k, v in h)


def wait_for(pred: Callable[[], bool], timeout: float, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


# ------------------------------------------------------------------ confluent-kafka

CK_IGNORABLE_GLOBAL = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
}


# librdkafka logs go to Python logging (pytest shows them for failed tests only) instead of
# stderr, where handles that outlive their test would spam reconnect errors into others.
CK_LOGGER = logging.getLogger("librdkafka")


def ck_admin(bootstrap: str, **conf) -> AdminClient:
    c = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "logger": CK_LOGGER}
    c.update(conf)
    return AdminClient(c)


def ck_create_topic(bootstrap_or_admin, name: str, partitions: int, config: Optional[dict] = None, timeout: float = 20):
    admin = ck_admin(bootstrap_or_admin) if isinstance(bootstrap_or_admin, str) else bootstrap_or_admin
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    fs[name].result(timeout=timeout)
    # the topic must be visible in metadata with every partition having a leader
    def visible():
        md = admin.list_topics(topic=name, timeout=5)
        t = md.topics.get(name)
        return t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 0 for p in t.partitions.values()
        )

    wait_for(visible, timeout, what="topic %s in metadata" % name)
    return admin


def ck_producer(bootstrap: str, **conf) -> Producer:
    c = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,  # kaas has no idempotence yet
        "linger.ms": 5,
        "batch.num.messages": 1000,
        "message.timeout.ms": 60000,
        "logger": CK_LOGGER,
    }
    c.update(conf)
    return Producer(c)


@dataclass
class Delivery:
    ok: Dict[int, Tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: Dict[int, str] = field(default_factory=dict)  # seq -> error
    order: List[int] = field(default_factory=list)  # seqs in delivery-report order


def ck_produce(producer: Producer, topic: str, msgs: Sequence[Msg], delivery: Optional[Delivery] = None,
               flush_timeout: float = 120) -> Delivery:
    d = delivery or Delivery()

    def cb_for(seq):
        def cb(err, m):
            d.order.append(seq)
            if err is not None:
                d.failed[seq] = str(err)
            else:
                d.ok[seq] = (m.partition(), m.offset())

        return cb

    for m in msgs:
        kwargs = dict(value=m.value, key=m.key, headers=list(m.headers), timestamp=m.timestamp, on_delivery=cb_for(m.seq))
        if m.partition is not None:
            kwargs["partition"] = m.partition
        for _ in range(1000):
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports and retry
                producer.poll(0.1)
        else:
            raise AssertionError("producer queue stayed full")
        producer.poll(0)
    remaining = producer.flush(flush_timeout)
    assert remaining == 0, "%d messages still undelivered after %.0f s flush" % (remaining, flush_timeout)
    return d


def ck_consumer(bootstrap: str, **conf) -> Consumer:
    c = {
        "bootstrap.servers": bootstrap,
        "group.id": "kaas-e2e-unused",  # required by the Python wrapper; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",  # an unexpected OFFSET_OUT_OF_RANGE must surface
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 200,
        "socket.timeout.ms": 10000,
        "logger": CK_LOGGER,
    }
    c.update(conf)
    return Consumer(c)


def ck_rec(m) -> Rec:
    ttype, ts = m.timestamp()
    tname = {1: "create", 2: "append"}.get(ttype, "none")
    return Rec(m.partition(), m.offset(), m.key(), m.value(), _norm_headers(m.headers()), ts, tname)


def ck_consume(
    bootstrap: str,
    topic: str,
    end_offsets: Dict[int, int],
    start_offsets: Optional[Dict[int, int]] = None,
    timeout: float = 60,
    consumer_conf: Optional[dict] = None,
) -> Dict[int, List[Rec]]:
    """Read partition p from start_offsets[p] (default: beginning) until offset
    end_offsets[p]-1 has been seen, for every p. Fails on partition errors or timeout."""
    out: Dict[int, List[Rec]] = {p: [] for p in end_offsets}
    todo = {p for p, end in end_offsets.items() if end > (start_offsets or {}).get(p, 0)}
    c = ck_consumer(bootstrap, **(consumer_conf or {}))
    try:
        c.assign([
            TopicPartition(topic, p, (start_offsets or {}).get(p, OFFSET_BEGINNING)) for p in end_offsets
        ])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise AssertionError(
                    "consume timed out after %.0f s; partitions not finished: %s; got %s"
                    % (timeout, sorted(todo), {p: len(v) for p, v in out.items()})
                )
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.fatal():
                        raise AssertionError("fatal consumer error: %s" % err)
                    if m.topic() is None or err.code() in CK_IGNORABLE_GLOBAL:
                        continue  # e.g. the background coordinator lookup; not a fetch problem
                    raise AssertionError("consume error on %s[%s]: %s" % (m.topic(), m.partition(), err))
                p = m.partition()
                out[p].append(ck_rec(m))
                if m.offset() >= end_offsets[p] - 1:
                    todo.discard(p)
    finally:
        c.close()
    return out


def ck_expect_offset_error(bootstrap: str, topic: str, partition: int, offset: int, timeout: float = 20):
    """Fetch from `offset` with auto.offset.reset=error: expect librdkafka's
    _AUTO_OFFSET_RESET error for that partition (the broker said OFFSET_OUT_OF_RANGE)
    and no message. Returns the KafkaError."""
    c = ck_consumer(bootstrap, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            assert err is not None, "got a message at offset %d reading from out-of-range offset %d" % (
                m.offset(), offset)
            if m.topic() == topic and m.partition() == partition:
                assert err.code() == KafkaError._AUTO_OFFSET_RESET, err
                return err
        raise AssertionError("no error within %.0f s fetching %s[%d] at offset %d" % (timeout, topic, partition, offset))
    finally:
        c.close()


def ck_watermarks(bootstrap: str, topic: str, partition: int, timeout: float = 10) -> Tuple[int, int]:
    c = ck_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
    finally:
        c.close()


# --------------------------------------------------------------------- kafka-python


def kp_common(bootstrap: str) -> dict:
    return {
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": 30000,
        "reconnect_backoff_max_ms": 1000,
    }


def kp_producer(bootstrap: str, **conf):
    from kafka import KafkaProducer

    c = kp_common(bootstrap)
    c.update(
        acks="all",
        enable_idempotence=False,  # kafka-python 3.x defaults to idempotent (InitProducerId)
        linger_ms=5,
        batch_size=64 * 1024,
        retries=5,
    )
    c.update(conf)
    return KafkaProducer(**c)


def kp_produce(producer, topic: str, msgs: Sequence[Msg], timeout: float = 120) -> Delivery:
    d = Delivery()
    futures = []
    for m in msgs:
        f = producer.send(
            topic,
            value=m.value,
            key=m.key,
            headers=list(m.headers),
            partition=m.partition,
            timestamp_ms=m.timestamp,
        )
        futures.append((m.seq, f))
    producer.flush(timeout=timeout)
    for seq, f in futures:
        try:
            md = f.get(timeout=1)
            d.ok[seq] = (md.partition, md.offset)
        except Exception as e:  # noqa: BLE001 - recorded and asserted on by the caller
            d.failed[seq] = repr(e)
        d.order.append(seq)
    return d


def kp_consumer(bootstrap: str, **conf):
    from kafka import KafkaConsumer

    c = kp_common(bootstrap)
    c.update(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",  # anything but earliest/latest: raise OffsetOutOfRangeError
        fetch_max_wait_ms=200,
        allow_auto_create_topics=False,  # kafka-python's consumer default is True
    )
    c.update(conf)
    return KafkaConsumer(**c)


def kp_rec(r) -> Rec:
    tname = {0: "create", 1: "append"}.get(r.timestamp_type, "none")
    return Rec(r.partition, r.offset, r.key, r.value, _norm_headers(r.headers), r.timestamp, tname)


def kp_consume(
    bootstrap: str,
    topic: str,
    end_offsets: Dict[int, int],
    start_offsets: Optional[Dict[int, int]] = None,
    timeout: float = 60,
    consumer_conf: Optional[dict] = None,
) -> Dict[int, List[Rec]]:
    from kafka import TopicPartition as KTP

    out: Dict[int, List[Rec]] = {p: [] for p in end_offsets}
    todo = {p for p, end in end_offsets.items() if end > (start_offsets or {}).get(p, 0)}
    c = kp_consumer(bootstrap, **(consumer_conf or {}))
    try:
        tps = {p: KTP(topic, p) for p in end_offsets}
        c.assign(list(tps.values()))
        for p, tp in tps.items():
            c.seek(tp, (start_offsets or {}).get(p, 0))
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise AssertionError(
                    "consume timed out after %.0f s; partitions not finished: %s; got %s"
                    % (timeout, sorted(todo), {p: len(v) for p, v in out.items()})
                )
            batches = c.poll(timeout_ms=500, max_records=5000)
            for tp, recs in batches.items():
                for r in recs:
                    out[tp.partition].append(kp_rec(r))
                    if r.offset >= end_offsets[tp.partition] - 1:
                        todo.discard(tp.partition)
    finally:
        c.close()
    return out


# ------------------------------------------------------------------------- checking


def check_roundtrip(
    msgs: Sequence[Msg],
    delivery: Delivery,
    consumed: Dict[int, List[Rec]],
    partitions: int,
    check_timestamps: bool = True,
) -> Dict[int, int]:
    """Every message acknowledged; per partition the delivered offsets are 0..n-1 in
    production order; what was consumed is exactly that, byte for byte.
    Returns {partition: count}."""
    assert not delivery.failed, "delivery failures (first 5): %s" % list(delivery.failed.items())[:5]
    assert len(delivery.ok) == len(msgs), "acked %d of %d" % (len(delivery.ok), len(msgs))
    by_seq = {m.seq: m for m in msgs}
    per_part: Dict[int, List[Tuple[int, int]]] = {p: [] for p in range(partitions)}
    for seq, (p, off) in delivery.ok.items():
        assert 0 <= p < partitions, "seq %d delivered to partition %d" % (seq, p)
        want = by_seq[seq].partition
        assert want is None or want == p, "seq %d asked for partition %d, delivered to %d" % (seq, want, p)
        per_part[p].append((off, seq))
    counts = {}
    for p, pairs in per_part.items():
        pairs.sort()
        offsets = [o for o, _ in pairs]
        assert offsets == list(range(len(pairs))), (
            "partition %d: delivered offsets are not 0..%d without gaps/duplicates: first bad at %s"
            % (p, len(pairs) - 1, next((i for i, o in enumerate(offsets) if o != i), None))
        )
        seqs = [s for _, s in pairs]
        assert seqs == sorted(seqs), "partition %d: offsets not in production order" % p
        recs = consumed.get(p, [])
        assert [r.offset for r in recs] == offsets, (
            "partition %d: consumed offsets differ from delivered ones (consumed %d, delivered %d; "
            "first consumed %s, last consumed %s)"
            % (p, len(recs), len(offsets), recs[0].offset if recs else None, recs[-1].offset if recs else None)
        )
        for r, (off, seq) in zip(recs, pairs):
            m = by_seq[seq]
            ctx = "partition %d offset %d (seq %d)" % (p, off, seq)
            assert r.key == m.key, "%s: key %r != produced %r" % (ctx, r.key, m.key)
            assert r.value == m.value, "%s: value differs (len %s vs produced %s)" % (
                ctx,
                None if r.value is None else len(r.value),
                None if m.value is None else len(m.value),
            )
            assert r.headers == m.headers, "%s: headers %r != produced %r" % (ctx, r.headers, m.headers)
            if check_timestamps:
                assert r.timestamp_type == "create", "%s: timestamp type %s" % (ctx, r.timestamp_type)
                assert r.timestamp == m.timestamp, "%s: timestamp %d != produced %d" % (ctx, r.timestamp, m.timestamp)
        counts[p] = len(pairs)
    return counts


def ck_produce_through_kills(kaas, topic, msgs, conf, kills, total, kill_after, down_for, chunk=100):
    """Stream `msgs[:total]` with a confluent-kafka producer (extra config
    `conf`) while the broker is kill -9'd `kills` times: each time once
    `kill_after` more messages are acknowledged, the broker dies, the producer
    keeps producing into it for `down_for` seconds, then it restarts on the
    same data dir and port. Returns the delivery reports and counters that
    prove the scenario happened."""
    c = {
        "linger.ms": 2,
        "message.timeout.ms": 120000,  # outlives the outages: queued messages wait for the restart
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 500,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "request.timeout.ms": 10000,
        "max.in.flight.requests.per.connection": 5,
    }
    c.update(conf)
    p = ck_producer(kaas.bootstrap, **c)
    d = Delivery()

    def cb_for(seq):
        def cb(err, m):
            if err is not None:
                d.failed[seq] = str(err)
            else:
                d.ok[seq] = (m.partition(), m.offset())

        return cb

    def produce_chunk(part):
        for m in part:
            kwargs = dict(value=m.value, key=m.key, headers=list(m.headers), timestamp=m.timestamp,
                          on_delivery=cb_for(m.seq))
            if m.partition is not None:
                kwargs["partition"] = m.partition
            for _ in range(200):
                try:
                    p.produce(topic, **kwargs)
                    break
                except BufferError:
                    p.poll(0.05)
            else:
                raise AssertionError("producer queue stayed full")
        p.poll(0.005)

    i = 0
    stats = dict(killed_at_acked=[], offered_before_kill=[], sent_while_down=0)
    for k in range(kills):
        target = len(d.ok) + kill_after
        deadline = time.monotonic() + 60
        # stream until `kill_after` more messages are acknowledged, then kill -9
        while len(d.ok) < target:
            assert time.monotonic() < deadline, "only %d acks before kill %d after 60 s" % (len(d.ok), k + 1)
            if i < total * (k + 1) // (kills + 1):
                produce_chunk(msgs[i:i + chunk])
                i += chunk
            else:
                p.poll(0.05)
        kaas.kill9()
        stats["killed_at_acked"].append(len(d.ok))
        stats["offered_before_kill"].append(i)
        # keep producing into the dead broker for a while
        down_until = time.monotonic() + down_for
        while time.monotonic() < down_until and i < total - 2000:
            produce_chunk(msgs[i:i + chunk])
            i += chunk
            stats["sent_while_down"] += chunk
            time.sleep(0.1)
        kaas.restart()
    while i < total:
        produce_chunk(msgs[i:i + chunk])
        i += chunk
    remaining = p.flush(180)
    assert remaining == 0, "%d messages neither acknowledged nor failed after 180 s" % remaining
    stats["offered"] = i
    return d, stats
