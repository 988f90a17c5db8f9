"""Transactional throughput of kaas (and Apache Kafka) with confluent-kafka or franz-go.

`scripts/bench --txn` runs this. For each target broker it creates a topic of
8 partitions, starts 32 transactional producers (one thread each, each its own
librdkafka client with its own transactional.id, acks=all, idempotent) and
lets every one of them run, for --duration seconds after --warmup seconds:

    begin_transaction()
    produce() 10 records, spread over the 8 partitions
    flush()                 # the records are acknowledged (acks=all)
    commit_transaction()    # nothing left to send: this is the EndTxn round trip

flush() before commit_transaction() changes nothing on the wire (librdkafka's
commit flushes first anyway); it splits the commit into the produce part and
the EndTxn part, so the EndTxn latency is measured on its own. Only
transactions begun and committed inside the measured window count.

After the run a read_committed consumer reads the topic from the start to the
last stable offset and checks that exactly 32 x (committed transactions,
warm-up included) x 10 records are visible, each exactly once: a benchmark that
loses or duplicates data is not a benchmark. Any aborted or failed transaction,
or a count that does not match, makes the exit status 1.

--client go runs the producers in scripts/bench_tool/txngo instead, a Go
program on franz-go (built with `go build` into target/bench-txngo on first
use; modules from the Go module proxy, checked against its go.sum): the same
workload, one kgo.Client per producer with its own transactional ID,
acks=all, idempotent, linger 0, no compression (librdkafka's defaults here),
the same record-to-partition rule (manual partitioner), and per transaction

    BeginTransaction(); Produce() 10 records; Flush(); EndTransaction(TryCommit)

timed as above (EndTxn = EndTransaction alone). It counts the requests it
writes by API key (a HookBrokerWrite hook) for the requests-per-transaction
columns, and measures its own CPU over the window. The topic is created and
checked with confluent-kafka as for --client python. franz-go speaks
transaction version 2 (KIP-890 part 2) to a broker that offers it, as kaas
and Kafka 4.1 do: no AddPartitionsToTxn (the Produce request adds the
partitions) and a new producer epoch from every EndTxn; librdkafka stays on
version 1. --go-tv1 holds franz-go to version 1 for a like-for-like protocol.

Targets (--targets, default kaas,kafka):
  kaas         the release kaas broker (KAAS_BIN) on a fresh temp dir: acks=all
               and EndTxn are answered once the records / markers are fsync'd
  kafka        one Apache Kafka node (scripts/kafka-ref start), defaults: no
               fsync per write, neither for the records, the markers nor the
               __transaction_state log
  kafka-flush  the same node, topic created with flush.messages=1: records and
               markers fsync'd at each append (__transaction_state is not)

It prints the machine, the load average before and after, the fdatasync/fsync
latency of the temp dir the brokers write to, per target and run: committed
txn/s, records/s, produce (flush) and EndTxn (commit_transaction) latency
p50/p99/max, aborted/failed counts, CPU seconds of the client and of the
broker (the client is this process, or txngo with --client go), and a
markdown table for docs/performance.md. It measures; it asserts nothing about
speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e_tests"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka import TopicPartition, libversion, version  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from compare import KafkaNode, Failed, fmt_probe, fsync_probe, kafka_version, loadavg, pct  # noqa: E402
from kaas_broker import KaasBroker  # noqa: E402

TARGETS = {
    "kaas": ("kaas", {}, "kaas (records and markers fsync'd before acks=all / EndTxn answers)"),
    "kafka": ("kafka", {}, "Kafka 4.1.1, defaults (no fsync per write)"),
    "kafka-flush": ("kafka", {"flush.messages": "1"},
                    "Kafka 4.1.1, topic flush.messages=1 (records and markers fsync'd per append; "
                    "__transaction_state not)"),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="scripts/bench --txn", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=32, help="concurrent transactional producers (default 32)")
    ap.add_argument("--records", type=int, default=10, help="records per transaction (default 10)")
    ap.add_argument("--partitions", type=int, default=8, help="partitions of the topic (default 8)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes (default 100)")
    ap.add_argument("--duration", type=float, help="measured seconds per run (default 20; 3 with --smoke)")
    ap.add_argument("--warmup", type=float, help="seconds of transactions before measuring (default 3; 1 with --smoke)")
    ap.add_argument("--kafka-warmup", type=float, metavar="S",
                    help="before the first measured run on the Kafka node, one untimed run of this many "
                         "seconds (JIT, __transaction_state loaded; default 20; 0 with --smoke)")
    ap.add_argument("--runs", type=int, default=1, help="runs per target, each on a new topic (default 1)")
    ap.add_argument("--targets", default="kaas,kafka",
                    help="comma-separated, of: %s (default kaas,kafka)" % ", ".join(TARGETS))
    ap.add_argument("--smoke", action="store_true",
                    help="4 producers, 1 s warm-up, 3 s measured, kaas only unless --targets says "
                         "otherwise: checks that it works; the numbers mean nothing")
    ap.add_argument("--retry-backoff-ms", type=int, metavar="MS",
                    help="the producers' retry.backoff.ms and retry.backoff.max.ms (default: librdkafka's, "
                         "100 and 1000, exponential). The Java client retries a refused first "
                         "AddPartitionsToTxn after 20 ms; 20 here comes close to that. With --client go: "
                         "a constant retry backoff (default franz-go's, 250 ms doubling to 5 s)")
    ap.add_argument("--client", choices=("python", "go"), default="python",
                    help="the producers: python = confluent-kafka (librdkafka), one Producer per thread "
                         "(default, the figures in docs/performance.md); go = franz-go, one kgo.Client per "
                         "goroutine in a separate program (scripts/bench_tool/txngo, built with `go build` "
                         "on first use), much less client CPU per transaction")
    ap.add_argument("--go-tv1", action="store_true",
                    help="with --client go: keep franz-go on transaction version 1 (AddPartitionsToTxn, "
                         "as librdkafka) even when the broker offers version 2 (KIP-890 part 2)")
    ap.add_argument("--client-debug", metavar="CONTEXTS",
                    help="librdkafka debug contexts for the producers (e.g. eos,msg,protocol), logged to "
                         "stderr: which requests were retried, and why; with --client go any value turns "
                         "on franz-go's debug log")
    ap.add_argument("--bootstrap", help="use this already running broker as target 'kaas' instead of starting one")
    args = ap.parse_args(argv)
    if args.smoke:
        if args.producers == 32:
            args.producers = 4
        if "--targets" not in " ".join(argv):
            args.targets = "kaas"
    args.duration = args.duration if args.duration is not None else (3.0 if args.smoke else 20.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.smoke else 3.0)
    if args.kafka_warmup is None:
        args.kafka_warmup = 0.0 if args.smoke else 20.0
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in args.targets:
        if t not in TARGETS:
            ap.error("unknown target %r (known: %s)" % (t, ", ".join(TARGETS)))
    if args.producers < 1 or args.records < 1 or args.partitions < 1 or args.runs < 1:
        ap.error("--producers, --records, --partitions and --runs must be at least 1")
    if args.go_tv1 and args.client != "go":
        ap.error("--go-tv1 goes with --client go")
    if args.retry_backoff_ms is not None and args.retry_backoff_ms < 0:
        ap.error("--retry-backoff-ms must be 0 or more")
    return args


# ---------------------------------------------------------------- cpu

def proc_cpu(pid):
    """user+system CPU seconds of a process and its threads, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def kafka_pid(node):
    try:
        with open(node.state) as f:
            for line in f:
                if line.startswith("pid="):
                    return int(line.split("=", 1)[1].strip().strip('"'))
    except (OSError, ValueError):
        pass
    return None


