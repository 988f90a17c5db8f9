package kaas.e2e;

import static kaas.e2e.Clients.WAIT_S;
import static kaas.e2e.Clients.admin;
import static kaas.e2e.Clients.consumerProps;
import static kaas.e2e.Clients.producerProps;
import static kaas.e2e.Clients.topic;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/** Transactions with the Java client's defaults (including its transaction version). */
final class TransactionScenarios {
    static final int TXNS = 150; // committed ones, and as many aborted

    static Properties txnProducerProps(String transactionalId) {
        Properties p = producerProps("all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        return p;
    }

    /** ListOffsets(latest) per partition, for one isolation level (the LSO or the high watermark). */
    static Map<String, Object> latest(Admin admin, int partitions, IsolationLevel level) throws Exception {
        Map<TopicPartition, OffsetSpec> q = new LinkedHashMap<>();
        for (TopicPartition tp : Clients.partitions(partitions)) q.put(tp, OffsetSpec.latest());
        Map<String, Object> out = new TreeMap<>();
        admin.listOffsets(q, new ListOffsetsOptions(level)).all().get(WAIT_S, TimeUnit.SECONDS)
            .forEach((tp, info) -> out.put(String.valueOf(tp.partition()), info.offset()));
        return out;
    }

    /** Every partition from 0 to the consumer's end offset (the LSO under read_committed):
     *  partition -> ["offset:value", ...], plus the positions reached and the end offsets seen. */
    static Map<String, Object> readAll(int partitions, String isolation) {
        Properties c = consumerProps(null);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        Map<String, Object> records = new TreeMap<>();
        Map<String, Object> positions = new TreeMap<>();
        Map<String, Object> ends = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> tps = Clients.partitions(partitions);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(WAIT_S));
            Map<Integer, List<String>> got = new TreeMap<>();
            for (TopicPartition tp : tps) got.put(tp.partition(), new ArrayList<>());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp, Duration.ofSeconds(WAIT_S)) >= end.get(tp);
                if (done) break;
                if (System.nanoTime() > deadline) throw new IllegalStateException(isolation + ": not at the end in 40 s");
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(300))) {
                    got.get(r.partition()).add(r.offset() + ":" + r.value());
                }
            }
            for (TopicPartition tp : tps) {
                records.put(String.valueOf(tp.partition()), got.get(tp.partition()));
                positions.put(String.valueOf(tp.partition()), consumer.position(tp));
                ends.put(String.valueOf(tp.partition()), end.get(tp));
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("records", records);
        out.put("positions", positions);
        out.put("end_offsets", ends);
        return out;
    }

    /** One transactional producer: TXNS commits and TXNS aborts in a seeded order, 1-3 records
     *  each over 3 partitions, flushed before the abort so the aborted records are in the log. */
    static Map<String, Object> interleaved() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 3);
            out.put("transaction_version", transactionVersion(admin));
            List<Boolean> plan = new ArrayList<>();
            for (int i = 0; i < TXNS; i++) {
                plan.add(true);
                plan.add(false);
            }
            Random rng = new Random(11);
            Collections.shuffle(plan, rng);
            List<Object> written = new ArrayList<>(); // [partition, offset, value, committed]
            long t0 = System.nanoTime();
            try (KafkaProducer<String, String> p = new KafkaProducer<>(txnProducerProps(topic + "-tid"))) {
                p.initTransactions();
                for (int t = 0; t < plan.size(); t++) {
                    boolean commit = plan.get(t);
                    p.beginTransaction();
                    List<Future<RecordMetadata>> fs = new ArrayList<>();
                    List<String> values = new ArrayList<>();
                    int n = 1 + rng.nextInt(3);
                    for (int r = 0; r < n; r++) {
                        String v = "t" + t + "-r" + r + (commit ? "-commit" : "-abort");
                        values.add(v);
                        fs.add(p.send(new ProducerRecord<>(topic, rng.nextInt(3), "k", v)));
                    }
                    p.flush();
                    for (int r = 0; r < n; r++) {
                        RecordMetadata md = fs.get(r).get(WAIT_S, TimeUnit.SECONDS);
                        written.add(List.of(md.partition(), md.offset(), values.get(r), commit));
                    }
                    if (commit) p.commitTransaction();
                    else p.abortTransaction();
                }
            }
            out.put("txn_seconds", (System.nanoTime() - t0) / 1e9);
            out.put("written", written);
            // the last markers may still be on their way: wait (bounded) until the LSO is the end
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            Map<String, Object> lso, hwm;
            do {
                Clients.sleep(100);
                lso = latest(admin, 3, IsolationLevel.READ_COMMITTED);
                hwm = latest(admin, 3, IsolationLevel.READ_UNCOMMITTED);
            } while (!lso.equals(hwm) && System.nanoTime() < deadline);
            out.put("lso", lso);
            out.put("hwm", hwm);
            out.put("read_committed", readAll(3, "read_committed"));
            out.put("read_uncommitted", readAll(3, "read_uncommitted"));
        }
        return out;
    }

    /** The finalized transaction.version feature the broker reports (what the client goes by),
     *  0 when it reports none, or the error's class name. */
    static Object transactionVersion(Admin admin) {
        try {
            var f = admin.describeFeatures().featureMetadata().get(WAIT_S, TimeUnit.SECONDS)
                .finalizedFeatures().get("transaction.version");
            return f == null ? 0 : (int) f.maxVersionLevel();
        } catch (Exception e) {
            return failure(e);
        }
    }

    static String failure(Exception e) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        System.err.println("failure: " + c);
        return c.getClass().getSimpleName();
    }

    /** A (transactional.id X) writes in a transaction; B (also X) initializes, which fences A
     *  and aborts its transaction, and commits its own; A then sends and commits. */
    static Map<String, Object> fencing() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 3);
            out.put("transaction_version", transactionVersion(admin));
            String tid = topic + "-tid";
            KafkaProducer<String, String> a = new KafkaProducer<>(txnProducerProps(tid));
            KafkaProducer<String, String> b = new KafkaProducer<>(txnProducerProps(tid));
            try {
                a.initTransactions();
                a.beginTransaction();
                RecordMetadata a1 = a.send(new ProducerRecord<>(topic, 0, "k", "a1")).get(WAIT_S, TimeUnit.SECONDS);
                out.put("a1", List.of(a1.partition(), a1.offset()));

                b.initTransactions();
                b.beginTransaction();
                RecordMetadata b1 = b.send(new ProducerRecord<>(topic, 0, "k", "b1")).get(WAIT_S, TimeUnit.SECONDS);
                RecordMetadata b2 = b.send(new ProducerRecord<>(topic, 1, "k", "b2")).get(WAIT_S, TimeUnit.SECONDS);
                b.commitTransaction();
                out.put("b1", List.of(b1.partition(), b1.offset()));
                out.put("b2", List.of(b2.partition(), b2.offset()));

                try {
                    a.send(new ProducerRecord<>(topic, 0, "k", "a2")).get(WAIT_S, TimeUnit.SECONDS);
                    out.put("a_send", "ok");
                } catch (Exception e) {
                    out.put("a_send", failure(e));
                }
                try {
                    a.commitTransaction();
                    out.put("a_commit", "ok");
                } catch (Exception e) {
                    out.put("a_commit", failure(e));
                }
                // B goes on
                b.beginTransaction();
                RecordMetadata b3 = b.send(new ProducerRecord<>(topic, 2, "k", "b3")).get(WAIT_S, TimeUnit.SECONDS);
                b.commitTransaction();
                out.put("b3", List.of(b3.partition(), b3.offset()));
            } finally {
                a.close(Duration.ZERO);
                b.close(Duration.ofSeconds(5));
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            Map<String, Object> lso, hwm;
            do {
                Clients.sleep(100);
                lso = latest(admin, 3, IsolationLevel.READ_COMMITTED);
                hwm = latest(admin, 3, IsolationLevel.READ_UNCOMMITTED);
            } while (!lso.equals(hwm) && System.nanoTime() < deadline);
            out.put("lso", lso);
            out.put("hwm", hwm);
            out.put("read_committed", readAll(3, "read_committed"));
            out.put("read_uncommitted", readAll(3, "read_uncommitted"));
        }
        return out;
    }

    private TransactionScenarios() {}
}
