"""The log cleaner (issue 12), as a client sees it: a compacted topic with 100,000 updates
over 1,000 keys, read back after cleaning, holds the latest value of each key at the offset
it was written at (and so does one written compressed, with each codec, the cleaned batches
still compressed with it); deleted keys go once delete.retention.ms has passed; a committed offset
stays valid; aborted transactional records go; a quiet topic rolls by segment.ms and is
cleaned. The broker runs its cleaner every 300 ms
(`--log-cleaner-backoff-ms`) on small segments, so rounds happen within the test. kaas only:
Apache Kafka's cleaner cannot be made to run on this schedule from a client."""

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from helpers import ck_create_topic, ck_producer, ck_watermarks, kp_consumer, kp_producer, wait_for

KEYS = 1000
UPDATES = 100_000
CLEANER = ["--log-cleaner-backoff-ms", "300"]
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "65536",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


def _produce(bootstrap, topic, records, codec="none"):
    """Sends (key, value) pairs (value None: a tombstone) to partition 0, compressed with
    `codec`; returns offset -> (key, value)."""
    p = ck_producer(bootstrap, **{"compression.type": codec, "enable.idempotence": True,
                                  "linger.ms": 20})
    written = {}
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            written[msg.offset()] = (msg.key(), msg.value())

    for key, value in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.1)
    assert p.flush(120) == 0 and not errors, errors[:3]
    return written


def _read_all(bootstrap, topic, **conf):
    """Every record of partition 0 as (offset, key, value), from the log start to the end."""
    low, high = ck_watermarks(bootstrap, topic, 0)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                  "enable.auto.commit": False, "auto.offset.reset": "error",
                  "fetch.wait.max.ms": 100, **conf})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + 60
        while not out or out[-1][0] < high - 1:
            assert time.monotonic() < deadline, "read %d records, up to %s" % (
                len(out), out[-1][0] if out else None)
            for m in c.consume(num_messages=5000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def _kp_read_all(bootstrap, topic):
    """The same read with kafka-python: its own fetch decoding of cleaned batches (gaps
    between offsets, batches without records)."""
    from kafka.structs import TopicPartition as KpTopicPartition

    low, high = ck_watermarks(bootstrap, topic, 0)
    c = kp_consumer(bootstrap, consumer_timeout_ms=5000)
    out = []
    try:
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, low)
        for r in c:
            out.append((r.offset, r.key, r.value))
            if r.offset >= high - 1:
                break
    finally:
        c.close()
    return out


def _latest(written):
    """The offset of each key's last write: what a clean log keeps."""
    last = {}
    for offset in sorted(written):
        last[written[offset][0]] = offset
    return set(last.values())