# ---------------------------------------------------------------- one run

class Worker(threading.Thread):
    """One transactional producer: transactions back to back until told to stop."""

    def __init__(self, idx, bootstrap, topic, tid, args, payload, phase):
        super().__init__(daemon=True)
        self.idx = idx
        self.topic = topic
        self.args = args
        self.payload = payload
        self.phase = phase  # shared dict: "state" in warmup/measure/stop, "t_start", "t_end"
        self.conf = {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "transaction.timeout.ms": 60000,
            "message.timeout.ms": 60000,
        }
        if args.client_debug:
            self.conf["debug"] = args.client_debug
        if args.retry_backoff_ms is not None:
            self.conf["retry.backoff.ms"] = args.retry_backoff_ms
            self.conf["retry.backoff.max.ms"] = max(args.retry_backoff_ms, 1)
        # librdkafka's statistics, for the requests each producer sent by API:
        # Produce requests per transaction above the partitions it touched are
        # batches sent again after a retriable error (NOT_ENOUGH_REPLICAS, ...),
        # each after retry.backoff.ms; the latencies alone do not show that.
        self.conf["statistics.interval.ms"] = 1000
        self.conf["stats_cb"] = self.on_stats
        self.requests = {}
        self.producer = None
        self.committed_total = 0   # warm-up included: what the consumer must see
        self.committed = 0         # begun and committed inside the measured window
        self.aborted = 0
        self.failed = 0
        self.errors = []
        self.flush_lat = []
        self.commit_lat = []
        self.txn_lat = []
        self.ready = threading.Event()

    def on_stats(self, text):
        try:
            stats = json.loads(text)
            reqs = {}
            for b in stats.get("brokers", {}).values():
                for api, n in (b.get("req") or {}).items():
                    reqs[api] = reqs.get(api, 0) + n
            self.requests = reqs
        except ValueError:
            pass

    def run(self):
        try:
            self.producer = Producer(self.conf)
            self.producer.init_transactions(60)
        except Exception as e:  # noqa: BLE001
            self.failed += 1
            self.errors.append("init_transactions: %s" % e)
            self.ready.set()
            return
        self.ready.set()
        self.phase["go"].wait()
        p = self.producer
        parts = self.args.partitions
        n = self.args.records
        seq = 0
        while self.phase["state"] != "stop":
            in_window = self.phase["state"] == "measure"
            first = (self.idx + seq) % parts
            try:
                t0 = time.perf_counter()
                p.begin_transaction()
                for j in range(n):
                    p.produce(self.topic, self.payload, key=b"%d-%d-%d" % (self.idx, seq, j),
                              partition=(first + j) % parts)
                left = p.flush(60)
                if left:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "%d records unflushed" % left))
                t1 = time.perf_counter()
                p.commit_transaction(60)
                t2 = time.perf_counter()
            except KafkaException as e:
                self.errors.append(str(e))
                try:
                    p.abort_transaction(60)
                    self.aborted += 1
                except KafkaException as e2:
                    self.failed += 1
                    self.errors.append("abort: %s" % e2)
                    return
                seq += 1
                continue
            seq += 1
            self.committed_total += 1
            if in_window and self.phase["state"] == "measure":
                self.committed += 1
                self.flush_lat.append(t1 - t0)
                self.commit_lat.append(t2 - t1)
                self.txn_lat.append(t2 - t0)

    def close(self):
        if self.producer is not None:
            self.producer.flush(5)
            self.producer.poll(0)
            self.producer = None


