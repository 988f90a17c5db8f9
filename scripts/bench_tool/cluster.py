"""kaas cluster benchmark (issue 11): one broker against three on one data directory.

1. Aggregate produce throughput, acks=all and idempotent, 1 KiB records over
   --partitions partitions, with one broker and with three brokers sharing a
   directory (partitions spread over them), alternating, --runs times each; the
   median of each is printed with the ratio three/one.
2. Failover: three brokers, a producer writing to every partition at a steady
   rate; the leader of partition 0 is kill -9'd (or stopped with SIGTERM, which
   hands over at once) and the time until the first record sent after that is
   acknowledged on each of its partitions is measured, for the default lease
   and a short one.

It measures; it asserts nothing about speed. Client and brokers share the
machine's CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2e_tests"))
sys.path.insert(0, str(HERE))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench import produce_phase  # noqa: E402
from kaas_broker import KaasBroker  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000, help="records per throughput run (default 200000)")
    ap.add_argument("--partitions", type=int, default=6, help="topic partitions (default 6)")
    ap.add_argument("--runs", type=int, default=3, help="throughput runs per configuration (default 3)")
    ap.add_argument("--failovers", type=int, default=3, help="kills per lease setting (default 3)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the benchmark runs (CI)")
    return ap.parse_args(argv)


def start_cluster(n, extra=()):
    shared = Path(tempfile.mkdtemp(prefix="kaas-bench-cluster-"))
    brokers = []
    for i in range(n):
        b = KaasBroker(extra_args=["--broker-id", str(i)] + list(extra), name="kaas-%d" % i,
                       data_dir=shared / "data")
        brokers.append(b.start())
    return brokers


def wait_for_each_other(brokers, timeout=60.0):
    """Until every broker lists all of them (each reads the others' records at
    its next heartbeat): a topic created before would start on fewer brokers
    and move while the benchmark runs."""
    deadline = time.monotonic() + timeout
    for b in brokers:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        while len(admin.list_topics(timeout=5).brokers) < len(brokers):
            if time.monotonic() > deadline:
                raise SystemExit("the brokers did not see each other within %.0f s" % timeout)
            time.sleep(0.2)


def settled_leaders(bootstrap, topic, quiet=2.0, timeout=60.0):
    """partition -> leader once the leaders stayed the same for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = leaders(bootstrap, topic)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
        time.sleep(0.2)
    raise SystemExit("the leaders of %s did not settle within %.0f s" % (topic, timeout))


def stop_all(brokers):
    for b in brokers:
        b.close()


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=30)[topic].result(timeout=30)


def leaders(bootstrap, topic, timeout=30.0):
    """partition -> leader broker id, once every partition has one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and t.partitions and all(p.leader >= 0 for p in t.partitions.values()):
            return {p.id: p.leader for p in t.partitions.values()}
        time.sleep(0.1)
    raise SystemExit("partitions of %s have no leaders after %.0f s" % (topic, timeout))


def throughput(n_brokers, args, run):
    brokers = start_cluster(n_brokers)
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        wait_for_each_other(brokers)
        topic = "bench-cluster-%d-%d" % (n_brokers, run)
        create_topic(bootstrap, topic, args.partitions)
        spread = sorted(set(settled_leaders(bootstrap, topic).values()))
        pa = SimpleNamespace(messages=args.messages, partitions=args.partitions, acks="all", linger_ms=5,
                             batch_size=1_000_000, compression="none", rate=0, timeout=600, idempotence=True)
        payloads = [os.urandom(1024) for _ in range(64)]
        r = produce_phase(bootstrap, topic, pa, payloads)
        if r["err"] or r["undelivered"]:
            raise SystemExit("produce failures: %s" % r)
        return r["ok"] / r["secs"], r["lat_p50"], r["lat_p99"], spread
    finally:
        stop_all(brokers)


def failover(args, lease_args, how, round_no):
    """Seconds from stopping partition 0's leader until a record sent after it is
    acknowledged on every partition that leader had."""
    brokers = start_cluster(3, lease_args)
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        wait_for_each_other(brokers)
        topic = "bench-failover-%d" % round_no
        create_topic(bootstrap, topic, args.partitions)
        led = settled_leaders(bootstrap, topic)
        victim_id = led[0]
        moved = sorted(p for p, b in led.items() if b == victim_id)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 1, "message.timeout.ms": 120000, "retry.backoff.ms": 20,
                      "retry.backoff.max.ms": 200, "reconnect.backoff.ms": 20,
                      "reconnect.backoff.max.ms": 200, "topic.metadata.refresh.interval.ms": 1000})
        acked_after = {}
        state = {"t_stop": None}

        def cb_for(part, sent_at):
            def cb(err, m):
                if err is None and state["t_stop"] is not None and sent_at >= state["t_stop"]:
                    acked_after.setdefault(part, time.monotonic())
            return cb

        # warm up: every partition acknowledged once
        for part in range(args.partitions):
            p.produce(topic, b"warm", partition=part)
        p.flush(30)
        victim = brokers[victim_id]
        state["t_stop"] = time.monotonic()
        if how == "kill -9":
            victim.kill9()
        else:
            victim.stop()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(q in acked_after for q in moved):
            now = time.monotonic()
            for q in moved:
                if q not in acked_after:
                    p.produce(topic, b"x", partition=q, on_delivery=cb_for(q, now))
            p.poll(0.01)
        p.flush(30)
        if not all(q in acked_after for q in moved):
            raise SystemExit("partitions %s never acknowledged again after the %s" % (moved, how))
        return max(acked_after[q] for q in moved) - state["t_stop"], len(moved)
    finally:
        stop_all(brokers)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.smoke:
        args.messages, args.runs, args.failovers = 5_000, 1, 1
    print("kaas cluster benchmark: %d x 1 KiB records, acks=all, idempotent, %d partitions; %d CPUs shared by "
          "client and brokers" % (args.messages, args.partitions, os.cpu_count() or 0))
    results = {1: [], 3: []}
    for run in range(args.runs):
        for n in (1, 3):
            rate, p50, p99, spread = throughput(n, args, run)
            results[n].append(rate)
            print("  run %d, %d broker(s): %8.0f msgs/s (%.1f MiB/s), ack p50 %.1f ms p99 %.1f ms, leaders on %s"
                  % (run + 1, n, rate, rate / 1024, p50 * 1000, p99 * 1000, spread))
    one, three = statistics.median(results[1]), statistics.median(results[3])
    print()
    print("throughput (median of %d): one broker %.0f msgs/s, three brokers %.0f msgs/s, ratio %.2f"
          % (args.runs, one, three, three / one))
    print()
    # The smoke (CI) skips the default lease: its kill -9 waits out 14 s of bounds.
    settings = [] if args.smoke else [("default lease (10 s, skew 1 s, staleness 3 s)", [])]
    settings.append(("short lease (2 s, skew 0.2 s, staleness 0.3 s)",
                     ["--lease-ms", "2000", "--clock-skew-bound-ms", "200", "--volume-staleness-bound-ms", "300"]))
    rounds = 0
    for label, lease_args in settings:
        for how in ("kill -9", "SIGTERM"):
            times = []
            for _ in range(args.failovers):
                rounds += 1
                secs, n_moved = failover(args, lease_args, how, rounds)
                times.append(secs)
            print("failover, %s, %s of partition 0's leader (%d partitions moved): median %.2f s, max %.2f s"
                  % (label, how, n_moved, statistics.median(times), max(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
