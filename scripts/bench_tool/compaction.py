"""kaas log cleaner benchmark (issue 12).

1. Cleaner throughput: --dirty-mb of updates (--size-byte values over --keys keys) are
   written to a topic with cleanup.policy=delete, which the cleaner passes by; the
   topic is then altered to compact and the broker's next rounds clean it. The broker
   logs each round (bytes read and written, and how long it took, without its pause for
   the I/O budget, which is set unlimited here); the throughput is the dirty bytes over
   the rounds' time (segments of --segment-mb: the active one is never cleaned). For scale, the disk's sequential write bandwidth is measured on the
   same directory (write and fsync --disk-mb in 1 MiB writes).
2. Produce latency with and without the cleaner running: a producer at a steady --rate
   (acks=all, idempotent) on a second compacted topic, first while the cleaner is idle,
   then while it cleans another --dirty-mb topic just switched to compact. p50/p99 of the
   delivery latencies of each phase, and the ratio of the p99s. The cleaner keeps its
   default I/O budget (--log-cleaner-io-max-bytes-per-second) here.

It measures; it asserts nothing about speed. Client and broker share the machine's CPUs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e_tests"))
sys.path.insert(0, str(HERE))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewTopic, ResourceType)

from bench import percentile  # noqa: E402
from kaas_broker import KaasBroker  # noqa: E402

RETAINED = re.compile(r"retention deleted segments topic=dirty .*segments=(\d+)")
ROUND = re.compile(r"cleaned topic=(\S+) .*bytes_read=(\d+) bytes_written=(\d+) elapsed_ms=(\d+)")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirty-mb", type=int, default=200, help="MB of updates to clean (default 200)")
    ap.add_argument("--size", type=int, default=1000, help="value size in bytes (default 1000)")
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (default 10000)")
    ap.add_argument("--rate", type=int, default=1000, help="latency producer msgs/s (default 1000)")
    ap.add_argument("--seconds", type=float, default=20, help="length of each latency phase (default 20)")
    ap.add_argument("--disk-mb", type=int, default=512, help="MB for the disk bandwidth probe (default 512)")
    ap.add_argument("--settle", type=float, default=10,
                    help="seconds to wait after the fill before the first latency phase (default 10): "
                         "a phase right after the fill ran slower than a later one with no cleaning "
                         "at all, so the idle phase was not idle")
    ap.add_argument("--io-budget", type=int,
                    help="the broker's --log-cleaner-io-max-bytes-per-second in the latency phases "
                         "(default: the broker's default)")
    ap.add_argument("--segment-mb", type=int, default=16,
                    help="segment.bytes of the cleaned topics, MiB (default 16; the active segment is never cleaned)")
    ap.add_argument("--control", action="store_true",
                    help="leave the big topic uncompacted in the second latency phase: how much two "
                         "phases without cleaning differ")
    ap.add_argument("--timeline", metavar="PREFIX",
                    help="also write each latency phase's acks to PREFIX-idle.csv and PREFIX-busy.csv "
                         "(send time, Unix seconds; delivery latency, ms): to line slow acks up with "
                         "the broker's log or an strace of it")
    ap.add_argument("--retention", action="store_true",
                    help="in the second latency phase delete the big topic by retention (retention.ms "
                         "set to 1) instead of cleaning it: what removing its segments costs a producer "
                         "(use with --segment-mb 1024 for Kafka's default segment size)")
    ap.add_argument("--live-policy", choices=("compact", "delete"), default="compact",
                    help="cleanup.policy of the latency producer's own topic (default compact: the "
                         "cleaner also cleans it, in both phases; delete: the first phase has no "
                         "cleaning at all, and the second only the big topic's)")
    ap.add_argument("--latency-only", action="store_true",
                    help="skip the disk probe and the throughput part (1.): only the latency phases")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs (CI)")
    return ap.parse_args(argv)


def disk_write_mb_s(directory: Path, mb: int) -> float:
    path = directory / "disk-probe"
    block = os.urandom(1 << 20)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(mb):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)
    secs = time.perf_counter() - t0
    path.unlink()
    return mb / secs


def create(admin, topic, config):
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)])[topic].result(30)
    deadline = time.monotonic() + 30
    while topic not in admin.list_topics(timeout=5).topics:
        if time.monotonic() > deadline:
            raise SystemExit("topic %s never showed up" % topic)
        time.sleep(0.1)


def compact(admin, topic):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def expire(admin, topic):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def fill(bootstrap, topic, mb, size, keys):
    """Writes `mb` MB of updates as fast as the broker takes them."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 1_000_000, "compression.type": "none",
                  "queue.buffering.max.kbytes": 1_048_576})
    value = b"v" * size
    n = mb * 1_000_000 // (size + 20)
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % (i % keys), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(600):
        raise SystemExit("fill of %s did not finish" % topic)
    return n * (size + 20)


