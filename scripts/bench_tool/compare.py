"""kaas and Apache Kafka side by side, measured with Kafka's own benchmark tools.

`scripts/bench --compare` runs this. One run starts the release kaas broker and
one Apache Kafka node (scripts/kafka-ref, the version pinned in
scripts/kafka_ref/pom.xml) on 127.0.0.1, each on a fresh temp dir, and for
every target x record size:

  1. creates a topic with Kafka's topic command (same partition count on both),
  2. runs ProducerPerformance: a fixed record count, --throughput -1 (unpaced),
     acks=all, enable.idempotence=true,
  3. runs ConsumerPerformance over the same topic (a consumer group, from the
     earliest offset) until it has read every record.

--smoke runs the three targets at the same time (the set-up always does) on
quick-start JVMs (C1 only, serial GC, class-data-sharing archives kept in the
jar cache): a check for CI that all of it works, in about half a minute.

Targets:
  kaas         kaas as it runs: acks=all is answered only after fsync
  kafka        Kafka with its defaults: no fsync per write (page cache only)
  kafka-flush  the same Kafka node, topics created with flush.messages=1:
               an fsync after every append, the like-for-like durable case

It prints the machine's fsync latency, the load average before and after, each
tool's own summary line, and markdown tables for docs/performance.md. It
measures; it asserts nothing about speed. It exits non-zero when a tool fails or
a count comes up short (produced or consumed), so --smoke can run in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e_tests"))

from kaas_broker import BrokerError, KaasBroker, _die_with_parent  # noqa: E402

KAFKA_REF = REPO / "scripts" / "kafka-ref"
KAFKA_POM = REPO / "scripts" / "kafka_ref" / "pom.xml"
TOOLS_LOG4J = REPO / "scripts" / "kafka_ref" / "tools" / "log4j2.properties"

PRODUCER_MAIN = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_MAIN = "org.apache.kafka.tools.ConsumerPerformance"
TOPIC_MAIN = "org.apache.kafka.tools.TopicCommand"

SIZES = (100, 65536)
TARGETS = (
    # name, broker, topic configs, description
    ("kaas", "kaas", {}, "kaas (fsync before every acks=all answer)"),
    ("kafka", "kafka", {}, "Kafka, defaults (no fsync per write)"),
    ("kafka-flush", "kafka", {"flush.messages": "1"}, "Kafka, topic flush.messages=1 (fsync per append)"),
)

# The measured tools run on the JVM options Kafka's own scripts give them
# (kafka-run-class.sh's G1 settings, producer-perf-test.sh's 512 MB heap).
JVM_MEASURED = ["-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent"]
# Admin calls, and every tool under --smoke, where only correctness counts:
# C1 only and the serial collector start a JVM in about half the CPU time.
JVM_QUICK = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
JVM_COMMON = ["-Djava.awt.headless=true", "-Duser.language=en", "-Duser.country=US",
              # the JVM's own warnings (CDS among them) to stderr: stdout is parsed
              "-Xlog:disable", "-Xlog:all=warning:stderr",
              "-Dlog4j2.configurationFile=%s" % TOOLS_LOG4J]


class Failed(Exception):
    pass


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="scripts/bench --compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records-100b", type=int, metavar="N",
                    help="records of 100 B per target (default 1000000; 2000 with --smoke)")
    ap.add_argument("--records-64k", type=int, metavar="N",
                    help="records of 64 KiB per target (default 10000; 50 with --smoke)")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of every topic, both brokers (default 3)")
    ap.add_argument("--warmup", type=int, metavar="N",
                    help="before measuring, produce and consume N x 100 B on each broker, untimed "
                         "(default 100000; 0 with --smoke; 0 skips)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny counts, no warm-up, the targets at the same time, quick-start JVMs: "
                         "checks that everything works (for CI); the numbers mean nothing")
    ap.add_argument("--tool-timeout", type=float, metavar="S",
                    help="kill a tool that runs longer than this (default 900 s; 120 s with --smoke)")
    args = ap.parse_args(argv)
    for name, full, smoke in (("records_100b", 1_000_000, 2000), ("records_64k", 10_000, 50),
                              ("warmup", 100_000, 0), ("tool_timeout", 900, 120)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    if args.records_100b < 1 or args.records_64k < 1 or args.partitions < 1 or args.warmup < 0:
        ap.error("record counts and --partitions must be at least 1, --warmup at least 0")
    return args


# ---------------------------------------------------------------- machine

def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def fsync_probe(directory, samples=200, block=4096):
    """Latency of appending one block to a file and syncing it, in ms:
    {"fdatasync": [...sorted], "fsync": [...sorted]}. Same volume as the brokers' data."""
    out = {}
    fd, path = tempfile.mkstemp(prefix="bench-fsync-", dir=directory)
    try:
        data = os.urandom(block)
        for name, sync in (("fdatasync", os.fdatasync), ("fsync", os.fsync)):
            lat = []
            for _ in range(samples):
                os.write(fd, data)
                t0 = time.perf_counter()
                sync(fd)
                lat.append((time.perf_counter() - t0) * 1000)
            out[name] = sorted(lat)
    finally:
        os.close(fd)
        os.unlink(path)
    return out


