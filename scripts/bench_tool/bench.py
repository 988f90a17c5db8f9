"""kaas throughput benchmark with a real client (confluent-kafka / librdkafka).

Starts the release broker on a temp dir and an ephemeral 127.0.0.1 port (or uses
--bootstrap), produces N messages of --size bytes with acks=all, then reads them all
back, and prints a table. It measures; it asserts nothing about speed. It exits
non-zero only when messages were lost or failed (the numbers would be meaningless).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e_tests"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka import libversion, version  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kaas_broker import KaasBroker  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scripts/bench --compare [--records-100b N] [--records-64k N] [--smoke] runs instead kaas\n"
               "against Apache Kafka with Kafka's own ProducerPerformance and ConsumerPerformance\n"
               "(scripts/bench_tool/compare.py; all its options: scripts/bench --compare --help).")
    ap.add_argument("messages", nargs="?", type=int, default=200_000, help="message count (default 200000)")
    ap.add_argument("--size", type=int, default=1024, help="value size in bytes (default 1024)")
    ap.add_argument("--partitions", type=int, default=3, help="topic partitions (default 3)")
    ap.add_argument("--acks", default="all", choices=["all", "1", "0"], help="producer acks (default all)")
    ap.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms (default 5)")
    ap.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size bytes (default 1000000)")
    ap.add_argument("--compression", default="none", help="producer compression.type (default none)")
    ap.add_argument("--idempotence", action="store_true", help="producer enable.idempotence=true (default false)")
    ap.add_argument("--segment-bytes", type=int, help="topic segment.bytes (small: frequent segment rolls)")
    ap.add_argument("--rate", type=int,
                    help="pace the producer at this many msgs/s (ack latency without client queueing)")
    ap.add_argument("--tail", action="store_true",
                    help="also consume while producing (fetch throughput under produce load)")
    ap.add_argument("--bootstrap", help="benchmark a broker that is already running instead of starting one")
    ap.add_argument("--timeout", type=float, default=600, help="give up on a phase after this many seconds")
    return ap.parse_args(argv)


def fmt_rate(n, secs):
    return n / secs if secs > 0 else float("inf")


def percentile(sorted_vals, q):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def produce_phase(bootstrap, topic, args, payloads):
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": args.acks,
        "enable.idempotence": bool(getattr(args, "idempotence", False)),
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": 100_000,
        "compression.type": args.compression,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "message.timeout.ms": int(args.timeout * 1000),
    }
    p = Producer(conf)
    state = {"ok": 0, "err": 0, "first_err": None}
    latencies = []

    def cb(err, m):
        if err is None:
            state["ok"] += 1
            lat = m.latency()
            if lat is not None:
                latencies.append(lat)
        else:
            state["err"] += 1
            state["first_err"] = state["first_err"] or str(err)

    n = args.messages
    parts = args.partitions
    deadline = time.monotonic() + args.timeout
    t0 = time.perf_counter()
    for i in range(n):
        if args.rate and i % 100 == 0:
            # poll() returns early when it serves a callback: wait out the
            # whole head start.
            while (ahead := i / args.rate - (time.perf_counter() - t0)) > 0:
                p.poll(ahead)
        while True:
            try:
                p.produce(topic, payloads[i % len(payloads)], partition=i % parts, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
                if time.monotonic() > deadline:
                    raise SystemExit("produce phase timed out (queue full)")
        if i % 1000 == 0:
            p.poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    t1 = time.perf_counter()
    latencies.sort()
    return {
        "secs": t1 - t0,
        "ok": state["ok"],
        "err": state["err"],
        "first_err": state["first_err"],
        "undelivered": remaining,
        "lat_p50": percentile(latencies, 0.50),
        "lat_p99": percentile(latencies, 0.99),
        "conf": {k: v for k, v in conf.items() if k != "bootstrap.servers"},
    }


def tail_consumer(bootstrap, topic, args, stop, result):
    """Consumes from offset 0 while the producer runs; stops when told."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "kaas-bench-tail",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "max.partition.fetch.bytes": 4_194_304,
    })
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    got = 0
    t0 = time.perf_counter()
    try:
        while not stop.is_set():
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is None:
                    got += 1
    finally:
        result["got"] = got
        result["secs"] = time.perf_counter() - t0
        c.close()