def test_confluent_compaction_keeps_the_latest_value_per_key_at_its_offset(kaas_factory, topic_name):
    kaas = kaas_factory(CLEANER)
    ck_create_topic(kaas.bootstrap, topic_name, 1, COMPACTED)
    updates = [(b"k%d" % (i % KEYS), b"v%d" % i) for i in range(UPDATES)]
    deletes = [(b"k%d" % k, None) for k in range(0, KEYS, 10)]
    # Filler after the deletes, on keys of their own, so the tombstones end up in sealed
    # (cleanable) segments rather than the active one.
    filler = [(b"f%d" % (i % 50), b"x" * 200) for i in range(3000)]
    written = _produce(kaas.bootstrap, topic_name, updates + deletes + filler)
    assert len(written) == UPDATES + len(deletes) + len(filler)
    end = max(written) + 1

    # A group commits an offset in the middle of what will be cleaned away.
    committed = 50_000
    g = Consumer({"bootstrap.servers": kaas.bootstrap, "group.id": topic_name + "-g",
                  "enable.auto.commit": False})
    g.commit(offsets=[TopicPartition(topic_name, 0, committed)], asynchronous=False)
    g.close()

    # Cleaning rounds run until the updates are compacted away.
    wait_for(lambda: len(_read_all(kaas.bootstrap, topic_name)) < 10_000, 60,
             interval=1, what="the cleaner to compact the updates")
    got = _read_all(kaas.bootstrap, topic_name)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets only grow"
    # Every record read is the one written at its offset: offsets never change.
    for o, k, v in got:
        assert written[o] == (k, v), (o, k, v, written[o])
    # Of the updates, only each key's latest write is left (a deleted key's updates all go).
    seen = {o for o, _, _ in got if o < UPDATES}
    assert seen == {o for o in _latest(written) if o < UPDATES}, "latest per key"
    assert len(seen) == KEYS - len(deletes)
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (0, end)
    # kafka-python reads the same cleaned log.
    assert _kp_read_all(kaas.bootstrap, topic_name) == _read_all(kaas.bootstrap, topic_name)

    # After delete.retention.ms the tombstones go too, at the next round (more writes make
    # the log dirty enough for one).
    time.sleep(1.5)
    written.update(_produce(kaas.bootstrap, topic_name, filler))

    def deleted_keys_gone():
        keys = {k for _, k, _ in _read_all(kaas.bootstrap, topic_name)}
        return not any(k in keys for k, _ in deletes)

    wait_for(deleted_keys_gone, 60, interval=1, what="tombstones past delete.retention.ms to go")
    final = _read_all(kaas.bootstrap, topic_name)
    live = {k: v for _, k, v in final}
    for k in range(KEYS):
        key = b"k%d" % k
        if k % 10 == 0:
            assert key not in live
        else:
            last = max(i for i in range(UPDATES) if i % KEYS == k)
            assert live[key] == b"v%d" % last

    # The committed offset is still a valid position: the group resumes there.
    g = Consumer({"bootstrap.servers": kaas.bootstrap, "group.id": topic_name + "-g",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        got = g.committed([TopicPartition(topic_name, 0)], timeout=10)
        assert got[0].offset == committed
        g.assign([TopicPartition(topic_name, 0, committed)])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            m = g.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                first = m.offset()
        assert first is not None and first >= committed
    finally:
        g.close()


def test_kafka_python_reads_a_compacted_topic_with_aborted_records_gone(kaas_factory, topic_name):
    """A transactional producer's aborted records disappear from the log after cleaning (a
    read_uncommitted reader stops seeing them); committed ones stay. Read back with
    kafka-python."""
    from confluent_kafka import Producer

    kaas = kaas_factory(CLEANER)
    ck_create_topic(kaas.bootstrap, topic_name, 1, COMPACTED)
    p = Producer({"bootstrap.servers": kaas.bootstrap, "transactional.id": topic_name + "-tx",
                  "compression.type": "none", "linger.ms": 5})
    p.init_transactions(30)
    for round_ in range(20):
        p.begin_transaction()
        for k in range(100):
            p.produce(topic_name, key=b"t%d" % k, value=b"r%d" % round_, partition=0)
        if round_ % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    # Filler so the transactions sit in sealed segments.
    p.begin_transaction()
    for i in range(2000):
        p.produce(topic_name, key=b"f%d" % (i % 20), value=b"x" * 200, partition=0)
    p.commit_transaction(30)

    def values(isolation):
        from kafka.structs import TopicPartition as KpTopicPartition

        c = kp_consumer(kaas.bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                        consumer_timeout_ms=3000)
        try:
            c.assign([KpTopicPartition(topic_name, 0)])
            c.seek_to_beginning()
            return [(r.key, r.value) for r in c if r.key.startswith(b"t")]
        finally:
            c.close()

    # Aborted rounds are odd; the last committed round is 18.
    def clean():
        got = values("read_uncommitted")
        return len(got) == 100 and all(v == b"r18" for _, v in got)

    wait_for(clean, 60, interval=1, what="aborted and superseded records to be cleaned")
    committed = values("read_committed")
    assert sorted(committed) == sorted((b"t%d" % k, b"r18") for k in range(100))


def _stored_batches(kaas, topic):
    """{base offset: (codec id, record count, offsets spanned)} of the stored batches of
    `topic`-0, over its segment files, copies included (<base>_<e>[.cleaned_<E>].log,
    docs/compaction.md). A batch the cleaner rewrote holds fewer records than it spans."""
    import struct

    seen = {}
    for f in sorted((kaas.data_dir / "topics" / (topic + "-0")).glob("*.log")):
        data = f.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (base,) = struct.unpack_from(">q", data, pos)
            (batch_len,) = struct.unpack_from(">i", data, pos + 8)
            if batch_len <= 0 or data[pos + 16] != 2:
                break  # preallocated tail
            (attrs,) = struct.unpack_from(">h", data, pos + 21)
            (last_delta,) = struct.unpack_from(">i", data, pos + 23)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            seen[base] = (attrs & 7, count, last_delta + 1)
            pos += 12 + batch_len
    return seen


def _random_values(n):
    import os

    # Half random, so the batches do not compress to nothing and fill segments.
    return [b"v%d-" % i + os.urandom(24).hex().encode() for i in range(n)]


@pytest.mark.parametrize("client,codec", [("confluent", "lz4"), ("confluent", "zstd"),
                                          ("confluent", "gzip"), ("confluent", "snappy"),
                                          ("kafka-python", "snappy"), ("kafka-python", "gzip")])
def test_compressed_batches_are_compacted_and_stay_compressed(kaas_factory, topic_name, client,
                                                              codec):
    """A compressing producer's compacted topic: after cleaning, the latest value of each key
    at the offset it was written at, superseded values gone, and the cleaned batches still
    compressed with the producer's codec. Read back with both clients."""
    keys, updates = 200, 20_000
    kaas = kaas_factory(CLEANER)
    ck_create_topic(kaas.bootstrap, topic_name, 1, COMPACTED)
    values = _random_values(updates)
    records = [(b"k%d" % (i % keys), values[i]) for i in range(updates)]
    # Filler on keys of its own, so the updates end up in sealed (cleanable) segments.
    records += [(b"f%d" % (i % 20), b"x" * 100 + v) for i, v in enumerate(_random_values(3000))]
    if client == "confluent":
        written = _produce(kaas.bootstrap, topic_name, records, codec)
    else:
        written = _kp_produce(kaas.bootstrap, topic_name, records, codec)
    assert len(written) == len(records)

    wait_for(lambda: len([1 for o, _, _ in _read_all(kaas.bootstrap, topic_name)
                          if o < updates]) == keys,
             60, interval=1, what="the cleaner to compact the compressed updates")
    got = _read_all(kaas.bootstrap, topic_name)
    for o, k, v in got:
        assert written[o] == (k, v), (o, k, v, written[o])
    seen = {o for o, _, _ in got if o < updates}
    assert seen == {o for o in _latest(written) if o < updates}, "latest per key"
    live = {k: v for o, k, v in got if o < updates}
    assert live == {b"k%d" % k: values[updates - keys + k] for k in range(keys)}
    assert _kp_read_all(kaas.bootstrap, topic_name) == got, "kafka-python reads the same"
    # Every batch the cleaner rewrote with records left is still compressed with the
    # producer's codec (one emptied to its header is uncompressed, as Kafka writes it; one
    # kept whole is as the producer sent it, which librdkafka does uncompressed when
    # compressing does not shrink it), and there are such batches.
    stored = _stored_batches(kaas, topic_name)
    rewritten = [(b, c) for b, (c, count, span) in stored.items() if 0 < count < span]
    assert rewritten, "no batch was rewritten: %s" % stored
    assert all(c == CODEC_IDS[codec] for _, c in rewritten), rewritten
    whole = [c for c, count, span in stored.values() if count == span]
    assert whole.count(CODEC_IDS[codec]) > 0.5 * len(whole), stored


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _kp_produce(bootstrap, topic, records, codec):
    """kafka-python's producer, compressing with `codec`; returns offset -> (key, value)."""
    p = kp_producer(bootstrap, compression_type=codec, linger_ms=20)
    try:
        futures = [p.send(topic, key=k, value=v, partition=0) for k, v in records]
        p.flush(120)
        written = {}
        for f, kv in zip(futures, records):
            written[f.get(timeout=60).offset] = kv
        return written
    finally:
        p.close(timeout=10)


def test_a_quiet_compacted_topic_rolls_by_segment_ms_and_is_cleaned(kaas_factory, topic_name):
    """segment.ms (issue 12): a compacted topic whose segment.bytes is never reached still
    gets cleaned. A burst of updates over a few keys, a pause longer than segment.ms, then
    one more record: that append rolls the active segment (its timestamp is more than
    segment.ms after the segment's first), the cleaner cleans the sealed one, and each
    key's latest value is what is left of the burst, at the offset it was written at."""
    kaas = kaas_factory(CLEANER)
    segment_ms = 1500
    ck_create_topic(kaas.bootstrap, topic_name, 1, {
        "cleanup.policy": "compact",
        "segment.ms": str(segment_ms),
        "min.cleanable.dirty.ratio": "0.01",
    })
    burst = [(b"q%d" % (i % 20), b"v%d" % i) for i in range(2000)]
    written = _produce(kaas.bootstrap, topic_name, burst)
    assert len(written) == len(burst)
    # Nothing rolls, so nothing is cleaned, while the producer is quiet (the default 1 GiB
    # segment.bytes is far away and the active segment is never cleaned).
    time.sleep(segment_ms / 1000 + 1.0)
    assert len(_read_all(kaas.bootstrap, topic_name)) == len(burst)
    # The next record rolls the segment by time; the cleaner takes the sealed one.
    written.update(_produce(kaas.bootstrap, topic_name, [(b"tick", b"t")]))
    expected = _latest(written)

    def cleaned():
        return {o for o, _, _ in _read_all(kaas.bootstrap, topic_name)} == expected

    wait_for(cleaned, 60, interval=1, what="the time-rolled segment to be cleaned")
    got = _read_all(kaas.bootstrap, topic_name)
    for o, k, v in got:
        assert written[o] == (k, v), (o, k, v, written[o])
    live = {k: v for _, k, v in got}
    for k in range(20):
        last = max(i for i in range(len(burst)) if i % 20 == k)
        assert live[b"q%d" % k] == b"v%d" % last
    assert ck_watermarks(kaas.bootstrap, topic_name, 0) == (0, len(burst) + 1)
