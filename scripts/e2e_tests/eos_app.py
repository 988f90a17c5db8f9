"""A consume-transform-produce application with exactly-once semantics (KIP-98 +
KIP-447), run as a subprocess by test_transactions.py, which kills it (SIGKILL) and
the broker (kill -9) under it and restarts both.

    python eos_app.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [PAUSE_S]

It reads INPUT (read_committed) in the consumer group GROUP with a static member id
(so a restarted instance takes the place of a killed one without waiting for its
session to time out), and copies every record to OUTPUT, same partition, key and
headers, value prefixed with b"eos:", plus a header src=b"<partition>:<offset>".
Each batch is one transaction: the copies and the consumed offsets
(send_offsets_to_transaction with consumer_group_metadata()) commit together or
not at all. Every instance uses the same transactional id, so a new one fences the
old one and aborts its open transaction.

Errors follow the pattern librdkafka documents: a retriable one retries the same
call; an abortable one aborts the transaction and rewinds the consumer to the
group's committed offsets; a fatal one ends the process with exit code 3 (the test
restarts it), and so does a transactional call stuck far past its timeout. It never
exits on its own otherwise: SIGTERM makes it finish the
transaction in flight and exit 0.

EOS_APP_DEBUG=eos,protocol (say) turns on librdkafka's debug log of the producer.

Progress goes to stdout, one line each, flushed at once:
    ready                          after init_transactions
    open <records>                 the batch is produced and flushed, not committed yet
                                   (it then sleeps PAUSE_S, default 0.1 s, so that a
                                   kill sent on this line lands inside the transaction)
    committed <records>            the transaction of <records> records committed
    aborted <records> <why>        the transaction was aborted and the consumer rewound
    fatal <error>                  before exit code 3
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

BATCH = 1000
API_TIMEOUT = 10.0  # each transactional call; a retriable timeout is retried
RETRIES = 12  # of one call, on retriable errors (the broker may be down for seconds); then fatal

stop = False


def say(*words) -> None:
    line = " ".join(str(w) for w in words)
    print(line, flush=True)
    log(line)


def log(line) -> None:
    """Everything the app does and sees, on stderr (kept by the test)."""
    sys.stderr.write("%.3f %s\n" % (time.time(), line))
    sys.stderr.flush()


def on_term(_sig, _frame) -> None:
    global stop
    stop = True


def stuck(what) -> None:
    say("fatal stuck inside %s for %.0f s" % (what, 3 * API_TIMEOUT))
    os._exit(3)


class Fatal(Exception):
    pass


class Abortable(Exception):
    pass


def call(what, fn, *args):
    """fn(*args), retried while the error is retriable; an abortable error raises
    Abortable, anything else (fatal, or retries exhausted) raises Fatal."""
    for attempt in range(RETRIES):
        # librdkafka bounds each call by its timeout, yet send_offsets_to_transaction was seen
        # never to return after a broker restart (AddOffsetsToTxn answered, on Kafka 4.1.1
        # as on kaas): a call that outlives its timeout by far ends the process, as a
        # stuck client would be restarted (the next instance fences this one).
        watchdog = threading.Timer(3 * API_TIMEOUT, stuck, [what])
        watchdog.daemon = True
        watchdog.start()
        try:
            return fn(*args)
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                raise Fatal("%s: %s" % (what, err))
            if err.txn_requires_abort():
                raise Abortable("%s: %s" % (what, err))
            if err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                log("retrying %s after %s" % (what, err))
                time.sleep(min(0.1 * (attempt + 1), 1.0))
                continue
            raise Fatal("%s: %s" % (what, err))
        finally:
            watchdog.cancel()
    raise Fatal("%s: still failing after %d retries" % (what, RETRIES))


def main() -> int:
    bootstrap, input_topic, output_topic, group, txn_id = sys.argv[1:6]
    pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0.1
    signal.signal(signal.SIGTERM, on_term)
    common = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    debug = {"debug": os.environ["EOS_APP_DEBUG"]} if os.environ.get("EOS_APP_DEBUG") else {}
    producer = Producer(dict(
        common,
        **debug,
        **{
            "transactional.id": txn_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "transaction.timeout.ms": 60000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 500,
            # librdkafka 2.16.1 re-bootstraps when its only broker goes down and
            # decommissions that broker's handle, which can stay cached as the group
            # coordinator: send_offsets_to_transaction then waits for a state change of
            # a thread that is gone and hangs (librdkafka issue 5511, open). Without
            # re-bootstrap every broker kill -9 cost the app the 30 s watchdog below
            # and a restart. The broker keeps its id and address across its restarts,
            # so the bootstrap list has nothing new to teach the client.
            "metadata.recovery.strategy": "none",
        },
    ))
    consumer = Consumer(dict(
        common,
        **{
            "group.id": group,
            "group.instance.id": group + "-member",
            "session.timeout.ms": 30000,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        },
    ))
    try:
        call("init_transactions", producer.init_transactions, API_TIMEOUT)
    except (Fatal, Abortable) as e:
        say("fatal", e)
        return 3
    say("ready")
    consumer.subscribe(
        [input_topic],
        on_assign=lambda c, ps: log("assigned %s" % [(p.partition, p.offset) for p in ps]),
        on_revoke=lambda c, ps: log("revoked %s" % [p.partition for p in ps]),
        on_lost=lambda c, ps: log("lost %s" % [p.partition for p in ps]),
    )
    try:
        while not stop:
            msgs = []
            for m in consumer.consume(num_messages=BATCH, timeout=0.5):
                if m.error() is None:
                    msgs.append(m)
                elif m.error().fatal():
                    # e.g. FENCED_INSTANCE_ID: a broker restart outlasted the session and the
                    # static member rejoined under a new member id
                    raise Fatal("consumer: %s" % m.error())
                else:
                    log("consumer error: %s" % m.error())
            if not msgs:
                continue
            try:
                call("begin_transaction", producer.begin_transaction)
                next_offsets = {}
                for m in msgs:
                    src = b"%d:%d" % (m.partition(), m.offset())
                    headers = list(m.headers() or []) + [("src", src)]
                    value = None if m.value() is None else b"eos:" + m.value()
                    while True:
                        try:
                            producer.produce(output_topic, value=value, key=m.key(), headers=headers,
                                             partition=m.partition())
                            break
                        except BufferError:
                            producer.poll(0.05)
                    next_offsets[m.partition()] = m.offset() + 1
                remaining = producer.flush(API_TIMEOUT)
                if remaining:
                    raise Abortable("flush: %d records undelivered" % remaining)
                say("open", len(msgs))
                if pause:
                    time.sleep(pause)
                offsets = [TopicPartition(input_topic, p, o) for p, o in sorted(next_offsets.items())]
                call("send_offsets_to_transaction", producer.send_offsets_to_transaction, offsets,
                     consumer.consumer_group_metadata(), API_TIMEOUT)
                call("commit_transaction", producer.commit_transaction, API_TIMEOUT)
                say("committed", len(msgs))
            except Abortable as why:
                call("abort_transaction", producer.abort_transaction, API_TIMEOUT)
                # Rewind: the next batch starts where the group's committed offsets are.
                tps = [TopicPartition(input_topic, p) for p in sorted({m.partition() for m in msgs})]
                committed = None
                for attempt in range(RETRIES):
                    try:
                        committed = consumer.committed(tps, timeout=API_TIMEOUT)
                        break
                    except KafkaException:
                        time.sleep(min(0.1 * (attempt + 1), 1.0))
                if committed is None:
                    raise Fatal("could not read the committed offsets to rewind to")
                for tp in committed:
                    off = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    try:
                        consumer.seek(TopicPartition(input_topic, tp.partition, off))
                    except KafkaException as e:
                        raise Fatal("rewinding partition %d to %d: %s" % (tp.partition, off, e))
                say("aborted", len(msgs), str(why).replace("\n", " "))
    except (Fatal, Abortable) as e:
        say("fatal", str(e).replace("\n", " "))
        return 3
    consumer.close()
    producer.flush(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
