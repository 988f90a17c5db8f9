"""Kafka Streams (org.apache.kafka:kafka-streams 4.1.1) with
processing.guarantee=exactly_once_v2, on kaas through a kill -9 of the broker, and on
Apache Kafka without one.

The application is java/src/main/java/kaas/e2e/StreamsEos.java: it copies every record of
an input topic to a copy topic and counts the records per key (groupByKey().count(),
whose store Streams backs with a compacted changelog topic it creates itself), writing
each key's running count to a counts topic. The input (N_RECORDS records over N_KEYS
keys, unique values) is written first; the application then runs, paced to about
PACE records a second, until the group's committed offsets reach the input's end, and
exits 0 after a clean close. On kaas the broker is kill -9'd once KILL_AT of the input is
committed (a transaction is then open: the application commits every 100 ms) and
restarted on the same data dir and port a second later; the application lives on.

Read with read_committed consumers (confluent-kafka), the copy topic must hold every
input record exactly once, each key's records in input order, and the counts topic must
show each key's count rising strictly (no record counted twice, none skipped past) to
its true count. Run only these: scripts/e2e -k kafka_streams
"""

from __future__ import annotations

import collections
import json
import queue
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from confluent_kafka import KafkaError, TopicPartition

from helpers import ck_consumer, ck_create_topic, ck_producer

try:
    from test_java_client import java_client_classpath  # noqa: F401 - the fixture, shared
    from test_transactions import admin_for, latest_offsets
except ImportError:  # pragma: no cover
    java_client_classpath = None

pytestmark = pytest.mark.skipif(
    java_client_classpath is None or shutil.which("java") is None or shutil.which("mvn") is None,
    reason="java or mvn is not installed",
)

N_RECORDS = 20_000
N_KEYS = 50
PARTITIONS = 3
PACE = 4_000  # records a second, at most: the input takes 5 s or more, time for a kill in the middle
KILL_AT = 0.4  # of the input committed
APP_DEADLINE_S = 150  # the application gives up (exit 2) after this long


def produce_input(bootstrap: str, topic: str) -> List[Tuple[str, str]]:
    """N_RECORDS (key, value) pairs, keys from a seeded draw over N_KEYS, values unique,
    written with an idempotent producer; returns them in production order."""
    rng = random.Random(11)
    records = [("k%02d" % rng.randrange(N_KEYS), "v%05d" % i) for i in range(N_RECORDS)]
    failed = []

    def cb(err, _m):
        if err is not None:
            failed.append(str(err))

    p = ck_producer(bootstrap, **{"enable.idempotence": True, "linger.ms": 20})
    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k.encode(), value=v.encode(), on_delivery=cb)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "input not flushed in 60 s"
    assert not failed, failed[:3]
    return records


class StreamsApp:
    """StreamsEos as a subprocess; its stdout lines are queued by a reader thread and its
    stderr (the Streams and client logs, warnings and errors) goes to a file."""

    def __init__(self, classpath: str, args: List[str], stderr_path: Path):
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xss1m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "kaas.e2e.StreamsEos", *args],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("<eof>")

    def stderr_tail(self, n=40) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        self._stderr.close()