def fetch_phase(bootstrap, topic, args, expected):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "kaas-bench-unused",  # required by the client; assign() never joins
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 4_194_304,
        "queued.max.messages.kbytes": 262_144,
    }
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    got = 0
    nbytes = 0
    deadline = time.monotonic() + args.timeout
    t0 = time.perf_counter()
    try:
        while got < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is not None:
                    if m.topic() is None:
                        continue  # background coordinator lookup etc.
                    raise SystemExit("fetch error: %s" % m.error())
                got += 1
                nbytes += len(m.value() or b"")
        t1 = time.perf_counter()
    finally:
        c.close()
    return {"secs": t1 - t0, "got": got, "bytes": nbytes,
            "conf": {k: v for k, v in conf.items() if k != "bootstrap.servers"}}


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        broker = KaasBroker(name="kaas-bench").start()
        bootstrap = broker.bootstrap
    try:
        topic = "bench-%d" % int(time.time())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        config = {} if args.segment_bytes is None else {"segment.bytes": str(args.segment_bytes)}
        admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=1, config=config)],
                            operation_timeout=30)[topic].result(timeout=30)
        del admin  # no idle client handle left to log reconnect noise at shutdown
        # distinct, incompressible payloads (a few, reused: the client's own cost stays low)
        payloads = [os.urandom(args.size) for _ in range(64)]

        print("kaas benchmark: %d messages x %d B, %d partitions, acks=%s, segment.bytes=%s, broker %s%s"
              % (args.messages, args.size, args.partitions, args.acks,
                 args.segment_bytes or "default", bootstrap,
                 "" if broker is None else " (started: %s)" % broker.binary))
        print("client: confluent-kafka %s, librdkafka %s; python %s; %d CPUs (client and broker share them)"
              % (version()[0] if isinstance(version(), tuple) else version(), libversion()[0], platform.python_version(), os.cpu_count() or 0))

        tail = {}
        if args.tail:
            import threading
            stop = threading.Event()
            tail_thread = threading.Thread(target=tail_consumer, args=(bootstrap, topic, args, stop, tail))
            tail_thread.start()
        prod = produce_phase(bootstrap, topic, args, payloads)
        if args.tail:
            stop.set()
            tail_thread.join()
        print("producer config: %s" % ", ".join("%s=%s" % kv for kv in prod["conf"].items()))
        if prod["err"] or prod["undelivered"]:
            print("PRODUCE FAILURES: %d failed (first: %s), %d undelivered"
                  % (prod["err"], prod["first_err"], prod["undelivered"]))
        fetch = fetch_phase(bootstrap, topic, args, prod["ok"])
        print("consumer config: %s" % ", ".join("%s=%s" % kv for kv in fetch["conf"].items()))

        mib = 1024 * 1024
        pbytes = prod["ok"] * args.size
        rows = [
            ("phase", "messages", "seconds", "msgs/s", "MiB/s", "notes"),
            ("produce", "%d" % prod["ok"], "%.2f" % prod["secs"],
             "%.0f" % fmt_rate(prod["ok"], prod["secs"]), "%.1f" % fmt_rate(pbytes / mib, prod["secs"]),
             "ack latency p50 %.1f ms, p99 %.1f ms" % (prod["lat_p50"] * 1000, prod["lat_p99"] * 1000)),
            ("fetch", "%d" % fetch["got"], "%.2f" % fetch["secs"],
             "%.0f" % fmt_rate(fetch["got"], fetch["secs"]), "%.1f" % fmt_rate(fetch["bytes"] / mib, fetch["secs"]),
             "from offset 0, all partitions"),
        ]
        if args.tail:
            rows.insert(2, ("tail", "%d" % tail["got"], "%.2f" % tail["secs"],
                            "%.0f" % fmt_rate(tail["got"], tail["secs"]),
                            "%.1f" % fmt_rate(tail["got"] * args.size / mib, tail["secs"]),
                            "consumed while producing"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print()
        for j, r in enumerate(rows):
            print("  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
            if j == 0:
                print("  ".join("-" * w for w in widths))
        print()
        if fetch["got"] != prod["ok"]:
            print("FETCH INCOMPLETE: read %d of %d acknowledged messages" % (fetch["got"], prod["ok"]))
            return 1
        if prod["err"] or prod["undelivered"]:
            return 1
        return 0
    finally:
        if broker is not None:
            broker.close()


if __name__ == "__main__":
    sys.exit(main())