def verify(bootstrap, topic, args, expected_records, timeout=120):
    """read_committed from offset 0 to the end of every partition: count and uniqueness."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "kaas-bench-txn-verify",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    })
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    seen = set()
    dup = 0
    eof = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < args.partitions and time.monotonic() < deadline:
            for m in c.consume(num_messages=10_000, timeout=1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    if m.topic() is None:
                        continue
                    raise Failed("verify: fetch error %s" % err)
                eof.discard(m.partition())
                k = m.key()
                if k in seen:
                    dup += 1
                seen.add(k)
    finally:
        c.close()
    return {"got": len(seen) + dup, "unique": len(seen), "dup": dup, "complete": len(eof) == args.partitions,
            "ok": len(eof) == args.partitions and dup == 0 and len(seen) == expected_records}


def run_python(bootstrap, topic, tid_prefix, broker_pid, args):
    """The run with confluent-kafka: one Producer per thread in this process."""
    payload = os.urandom(args.size)
    phase = {"state": "warmup", "go": threading.Event()}
    workers = [Worker(i, bootstrap, topic, "%s-%d" % (tid_prefix, i), args, payload, phase)
               for i in range(args.producers)]
    t_init = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.ready.wait(120)
    init_secs = time.perf_counter() - t_init
    phase["go"].set()
    # The warm-up starts once every producer has committed a transaction: Kafka's
    # coordinator loads __transaction_state on first use, which can take seconds.
    first_deadline = time.monotonic() + 120
    while (any(w.committed_total == 0 and w.is_alive() for w in workers)
           and time.monotonic() < first_deadline):
        time.sleep(0.05)
    time.sleep(args.warmup)
    cpu_c1, cpu_b1 = self_cpu(), proc_cpu(broker_pid) if broker_pid else None
    t0 = time.perf_counter()
    phase["state"] = "measure"
    time.sleep(args.duration)
    phase["state"] = "stop"
    t1 = time.perf_counter()
    cpu_c2, cpu_b2 = self_cpu(), proc_cpu(broker_pid) if broker_pid else None
    for w in workers:
        w.join(120)
    time.sleep(1.1)  # every producer has queued fresh statistics by now
    for w in workers:
        w.close()  # serves them
    requests = {}
    for w in workers:
        for api, n in w.requests.items():
            requests[api] = requests.get(api, 0) + n
    secs = t1 - t0
    return {
        "secs": secs, "init_secs": init_secs,
        "committed": sum(w.committed for w in workers),
        "committed_total": sum(w.committed_total for w in workers),
        "aborted": sum(w.aborted for w in workers),
        "failed": sum(w.failed for w in workers) + sum(1 for w in workers if w.is_alive()),
        "errors": [e for w in workers for e in w.errors],
        "commit": sorted(x * 1000 for w in workers for x in w.commit_lat),
        "flush": sorted(x * 1000 for w in workers for x in w.flush_lat),
        "txn": sorted(x * 1000 for w in workers for x in w.txn_lat),
        "requests": requests,
        "cpu_client": (cpu_c2 - cpu_c1) / secs,
        "cpu_broker": (cpu_b2 - cpu_b1) / secs if cpu_b2 is not None and cpu_b1 is not None else None,
    }


# ---------------------------------------------------------------- franz-go

GO_DIR = HERE / "txngo"
GO_EXE = HERE.parent.parent / "target" / "bench-txngo" / "txngo"
GO_PHASE_TIMEOUT = 120  # txngo's own bound on init, first commit and the end of the loops


def go_tool():
    go = shutil.which("go")
    if go is None and os.access("/usr/local/go/bin/go", os.X_OK):
        go = "/usr/local/go/bin/go"
    return go


def franz_go_version():
    m = re.search(r"github\.com/twmb/franz-go (v\S+)", (GO_DIR / "go.mod").read_text())
    return m.group(1) if m else "?"


_go_built = []


def go_binary():
    """Builds scripts/bench_tool/txngo into target/bench-txngo once per process.

    `go build` every time rather than trusting an existing binary: with Go's
    build cache an unchanged program rebuilds in about a second, and a stale
    binary can never be measured by mistake. The first build on a machine
    fetches franz-go from the Go module proxy, checked against go.sum."""
    if _go_built:
        return _go_built[0]
    go = go_tool()
    if go is None:
        raise Failed("--client go needs the Go toolchain (go on PATH or /usr/local/go/bin/go)")
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"  # never download a toolchain
    env.pop("GOFLAGS", None)  # build from the committed go.sum
    GO_EXE.parent.mkdir(parents=True, exist_ok=True)
    try:
        out = subprocess.run([go, "build", "-o", str(GO_EXE), "."], cwd=GO_DIR, env=env,
                             capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise Failed("go build of %s took over 600 s" % GO_DIR) from None
    if out.returncode != 0:
        raise Failed("go build of %s failed:\n%s%s" % (GO_DIR, out.stdout[-3000:], out.stderr[-3000:]))
    ver = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, env=env, timeout=60)
    _go_built.append((GO_EXE, ver.stdout.strip() or "go ?"))
    return _go_built[0]


def run_go(bootstrap, topic, tid_prefix, broker_pid, args):
    """The run with franz-go: txngo runs the producers and prints the raw figures.

    txngo prints a JSON line when the measured window starts ("measure") and
    when it ends ("stop"); the broker's CPU is sampled as each is read, the
    client's CPU is txngo's own getrusage over the same window."""
    exe, _ = go_binary()
    cmd = [str(exe), "-bootstrap", bootstrap, "-topic", topic, "-txn-prefix", tid_prefix,
           "-producers", str(args.producers), "-records", str(args.records),
           "-partitions", str(args.partitions), "-size", str(args.size),
           "-warmup", repr(args.warmup), "-duration", repr(args.duration)]
    if args.retry_backoff_ms is not None:
        cmd += ["-retry-backoff-ms", str(args.retry_backoff_ms)]
    if args.client_debug:
        cmd.append("-debug")
    if args.go_tv1:
        cmd.append("-tv1")
    # Every phase of txngo is bounded by GO_PHASE_TIMEOUT (init, first commit,
    # the loops' end after the window); a minute more for the rest.
    budget = 3 * GO_PHASE_TIMEOUT + args.warmup + args.duration + 60
    deadline = time.monotonic() + budget
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # stderr: txngo's log, as is
    lines = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    cpu_b = {}
    result = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failed("txngo did not finish within %.0f s" % budget)
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                break
            try:
                ev = json.loads(line)
            except ValueError:
                raise Failed("txngo printed something that is not JSON: %r" % line[:200]) from None
            if ev.get("event") in ("measure", "stop"):
                cpu_b[ev["event"]] = proc_cpu(broker_pid) if broker_pid else None
            elif ev.get("event") == "result":
                result = ev
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if result is None or rc != 0:
        raise Failed("txngo exited with status %s%s" % (rc, "" if result else " without a result"))
    b1, b2 = cpu_b.get("measure"), cpu_b.get("stop")
    result["cpu_broker"] = (b2 - b1) / result["secs"] if b1 is not None and b2 is not None else None
    return result


def one_run(target, bootstrap, broker_pid, args, label):
    _, configs, _ = TARGETS[target]
    topic = "txnbench-%s-%d-%d" % (target, os.getpid(), int(time.time() * 1000))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=1, config=configs)],
                        operation_timeout=30)[topic].result(timeout=60)
    del admin
    tid_prefix = "txnbench-%s-%s" % (target, topic[-8:])
    if args.client == "go":
        m = run_go(bootstrap, topic, tid_prefix, broker_pid, args)
    else:
        m = run_python(bootstrap, topic, tid_prefix, broker_pid, args)
    secs = m["secs"]
    expected = m["committed_total"] * args.records
    # The same check whichever client produced: confluent-kafka's
    # read_committed consumer, after the producers are gone.
    ver = verify(bootstrap, topic, args, expected)
    res = {
        "target": target, "label": label, "topic": topic, "secs": secs, "init_secs": m["init_secs"],
        "committed": m["committed"], "committed_total": m["committed_total"], "aborted": m["aborted"],
        "failed": m["failed"], "errors": m["errors"][:5], "txn_s": m["committed"] / secs,
        "rec_s": m["committed"] * args.records / secs,
        "commit": m["commit"], "flush": m["flush"], "txn": m["txn"],
        "expected": expected, "verify": ver, "requests": m["requests"],
        "cpu_client": m["cpu_client"], "cpu_broker": m["cpu_broker"],
    }
    return res


def per_txn(r):
    n = max(1, r["committed_total"])
    shown = [api for api in ("Produce", "AddPartitionsToTxn", "EndTxn") if api in r["requests"]]
    return ", ".join("%s %.2f" % (api, r["requests"][api] / n) for api in shown) or "?"


def lat3(v):
    if not v:
        return "-"
    return "%.2f / %.2f / %.2f" % (pct(v, 0.5), pct(v, 0.99), v[-1])


def describe(r):
    v = r["verify"]
    lines = [
        "[%s] %d transactions committed in %.1f s: %.0f txn/s, %.0f records/s; aborted %d, failed %d"
        % (r["label"], r["committed"], r["secs"], r["txn_s"], r["rec_s"], r["aborted"], r["failed"]),
        "[%s] latency ms p50 / p99 / max: EndTxn (the commit call) %s; produce (begin to end of flush) %s; "
        "whole transaction %s" % (r["label"], lat3(r["commit"]), lat3(r["flush"]), lat3(r["txn"])),
        "[%s] requests per committed transaction (whole run, warm-up included): %s"
        % (r["label"], per_txn(r)),
        "[%s] CPU: client %.2f cores, broker %s cores (of %d); producers initialised in %.1f s"
        % (r["label"], r["cpu_client"], "%.2f" % r["cpu_broker"] if r["cpu_broker"] is not None else "?",
           os.cpu_count() or 0, r["init_secs"]),
        "[%s] read_committed check: %d records read (%d distinct, %d duplicates), expected %d "
        "(%d transactions x %d, warm-up included): %s"
        % (r["label"], v["got"], v["unique"], v["dup"], r["expected"], r["committed_total"],
           r["expected"] // max(1, r["committed_total"]) if r["committed_total"] else 0,
           "OK" if v["ok"] else ("INCOMPLETE (end of partitions not reached)" if not v["complete"] else "MISMATCH")),
    ]
    for e in r["errors"]:
        lines.append("[%s] error: %s" % (r["label"], e))
    return "\n".join(lines)


def client_name(args):
    """The client that drives the producers, with its version, for the report."""
    if args.client == "go":
        _, gover = go_binary()
        return "franz-go %s (scripts/bench_tool/txngo, %s)%s" % (
            franz_go_version(), gover, ", transaction version 1 forced" if args.go_tv1 else "")
    return "confluent-kafka %s, librdkafka %s, python %s" % (
        version()[0] if isinstance(version(), tuple) else version(), libversion()[0], platform.python_version())


def markdown(results, args):
    out = ["Transactions (%d producers x %d records of %d B per transaction over %d partitions, acks=all, "
           "idempotent; %.0f s measured after %.0f s warm-up; latency in ms; client %s):"
           % (args.producers, args.records, args.size, args.partitions, args.duration, args.warmup,
              client_name(args)), "",
           "| target | run | committed txn/s | records/s | EndTxn p50 | EndTxn p99 | EndTxn max "
           "| produce p50 | produce p99 | txn p99 | aborted+failed | Produce req/txn | AddPartitionsToTxn req/txn | read_committed check | client CPU | broker CPU |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in results:
        if "error" in r:
            out.append("| %s | %s | FAILED: %s | | | | | | | | | | | | | |" % (r["target"], r["run"], r["error"]))
            continue
        c, f, t = r["commit"], r["flush"], r["txn"]
        out.append("| %s | %d | {:,.0f} | {:,.0f} | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %s | %.2f | %s |"
                   .format(r["txn_s"], r["rec_s"])
                   % (r["target"], r["run"], pct(c, .5), pct(c, .99), c[-1], pct(f, .5), pct(f, .99), pct(t, .99),
                      r["aborted"] + r["failed"],
                      r["requests"].get("Produce", 0) / max(1, r["committed_total"]),
                      r["requests"].get("AddPartitionsToTxn", 0) / max(1, r["committed_total"]),
                      ("%s = %s" % ("{:,}".format(r["verify"]["got"]), "OK" if r["verify"]["ok"] else "BAD")),
                      r["cpu_client"], "%.2f" % r["cpu_broker"] if r["cpu_broker"] is not None else "?"))
    return "\n".join(out)


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print("load average before: %s" % loadavg(), flush=True)
    tmp = os.environ.get("TMPDIR", "/tmp")
    probe = fsync_probe(tmp, samples=50 if args.smoke else 200)
    print("machine: %d CPUs, Linux %s; client: %s" % (os.cpu_count() or 0, platform.release(), client_name(args)))
    print("disk (%s, both brokers' data): %s" % (tmp, fmt_probe("fdatasync", probe["fdatasync"])))
    print("disk (%s, both brokers' data): %s" % (tmp, fmt_probe("fsync", probe["fsync"])))
    if args.client == "go":
        backoff = ("franz-go's default (250 ms doubling to 5 s)" if args.retry_backoff_ms is None
                   else "%d (constant)" % args.retry_backoff_ms)
    else:
        backoff = ("librdkafka's default" if args.retry_backoff_ms is None
                   else "%d (max too)" % args.retry_backoff_ms)
    print("workload: %d transactional producers (%s), %d records x %d B per transaction over %d partitions, "
          "acks=all; %.0f s warm-up, %.0f s measured, %d run(s) per target: %s; retry backoff ms %s%s"
          % (args.producers, "goroutines of txngo" if args.client == "go" else "threads", args.records, args.size,
             args.partitions, args.warmup, args.duration, args.runs, ", ".join(args.targets), backoff,
             "; SMOKE: the numbers mean nothing" if args.smoke else ""), flush=True)

    results = []
    failures = []
    kaas = kafka = None
    try:
        need_kafka = any(TARGETS[t][0] == "kafka" for t in args.targets)
        if need_kafka:
            kafka = KafkaNode().begin()
        if "kaas" in args.targets:
            if args.bootstrap:
                kaas_bootstrap, kaas_pid = args.bootstrap, None
            else:
                kaas = KaasBroker(name="kaas-bench-txn").start()
                kaas_bootstrap, kaas_pid = kaas.bootstrap, kaas.pid
                print("kaas: %s at %s (data %s)" % (kaas.binary, kaas.bootstrap, kaas.data_dir), flush=True)
        if need_kafka:
            kafka.ready()
            print("kafka: Apache Kafka %s at %s (scripts/kafka-ref, state %s)"
                  % (kafka_version(), kafka.bootstrap, kafka.state), flush=True)
        if need_kafka and args.kafka_warmup > 0:
            # A fresh Kafka node is slow at first (JIT, the coordinator loading the
            # partitions of __transaction_state on first use): its first run, like
            # compare.py's warm-up, is not counted.
            warm = argparse.Namespace(**vars(args))
            warm.duration, warm.warmup = args.kafka_warmup, 1.0
            kt = next(t for t in args.targets if TARGETS[t][0] == "kafka")
            try:
                r = one_run(kt, kafka.bootstrap, kafka_pid(kafka), warm, "kafka warm-up, not counted")
                print("[kafka warm-up, not counted] %.0f txn/s over %.0f s; EndTxn p50 %.2f ms"
                      % (r["txn_s"], r["secs"], pct(r["commit"], .5) if r["commit"] else float("nan")),
                      flush=True)
            except (Failed, KafkaException) as e:
                failures.append("kafka warm-up: %s" % e)
        for run in range(1, args.runs + 1):
            for target in args.targets:
                if TARGETS[target][0] == "kaas":
                    b, pid = kaas_bootstrap, kaas_pid
                else:
                    b, pid = kafka.bootstrap, kafka_pid(kafka)
                label = "%s run %d" % (target, run)
                try:
                    r = one_run(target, b, pid, args, label)
                except (Failed, KafkaException) as e:
                    failures.append("%s: %s" % (label, e))
                    results.append({"target": target, "run": run, "error": str(e)})
                    continue
                r["run"] = run
                results.append(r)
                print(describe(r), flush=True)
                if r["aborted"] or r["failed"]:
                    failures.append("%s: %d aborted, %d failed transactions" % (label, r["aborted"], r["failed"]))
                if not r["verify"]["ok"]:
                    failures.append("%s: read_committed saw %d records (%d duplicates), expected %d"
                                    % (label, r["verify"]["got"], r["verify"]["dup"], r["expected"]))
                if r["committed"] == 0:
                    failures.append("%s: no transaction committed in the measured window" % label)
        if kaas is not None and kaas.died_unexpectedly() is not None:
            failures.append("kaas exited (code %s); log tail:\n%s" % (kaas.died_unexpectedly(), kaas.log_tail(30)))
    except (Failed, KafkaException, OSError) as e:
        failures.append(str(e))
    finally:
        if kafka is not None:
            kafka.stop()
        if kaas is not None:
            kaas.close()

    print()
    for f in failures:
        print("FAILED: %s" % f)
    print("load average after: %s" % loadavg())
    print()
    print("Targets: " + "; ".join("%s = %s" % (t, TARGETS[t][2]) for t in args.targets) + ".")
    print("fsync of a 4 KiB append on this machine: p50 %.2f ms, p99 %.2f ms (fdatasync p50 %.2f, p99 %.2f)"
          % (pct(probe["fsync"], .5), pct(probe["fsync"], .99), pct(probe["fdatasync"], .5),
             pct(probe["fdatasync"], .99)))
    print()
    print(markdown(results, args))
    print()
    print("whole run: %.0f s" % (time.monotonic() - started))
    if failures:
        print("%d failure(s); exit 1" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print("bench --txn: %s" % e, file=sys.stderr)
        sys.exit(1)