def pct(sorted_vals, q):
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def fmt_probe(name, lat):
    return "%s of a %d KiB append: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d samples)" % (
        name, 4, pct(lat, 0.5), pct(lat, 0.99), lat[-1], len(lat))


def kafka_version():
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", KAFKA_POM.read_text())
    return m.group(1) if m else "?"


def find_java():
    java = os.environ.get("KAAS_KAFKA_REF_JAVA")
    if not java and os.environ.get("JAVA_HOME") and os.access(os.path.join(os.environ["JAVA_HOME"], "bin", "java"), os.X_OK):
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    java = java or shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise Failed("java not found%s (Kafka's tools need Java 17 or newer; set KAAS_KAFKA_REF_JAVA)"
                     % (": %s" % java if java else ""))
    return java


def java_version(java):
    r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    first = (r.stderr or r.stdout).splitlines()
    return first[0].strip() if first else "?"


def machine_lines(java, tmp):
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = "%.0f GiB" % (kb / 1024 / 1024)
    except (OSError, ValueError, IndexError):
        pass
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return [
        "machine: %d CPUs (%s), %s RAM, Linux %s; brokers and tools share the CPUs"
        % (os.cpu_count() or 0, cpu, mem, platform.release()),
        "java: %s (%s)" % (java_version(java), java),
        "temp dir (both brokers' data): %s" % tmp,
    ]


# ---------------------------------------------------------------- kafka node

class KafkaNode:
    """One node started with scripts/kafka-ref under its own state file.

    begin() launches `kafka-ref start` and returns at once (its own wait is
    bounded: 60 s); ready() waits for it and returns the bootstrap address."""

    def __init__(self):
        fd, self.state = tempfile.mkstemp(prefix="bench-compare-", suffix=".state")
        os.close(fd)
        os.unlink(self.state)  # kafka-ref writes it; only the name is ours
        self.env = dict(os.environ, KAAS_KAFKA_REF_STATE=self.state)
        self.bootstrap = None
        self.proc = None
        self.error = None
        self.lock = threading.Lock()

    def begin(self):
        self.proc = subprocess.Popen([str(KAFKA_REF), "start"], env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True)
        return self

    def ready(self):
        with self.lock:
            if self.bootstrap is None and self.error is None:
                try:
                    out, _ = self.proc.communicate(timeout=180)
                except subprocess.TimeoutExpired:
                    out = ""
                m = re.search(r"^bootstrap=(\S+)$", out or "", re.M)
                if self.proc.returncode != 0 or not m:
                    self.error = "scripts/kafka-ref start failed (exit %s)" % self.proc.returncode
                else:
                    self.bootstrap = m.group(1)
            if self.error is not None:
                raise Failed(self.error)
            return self.bootstrap

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=120)  # a start in progress: let it finish, then stop
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if os.path.exists(self.state):
            subprocess.run([str(KAFKA_REF), "stop"], env=self.env, timeout=60, stdout=subprocess.DEVNULL)