def rounds_of(log_path: Path, topic: str):
    """(bytes read, bytes written, elapsed ms) of each round the broker logged for topic."""
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        m = ROUND.search(line)
        if m and m.group(1) == topic:
            out.append((int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def wait_cleaned(broker, topic, timeout=300):
    """Until the broker has logged a round for topic and then none for 3 s."""
    deadline = time.monotonic() + timeout
    seen, quiet_since = 0, None
    while time.monotonic() < deadline:
        n = len(rounds_of(broker.log_path, topic))
        if n and n == seen:
            if quiet_since and time.monotonic() - quiet_since >= 3:
                return rounds_of(broker.log_path, topic)
        else:
            seen, quiet_since = n, time.monotonic()
        time.sleep(0.2)
    raise SystemExit("the cleaner did not finish %s in %.0f s" % (topic, timeout))


def latency_phase(bootstrap, topic, rate, seconds, keys, size, timeline=None):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0, "compression.type": "none"})
    lat = []
    errors = []
    sent = []

    def cb(err, m):
        if err is not None:
            errors.append(err)
        elif m.latency() is not None:
            lat.append(m.latency())
            if timeline is not None:
                # The ack arrives now; the send was latency() before it.
                sent.append((time.time() - m.latency(), m.latency()))

    value = b"x" * size
    # Warm up: connections, metadata and the producer id come before the clock starts.
    p.produce(topic, key=b"warm-up", value=value, partition=0)
    p.flush(30)
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        while (ahead := i / rate - (time.perf_counter() - t0)) > 0:
            p.poll(ahead)
        p.produce(topic, key=b"l%d" % (i % keys), value=value, partition=0, on_delivery=cb)
    p.flush(60)
    if errors:
        raise SystemExit("latency producer errors: %s" % errors[:3])
    if timeline is not None:
        with open(timeline, "w") as f:
            f.write("sent_unix_s,latency_ms\n")
            f.writelines("%.6f,%.3f\n" % (t, l * 1000) for t, l in sent)
    lat.sort()
    return percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000, len(lat)


def main(argv):
    args = parse_args(argv)
    if args.smoke:
        args.dirty_mb, args.keys, args.rate, args.seconds, args.disk_mb, args.segment_mb = 4, 500, 200, 2, 16, 1
        args.settle = 0
    work = Path(tempfile.mkdtemp(prefix="kaas-bench-compaction-"))
    print("work dir (broker logs): %s" % work)
    if not args.latency_only:
        throughput(args, work)
    latency(args, work)


def throughput(args, work):
    disk = disk_write_mb_s(work, args.disk_mb)
    print("disk sequential write (1 MiB writes + fsync, %d MB): %.0f MB/s" % (args.disk_mb, disk))

    # 1. Throughput, unlimited I/O budget.
    b = KaasBroker(extra_args=["--log-cleaner-backoff-ms", "200",
                               "--log-cleaner-io-max-bytes-per-second", "0"],
                   name="kaas-compaction", workdir=work / "throughput").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        create(admin, "dirty", {"cleanup.policy": "delete", "segment.bytes": str(args.segment_mb << 20)})
        written = fill(b.bootstrap, "dirty", args.dirty_mb, args.size, args.keys)
        compact(admin, "dirty")
        rounds = wait_cleaned(b, "dirty")
        read = sum(r[0] for r in rounds)
        wrote = sum(r[1] for r in rounds)
        ms = sum(r[2] for r in rounds)
        dirty_mb_s = written / 1e6 / (ms / 1000) if ms else float("inf")
        print("cleaner: %.0f MB of updates over %d keys cleaned in %d round(s), %.2f s of rounds: "
              "%.0f MB/s of dirty log (%.2fx the disk's write bandwidth); read %.0f MB, wrote %.1f MB"
              % (written / 1e6, args.keys, len(rounds), ms / 1000, dirty_mb_s, dirty_mb_s / disk,
                 read / 1e6, wrote / 1e6))
    finally:
        b.stop()


def latency(args, work):
    # 2. Produce latency, cleaner idle, then cleaning (default I/O budget).
    budget = ["--log-cleaner-io-max-bytes-per-second", str(args.io_budget)] if args.io_budget else []
    retention = ["--retention-check-interval-ms", "1000"] if args.retention else []
    b = KaasBroker(extra_args=["--log-cleaner-backoff-ms", "200"] + budget + retention,
                   name="kaas-compaction-latency",
                   workdir=work / "latency").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        create(admin, "live", {"cleanup.policy": args.live_policy, "segment.bytes": str(1 << 20)})
        create(admin, "dirty", {"cleanup.policy": "delete", "segment.bytes": str(args.segment_mb << 20)})
        fill(b.bootstrap, "dirty", args.dirty_mb, args.size, args.keys)
        timeline = (lambda phase: "%s-%s.csv" % (args.timeline, phase)) if args.timeline else (lambda phase: None)
        time.sleep(args.settle)
        idle = latency_phase(b.bootstrap, "live", args.rate, args.seconds, args.keys, args.size, timeline("idle"))
        if args.retention:
            expire(admin, "dirty")
        elif not args.control:
            compact(admin, "dirty")
        # The cleaner's next round (within its 200 ms backoff) starts on the big topic
        # while this phase runs.
        busy = latency_phase(b.bootstrap, "live", args.rate, args.seconds, args.keys, args.size, timeline("busy"))
        rounds = rounds_of(b.log_path, "dirty")
        cleaning_ms = sum(r[2] for r in rounds)
        print("acks=all idempotent produce at %d msgs/s, %.0f s each (%d keys, %d B values):"
              % (args.rate, args.seconds, args.keys, args.size))
        print("  cleaner idle:     p50 %.1f ms  p99 %.1f ms  (%d acks)" % idle)
        if args.retention:
            deleted = sum(int(m.group(1)) for m in RETAINED.finditer(b.log_path.read_text(errors="replace")))
            print("  retention:        p50 %.1f ms  p99 %.1f ms  (%d acks; %d segment(s) of the %d MB topic "
                  "deleted)" % (busy + (deleted, args.dirty_mb)))
        else:
            print("  cleaner cleaning: p50 %.1f ms  p99 %.1f ms  (%d acks; %d round(s) of the %d MB topic, "
                  "%.1f s of cleaning, in the phase)" % (busy + (len(rounds), args.dirty_mb, cleaning_ms / 1000)))
        print("  p99 ratio second phase/idle: %.2f" % (busy[1] / idle[1] if idle[1] else float("nan")))
    finally:
        b.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