def read_committed(bootstrap: str, topic: str, timeout: float = 60) -> Dict[int, List[Tuple[str, str]]]:
    """Every partition from 0 to its end for read_committed (the LSO, which ListOffsets
    gives): {partition: [(key, value)]}, in offset order."""
    ends = latest_offsets(bootstrap, topic, committed=True, partitions=PARTITIONS)
    assert ends == latest_offsets(bootstrap, topic, committed=False, partitions=PARTITIONS), (
        "%s: a transaction is still open" % topic)
    c = ck_consumer(bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    out: Dict[int, List[Tuple[str, str]]] = {p: [] for p in range(PARTITIONS)}
    eof: Dict[int, int] = {}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while any(eof.get(p) != ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, "reading %s timed out: EOF %s, ends %s" % (topic, eof, ends)
            for m in c.consume(num_messages=5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and m.topic() == topic:
                        eof[m.partition()] = m.offset()
                    elif m.topic() is not None:
                        raise AssertionError("reading %s: %s" % (topic, err))
                    continue
                out[m.partition()].append((m.key().decode(), m.value().decode()))
    finally:
        c.close()
    return out


def run_streams(broker, topic: str, tmp_path: Path, classpath: str, kill_at: Optional[float]) -> dict:
    """Produce the input, run the application (kill -9 and restart `broker` once
    `kill_at` of the input is committed, when given) and check its output."""
    bs = broker.bootstrap
    input_topic, copy_topic, counts_topic = topic + "-in", topic + "-copy", topic + "-counts"
    app_id = topic + "-app"
    admin = admin_for(bs)
    for t in (input_topic, copy_topic, counts_topic):
        ck_create_topic(admin, t, PARTITIONS)
    records = produce_input(bs, input_topic)

    t0 = time.monotonic()
    history: List[str] = []
    app = StreamsApp(classpath, [bs, input_topic, copy_topic, counts_topic, app_id, str(tmp_path / "state"),
                                 str(PACE), str(APP_DEADLINE_S)], tmp_path / "streams.stderr")
    summary = None
    killed_at = None
    progress_after_restart = 0
    try:
        while True:
            assert time.monotonic() - t0 < APP_DEADLINE_S + 30, "the application is still running; history %s" % history
            try:
                line = app.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line == "<eof>":
                break
            if line.startswith("{"):
                summary = json.loads(line)
                continue
            word, *rest = line.split()
            if word != "progress":
                history.append("%.1fs ? %s" % (time.monotonic() - t0, line[:200]))
                continue
            committed = int(rest[0])
            if killed_at is not None:
                progress_after_restart = max(progress_after_restart, committed)
            if kill_at is not None and killed_at is None and committed >= kill_at * N_RECORDS:
                assert committed < N_RECORDS, "all committed before the kill: %s" % history
                broker.kill9()
                killed_at = committed
                history.append("%.1fs broker killed at %d committed" % (time.monotonic() - t0, committed))
                time.sleep(1.0)
                broker.restart()
                history.append("%.1fs broker restarted" % (time.monotonic() - t0))
        rc = app.proc.wait(timeout=30)
    finally:
        app.close()
    elapsed = time.monotonic() - t0
    info = "app exit %s after %.1fs, history %s, summary %s; app stderr:\n%s" % (
        rc, elapsed, history, summary, app.stderr_tail())
    assert rc == 0 and summary is not None, info
    assert summary["done"] is True and summary["closed"] is True, info
    assert sum(summary["input_end_offsets"].values()) == N_RECORDS, info
    assert summary["committed_after_close"] == summary["input_end_offsets"], info
    # the count store's changelog: one partition per input partition, compacted
    assert summary["changelog"] == {"partitions": PARTITIONS, "cleanup.policy": "compact"}, info
    if kill_at is not None:
        assert killed_at is not None, info
        assert progress_after_restart == N_RECORDS, "no progress seen after the restart: " + info
    print("Streams done in %.1fs (processing %.1fs); states %s; thread failures %s; history %s" % (
        elapsed, summary["processed_ms"] / 1000, summary["states"], summary["thread_failures"], history))

    want_by_key: Dict[str, List[str]] = collections.defaultdict(list)
    for k, v in records:
        want_by_key[k].append(v)

    # the copy: every input record exactly once, each key's records in input order
    copy = read_committed(bs, copy_topic)
    copied = [kv for p in range(PARTITIONS) for kv in copy[p]]
    values = collections.Counter(v for _, v in copied)
    dups = sorted(v for v, n in values.items() if n > 1)
    missing = sorted(set(v for _, v in records) - set(values))
    assert not dups and not missing and len(copied) == N_RECORDS, (
        "copy: %d records, want %d; %d duplicated (e.g. %s), %d missing (e.g. %s); %s" % (
            len(copied), N_RECORDS, len(dups), dups[:5], len(missing), missing[:5], info))
    got_by_key: Dict[str, List[str]] = collections.defaultdict(list)
    for p in range(PARTITIONS):
        for k, v in copy[p]:
            got_by_key[k].append(v)
    for k, want in want_by_key.items():
        assert got_by_key[k] == want, "copy: key %s out of order or misplaced" % k
    assert set(got_by_key) == set(want_by_key)

    # the counts: per key strictly rising to the true count
    counts = read_committed(bs, counts_topic)
    seen: Dict[str, List[int]] = collections.defaultdict(list)
    for p in range(PARTITIONS):
        for k, v in counts[p]:
            seen[k].append(int(v))
    assert set(seen) == set(want_by_key), (sorted(seen), sorted(want_by_key))
    for k, want in want_by_key.items():
        s = seen[k]
        assert all(a < b for a, b in zip(s, s[1:])), "counts of %s do not rise strictly: %s" % (k, s)
        assert s[-1] == len(want), "count of %s: %d, want %d (%s)" % (k, s[-1], len(want), s)

    # what the killed transaction left: records only read_uncommitted sees
    everything = sum(latest_offsets(bs, copy_topic, committed=False, partitions=PARTITIONS).values())
    print("copy topic: %d committed records, end offsets sum %d (aborted records and markers: %d); "
          "%d count updates" % (N_RECORDS, everything, everything - N_RECORDS, sum(map(len, seen.values()))))
    return dict(summary=summary, killed_at=killed_at, history=history)


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(240)
def test_kafka_streams_eos(kaas_or_kafka, topic_name, tmp_path, java_client_classpath):
    """[kaas]: through a kill -9 of the broker; [kafka]: the same application and checks
    without a kill (the Kafka node is shared by the session)."""
    kill = kaas_or_kafka.name == "kaas"
    r = run_streams(kaas_or_kafka, topic_name, tmp_path, java_client_classpath, kill_at=KILL_AT if kill else None)
    if kill:
        assert r["killed_at"] < N_RECORDS