def fetch_tools():
    r = subprocess.run([str(KAFKA_REF), "fetch-tools"], stdout=subprocess.PIPE, text=True, timeout=600)
    m = re.search(r"^tools_lib=(.+)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        raise Failed("scripts/kafka-ref fetch-tools failed (exit %d)" % r.returncode)
    return m.group(1)


# ---------------------------------------------------------------- tools

class Tools:
    def __init__(self, java, lib, timeout, quick):
        self.base = [java] + JVM_COMMON + ["-cp", os.path.join(lib, "*")]
        self.timeout = timeout
        self.quick_only = quick
        # Class-data-sharing archives for the quick JVMs, one per main class, made by
        # the first run that needs one and kept next to the jars: loading Kafka's
        # classes from an archive takes about 40 % less CPU than from the jars, which
        # is what --smoke mostly spends. Keyed by the JVM and the flags, so another
        # java never reads an archive it did not write.
        key = hashlib.sha256(("\0".join([java_version(java), os.path.realpath(java)] + JVM_QUICK + self.base))
                             .encode()).hexdigest()[:16]
        self.cds_dir = os.path.join(os.path.dirname(os.path.normpath(lib)), "tools-cds", key)
        self.running = set()
        self.lock = threading.Lock()
        self.closed = False

    def run(self, main, args, quick=False, label=""):
        quick = quick or self.quick_only
        jvm = list(JVM_QUICK if quick else JVM_MEASURED)
        archive = dump = None
        if quick:
            archive = os.path.join(self.cds_dir, main.rsplit(".", 1)[1] + ".jsa")
            if os.path.exists(archive):
                jvm.append("-XX:SharedArchiveFile=" + archive)
            else:
                os.makedirs(self.cds_dir, exist_ok=True)
                dump = "%s.%d.%d.partial" % (archive, os.getpid(), threading.get_ident())
                jvm.append("-XX:ArchiveClassesAtExit=" + dump)
        cmd = [self.base[0]] + jvm + self.base[1:] + [main] + args
        t0 = time.monotonic()
        with self.lock:
            if self.closed:
                raise Failed("%s: stopped" % label)
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True, preexec_fn=_die_with_parent)
            self.running.add(p)
        try:
            out, err = p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise Failed("%s: %s timed out after %.0f s" % (label, main.rsplit(".", 1)[1], self.timeout))
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
        finally:
            with self.lock:
                self.running.discard(p)
            if dump is not None and os.path.exists(dump):
                if p.returncode == 0:
                    os.replace(dump, archive)  # atomic: a reader sees a whole archive or none
                else:
                    os.unlink(dump)
        secs = time.monotonic() - t0
        if p.returncode != 0:
            raise Failed("%s: %s exited %d\n%s%s" % (label, main.rsplit(".", 1)[1], p.returncode,
                                                      tail(out), tail(err)))
        return out, err, secs

    def kill_all(self):
        """Ends every tool still running (each in its own process group) and refuses new ones."""
        with self.lock:
            self.closed = True
            for p in self.running:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)

    def create_topic(self, bootstrap, topic, partitions, configs, label):
        args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic,
                "--partitions", str(partitions), "--replication-factor", "1"]
        for k, v in configs.items():
            args += ["--config", "%s=%s" % (k, v)]
        self.run(TOPIC_MAIN, args, quick=True, label=label)

    def describe(self, bootstrap, pattern, label):
        out, _, _ = self.run(TOPIC_MAIN, ["--bootstrap-server", bootstrap, "--describe", "--topic", pattern],
                             quick=True, label=label)
        topics = {}
        for line in out.splitlines():
            m = re.match(r"Topic: (\S+)\s+TopicId: \S+\s+PartitionCount: (\d+).*Configs: ?(.*)$", line)
            if m:
                configs = dict(kv.split("=", 1) for kv in m.group(3).split(",") if "=" in kv)
                topics[m.group(1)] = (int(m.group(2)), configs)
        return topics

    def produce(self, bootstrap, topic, records, size, label):
        out, err, secs = self.run(PRODUCER_MAIN, [
            "--topic", topic, "--num-records", str(records), "--record-size", str(size),
            "--throughput", "-1",
            "--producer-props", "bootstrap.servers=%s" % bootstrap, "acks=all", "enable.idempotence=true",
        ], label=label)
        final = None
        for line in out.splitlines():
            m = PRODUCER_FINAL.match(line.strip())
            if m:
                final = (line.strip(), m)
        if final is None:
            raise Failed("%s: no summary line from ProducerPerformance\n%s%s" % (label, tail(out), tail(err)))
        line, m = final
        res = {"line": line, "sent": int(m.group(1)), "rec_s": float(m.group(2)), "mb_s": float(m.group(3)),
               "avg": float(m.group(4)), "max": float(m.group(5)), "p50": int(m.group(6)),
               "p95": int(m.group(7)), "p99": int(m.group(8)), "p999": int(m.group(9)), "wall": secs}
        if res["sent"] != records:
            raise Failed("%s: ProducerPerformance acknowledged %d of %d records\n%s"
                         % (label, res["sent"], records, tail(err)))
        return res

    def consume(self, bootstrap, topic, records, label):
        out, err, secs = self.run(CONSUMER_MAIN, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
            "--group", "bench-compare-%s" % topic, "--timeout", "30000",
        ], label=label)
        # A header line, then the figures; a WARNING line (timeout before the
        # count was reached) may come between them.
        res = None
        keys = None
        for ln in out.splitlines():
            fields = [f.strip() for f in ln.split(",")]
            if ln.startswith("start.time,"):
                keys = fields
            elif keys is not None and len(fields) == len(keys):
                res = dict(zip(keys, fields))
                keys = None
        if res is None:
            raise Failed("%s: no summary from ConsumerPerformance\n%s%s" % (label, tail(out), tail(err)))
        got = int(res["data.consumed.in.nMsg"])
        if got != records:
            raise Failed("%s: ConsumerPerformance read %d of %d records\n%s%s"
                         % (label, got, records, tail(out), tail(err)))
        return {"line": "%s MB, %s records in %s ms after a %s ms group join: %s MB/s, %s records/s"
                        % (res["data.consumed.in.MB"], got, res["fetch.time.ms"], res["rebalance.time.ms"],
                           res["fetch.MB.sec"], res["fetch.nMsg.sec"]),
                "got": got, "mb": float(res["data.consumed.in.MB"]),
                "mb_s": float(res["fetch.MB.sec"]), "rec_s": float(res["fetch.nMsg.sec"]),
                "join_ms": int(res["rebalance.time.ms"]), "fetch_ms": int(res["fetch.time.ms"]), "wall": secs}


