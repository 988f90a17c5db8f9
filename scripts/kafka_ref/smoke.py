"""Smoke check of a reference Kafka started by scripts/kafka-ref, with confluent-kafka.

Creates a topic, produces 10 messages, consumes them back in a group and checks
they are the same, in order. Every wait is bounded; exit 0 on success.

    scripts/kafka-ref start            # prints bootstrap=127.0.0.1:<port>
    REPO=$PWD; source scripts/e2e_tests/venv.sh
    "$E2E_PY" scripts/kafka_ref/smoke.py 127.0.0.1:<port>
    scripts/kafka-ref stop
"""

import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

N = 10


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    bootstrap = sys.argv[1].removeprefix("bootstrap=")
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
    fut.result(timeout=30)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    sent = [f"message-{i}".encode() for i in range(N)]
    errors = []
    for i, value in enumerate(sent):
        producer.produce(topic, key=str(i).encode(), value=value,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    left = producer.flush(30)
    if left or errors:
        raise SystemExit(f"smoke: produce failed: {left} undelivered, errors {errors}")

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}-group",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < N and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
        if len(got) == N:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    if got != sent:
        raise SystemExit(f"smoke: FAILED: sent {N}, got {len(got)}: {got}")
    print(f"smoke: ok: topic {topic}: produced and consumed {N} messages "
          f"in {time.monotonic() - t0:.1f} s against {bootstrap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
