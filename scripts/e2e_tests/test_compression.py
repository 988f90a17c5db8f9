"""Batches compressed by the producer are stored untouched and read back intact,
for every codec and both clients. Where the segment layout of DESIGN.md is found, the
stored batches are checked to carry the producer's codec (so a client that silently
falls back to no compression is noticed)."""

import re
import struct

import pytest

from helpers import (
    check_roundtrip,
    ck_consume,
    ck_create_topic,
    ck_produce,
    ck_producer,
    kp_consume,
    kp_produce,
    kp_producer,
    make_messages,
)

CODECS = ["gzip", "snappy", "lz4", "zstd"]
N = 2000
PARTITIONS = 2
VALUE_SIZE = 1024


def _ends(delivery):
    ends = {p: 0 for p in range(PARTITIONS)}
    for p, off in delivery.ok.values():
        ends[p] = max(ends[p], off + 1)
    return ends


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored_batches(kaas, topic):
    """[(codec id, record count)] of every batch in the topic's segment files, read as v2
    record batches (<data>/topics/<topic>-<p>/<base offset>.log, DESIGN.md section 4), or
    None when that layout is not found."""
    pattern = re.compile(re.escape(topic) + r"-\d+")
    topics_dir = kaas.data_dir / "topics"
    seen = None
    for d in sorted(topics_dir.iterdir()) if topics_dir.is_dir() else ():
        if not pattern.fullmatch(d.name):
            continue
        for f in sorted(d.glob("*.log")):
            seen = seen or []
            data = f.read_bytes()
            pos = 0
            while pos + 61 <= len(data):
                (batch_len,) = struct.unpack_from(">i", data, pos + 8)
                magic = data[pos + 16]
                if batch_len <= 0 or magic != 2:
                    break  # preallocated or foreign tail: stop reading this file
                (attrs,) = struct.unpack_from(">h", data, pos + 21)
                (records,) = struct.unpack_from(">i", data, pos + 57)
                seen.append((attrs & 7, records))
                pos += 12 + batch_len
    return seen


def _check_stored_codec(kaas, topic, codec):
    """The broker stored the producer's batches as they came: compressed with `codec`.
    librdkafka sends a batch uncompressed where compressing it would not shrink it
    (rd_kafka_msgset_writer_compress); with this test's compressible values that is only a
    batch of one record without one (an empty or null value), which linger.ms now and then
    leaves alone, so such a batch may be stored uncompressed too."""
    batches = _stored_batches(kaas, topic)
    if batches is None:
        return  # layout unknown: the round trip above is the test
    want = CODEC_IDS[codec]
    others = [(c, n) for c, n in batches if c != want and not (c == 0 and n == 1)]
    assert any(c == want for c, _ in batches) and not others, (
        "segment files hold batches (codec id, records) %s besides %s=%d ones%s"
        % (others, codec, want,
           " -- librdkafka only enables LZ4 when the broker advertises FindCoordinator (API 10)"
           if codec == "lz4" else ""))


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_compression(kaas, topic_name, codec):
    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(N, PARTITIONS, seed=10, compressible=True, max_value=VALUE_SIZE)
    p = ck_producer(kaas.bootstrap, **{"compression.type": codec, "linger.ms": 20})
    delivery = ck_produce(p, topic_name, msgs)
    consumed = ck_consume(kaas.bootstrap, topic_name, _ends(delivery))
    check_roundtrip(msgs, delivery, consumed, PARTITIONS)

    # the broker stored the producer's batches as they came: compressed with that codec
    _check_stored_codec(kaas, topic_name, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_compression(kaas, topic_name, codec):
    from kafka import codec as kcodec

    available = {
        "gzip": kcodec.has_gzip(),
        "snappy": kcodec.has_snappy(),
        "lz4": kcodec.has_lz4(),
        "zstd": kcodec.has_zstd(),
    }
    # requirements.txt installs all codec libraries; a missing one is a setup bug
    assert available[codec], "kafka-python lacks the %s codec library" % codec

    ck_create_topic(kaas.bootstrap, topic_name, PARTITIONS)
    msgs = make_messages(N, PARTITIONS, seed=11, compressible=True, max_value=VALUE_SIZE, null_header_values=False)
    p = kp_producer(kaas.bootstrap, compression_type=codec, linger_ms=20)
    try:
        delivery = kp_produce(p, topic_name, msgs)
    finally:
        p.close(timeout=10)
    # read back with both clients: kafka-python decodes its own batches, librdkafka too
    check_roundtrip(msgs, delivery, kp_consume(kaas.bootstrap, topic_name, _ends(delivery)), PARTITIONS)
    check_roundtrip(msgs, delivery, ck_consume(kaas.bootstrap, topic_name, _ends(delivery)), PARTITIONS)
    _check_stored_codec(kaas, topic_name, codec)