PRODUCER_FINAL = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")


def tail(text, n=20):
    lines = (text or "").rstrip().splitlines()
    return "".join("    | %s\n" % ln for ln in lines[-n:])


def size_name(size):
    return "64 KiB" if size == 65536 else "%d B" % size


# ---------------------------------------------------------------- report

def markdown(results):
    out = []
    out.append("Produce (ProducerPerformance, acks=all, enable.idempotence=true, --throughput -1; "
               "latency = send() to acknowledgement, client queueing included):")
    out.append("")
    out.append("| target | record | records | records/s | MB/s | avg ms | p50 ms | p95 ms | p99 ms | p99.9 ms | max ms |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (target, size), r in results.items():
        p = r.get("produce")
        if p is None:
            out.append("| %s | %s | FAILED | | | | | | | | |" % (target, size_name(size)))
            continue
        out.append("| %s | %s | %s | %s | %.1f | %.1f | %d | %d | %d | %d | %.0f |" % (
            target, size_name(size), "{:,}".format(p["sent"]), "{:,.0f}".format(p["rec_s"]), p["mb_s"],
            p["avg"], p["p50"], p["p95"], p["p99"], p["p999"], p["max"]))
    out.append("")
    out.append("Consume (ConsumerPerformance, one group member, from the earliest offset; rates over the "
               "fetch time, the group join excluded):")
    out.append("")
    out.append("| target | record | records | records/s | MB/s | group join ms |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for (target, size), r in results.items():
        c = r.get("consume")
        if c is None:
            out.append("| %s | %s | FAILED | | | |" % (target, size_name(size)))
            continue
        out.append("| %s | %s | %s | %s | %.1f | %d |" % (
            target, size_name(size), "{:,}".format(c["got"]), "{:,.0f}".format(c["rec_s"]), c["mb_s"],
            c["join_ms"]))
    out.append("")
    out.append("MB = 2^20 bytes, as the tools print it.")
    return "\n".join(out)


# ---------------------------------------------------------------- main

def in_threads(jobs):
    """Runs each callable in its own daemon thread; returns the failures' messages.
    Daemon threads: an interrupted run never waits for them at exit."""
    failures = []

    def wrap(job):
        try:
            job()
        except Failed as e:
            failures.append(str(e))
        except Exception as e:  # noqa: BLE001 - reported like a failure, never lost in a thread
            failures.append("%s: %s" % (type(e).__name__, e))

    threads = [threading.Thread(target=wrap, args=(j,), daemon=True) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # short joins: the main thread still takes signals
    return failures


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    started = time.monotonic()
    # SIGTERM (a CI timeout, kill) unwinds like ^C, so the finally below stops both brokers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    print("load average before: %s" % loadavg(), flush=True)
    tmp = tempfile.gettempdir()
    java = find_java()
    tools_lib = fetch_tools()
    version = kafka_version()
    for line in machine_lines(java, tmp):
        print(line)
    probe = fsync_probe(tmp, samples=50 if args.smoke else 200)
    print("disk: " + fmt_probe("fdatasync", probe["fdatasync"]))
    print("disk: " + fmt_probe("fsync", probe["fsync"]))
    print("counts: %d x 100 B, %d x 64 KiB per target; %d partitions per topic; warm-up %d x 100 B per broker%s"
          % (args.records_100b, args.records_64k, args.partitions, args.warmup,
             "; SMOKE: targets run at the same time, quick-start JVMs, the numbers mean nothing"
             if args.smoke else ""), flush=True)

    tools = Tools(java, tools_lib, args.tool_timeout, quick=args.smoke)
    stamp = "%d" % int(time.time())
    counts = {100: args.records_100b, 65536: args.records_64k}
    topics = {(name, size): "cmp-%s-%d-%s" % (name, size, stamp) for name, _, _, _ in TARGETS for size in SIZES}
    results = {(name, size): {} for size in SIZES for name, _, _, _ in TARGETS}
    failures = []
    kaas = kafka = None
    try:
        kafka = KafkaNode().begin()  # starts in the background while kaas starts and is set up
        # Same group join rule on both: kafka-ref sets group.initial.rebalance.delay.ms=0.
        kaas = KaasBroker(name="kaas-bench-compare", extra_args=["--group-initial-rebalance-delay-ms", "0"]).start()
        print("kaas: %s at %s (data %s)" % (kaas.binary, kaas.bootstrap, kaas.data_dir), flush=True)

        def bootstrap(broker):
            if broker == "kaas":
                return kaas.bootstrap
            return kafka.ready()

        def setup(name, broker, configs):
            """Topics with the tools' own admin, then a describe that checks the partition
            count and, for kafka-flush, that flush.messages=1 is really set."""
            b = bootstrap(broker)
            for size in SIZES:
                tools.create_topic(b, topics[(name, size)], args.partitions, configs,
                                   "create %s" % topics[(name, size)])
            seen = tools.describe(b, "cmp-%s-[0-9]+-%s" % (name, stamp), "describe %s" % name)
            for size in SIZES:
                topic = topics[(name, size)]
                if topic not in seen:
                    raise Failed("topic %s missing on %s after create" % (topic, broker))
                parts, have = seen[topic]
                if parts != args.partitions:
                    raise Failed("topic %s has %d partitions, wanted %d" % (topic, parts, args.partitions))
                for k, v in configs.items():
                    if have.get(k) != v:
                        raise Failed("topic %s: %s=%s, wanted %s" % (topic, k, have.get(k), v))
            print("[%s] topics created: %s" % (name, ", ".join(
                "%s (%d partitions%s)" % (topics[(name, s)], args.partitions,
                                          "".join(", %s=%s" % kv for kv in configs.items())) for s in SIZES)),
                flush=True)

        def warmup(broker):
            topic = "cmp-warmup-%s-%s" % (broker, stamp)
            tools.create_topic(bootstrap(broker), topic, args.partitions, {}, "create %s" % topic)
            tools.produce(bootstrap(broker), topic, args.warmup, 100, "warm-up %s" % broker)
            tools.consume(bootstrap(broker), topic, args.warmup, "warm-up %s" % broker)
            print("[%s] warm-up done (%d x 100 B produced and consumed, not counted)" % (broker, args.warmup),
                  flush=True)

        def measure(name, broker, size):
            label = "%s %s" % (name, size_name(size))
            r = results[(name, size)]
            r["produce"] = tools.produce(bootstrap(broker), topics[(name, size)], counts[size], size, label)
            print("[%s] produce: %s" % (label, r["produce"]["line"]), flush=True)
            r["consume"] = tools.consume(bootstrap(broker), topics[(name, size)], counts[size], label)
            print("[%s] consume: %s" % (label, r["consume"]["line"]), flush=True)

        # Set-up is not measured: all targets at once.
        failures += in_threads([(lambda t=t: setup(t[0], t[1], t[2])) for t in TARGETS])
        print("kafka: Apache Kafka %s at %s (scripts/kafka-ref, state %s)" % (version, kafka.ready(), kafka.state),
              flush=True)
        if not failures and args.warmup:
            failures += in_threads([lambda: warmup("kaas"), lambda: warmup("kafka")])
        if not failures:
            if args.smoke:
                # Only correctness counts: each target runs its sizes in turn, the targets at once.
                failures += in_threads([(lambda t=t: [measure(t[0], t[1], size) for size in SIZES])
                                        for t in TARGETS])
            else:
                # Measured: one tool at a time, nothing else running.
                for size in SIZES:
                    for name, broker, _, _ in TARGETS:
                        failures += in_threads([lambda: measure(name, broker, size)])
        if kaas.died_unexpectedly() is not None:
            failures.append("kaas exited (code %s); log tail:\n%s" % (kaas.died_unexpectedly(), kaas.log_tail(30)))
    except (Failed, BrokerError, subprocess.SubprocessError, OSError) as e:
        failures.append(str(e))
    finally:
        tools.kill_all()
        if kafka is not None:
            kafka.stop()
        if kaas is not None:
            kaas.close()

    for f in failures:
        print("FAILED: %s" % f)
    print()
    print("load average after: %s" % loadavg())
    print()
    print("Targets: " + "; ".join("%s = %s" % (n, d) for n, _, _, d in TARGETS) + ".")
    print()
    print(markdown(results))
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
        print("bench --compare: %s" % e, file=sys.stderr)
        sys.exit(1)
