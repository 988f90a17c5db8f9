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
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/** Transactions with the Java client's defaults: the client speaks the transaction version the
 *  broker finalizes (KIP-890: 2 when transaction.version is 2, else 1), and each scenario reports
 *  that level and, from DescribeProducers, the producer epochs its transactions left behind. */
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
            out.put("producers", producers(admin, 3));
        }
        return out;
    }

    /** DescribeProducers on partitions 0..n-1: partition -> [[producer id, epoch], ...]. Under
     *  transaction version 2 every transaction end bumps the epoch, and its markers carry the
     *  bumped one (so the partition's producer is at that epoch); under version 1 the epoch
     *  stays where InitProducerId put it. */
    static Map<String, Object> producers(Admin admin, int n) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        List<TopicPartition> tps = Clients.partitions(n);
        var result = admin.describeProducers(tps);
        for (TopicPartition tp : tps) {
            List<Object> ps = new ArrayList<>();
            for (ProducerState s : result.partitionResult(tp).get(WAIT_S, TimeUnit.SECONDS).activeProducers()) {
                ps.add(List.of(s.producerId(), s.producerEpoch()));
            }
            out.put(String.valueOf(tp.partition()), ps);
        }
        return out;
    }

    /** Only the finalized transaction version and DescribeProducers of partitions 0-2 (of a
     *  topic another program wrote, e.g. the EOS copy's output). */
    static Map<String, Object> describeProducers() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            out.put("transaction_version", transactionVersion(admin));
            out.put("producers", producers(admin, 3));
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
            out.put("producers", producers(admin, 3));
        }
        return out;
    }

    static final int REAPER_TIMEOUT_MS = 4000; // the abandoned transaction's transaction.timeout.ms
    static final long REAPER_WAIT_S = 50; // Kafka checks every 10 s; kaas as configured

    /** R (transaction.timeout.ms REAPER_TIMEOUT_MS) writes two records to each of 3 partitions in
     *  a transaction and then stops: it stays open, and never commits, aborts or closes (close()
     *  would abort). S commits one record per partition behind it. While R's transaction is
     *  open the LSO stays at 0; the coordinator's timeout reaper must abort it (waited for,
     *  bounded), after which the LSO is the end; then R wakes up and tries to commit. */
    static Map<String, Object> reaper() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 3);
            out.put("transaction_version", transactionVersion(admin));
            Properties rp = txnProducerProps(topic + "-abandoned");
            rp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(REAPER_TIMEOUT_MS));
            KafkaProducer<String, String> r = new KafkaProducer<>(rp);
            r.initTransactions();
            r.beginTransaction();
            long began = System.nanoTime();
            List<Object> rWritten = new ArrayList<>();
            for (int p = 0; p < 3; p++) {
                for (int i = 0; i < 2; i++) {
                    RecordMetadata md = r.send(new ProducerRecord<>(topic, p, "k", "r" + p + "-" + i)).get(WAIT_S, TimeUnit.SECONDS);
                    rWritten.add(List.of(md.partition(), md.offset()));
                }
            }
            out.put("r_written", rWritten);
            // r now stops
            List<Object> sWritten = new ArrayList<>();
            try (KafkaProducer<String, String> s = new KafkaProducer<>(txnProducerProps(topic + "-live"))) {
                s.initTransactions();
                s.beginTransaction();
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int p = 0; p < 3; p++) fs.add(s.send(new ProducerRecord<>(topic, p, "k", "s" + p)));
                s.commitTransaction();
                for (Future<RecordMetadata> f : fs) {
                    RecordMetadata md = f.get(WAIT_S, TimeUnit.SECONDS);
                    sWritten.add(List.of(md.partition(), md.offset()));
                }
            }
            out.put("s_written", sWritten);
            // S's marker may still be on its way: wait (bounded) for the high watermark
            Map<String, Object> want = Map.of("0", 4L, "1", 4L, "2", 4L);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            Map<String, Object> hwm;
            do {
                hwm = latest(admin, 3, IsolationLevel.READ_UNCOMMITTED);
            } while (!hwm.equals(want) && System.nanoTime() < deadline && sleepTrue(50));
            out.put("hwm_before", hwm);
            Map<String, Object> lsoBefore = latest(admin, 3, IsolationLevel.READ_COMMITTED);
            double elapsed = (System.nanoTime() - began) / 1e9;
            // only meaningful well inside R's timeout (the test skips it otherwise)
            out.put("lso_before", lsoBefore);
            out.put("lso_before_at_s", elapsed);
            out.put("read_committed_before", elapsed < REAPER_TIMEOUT_MS / 1000.0 * 0.75
                ? readAll(3, "read_committed") : null);

            Map<String, Object> end = Map.of("0", 5L, "1", 5L, "2", 5L); // + R's abort marker
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(REAPER_WAIT_S);
            Map<String, Object> lso;
            do {
                lso = latest(admin, 3, IsolationLevel.READ_COMMITTED);
            } while (!lso.equals(end) && System.nanoTime() < deadline && sleepTrue(200));
            out.put("aborted_after_s", (System.nanoTime() - began) / 1e9);
            out.put("lso", lso);
            out.put("hwm", latest(admin, 3, IsolationLevel.READ_UNCOMMITTED));
            out.put("read_committed", readAll(3, "read_committed"));
            out.put("read_uncommitted", readAll(3, "read_uncommitted"));
            out.put("producers", producers(admin, 3));
            // R wakes up: its transaction was aborted under a bumped epoch
            try {
                r.commitTransaction();
                out.put("r_commit", "ok");
            } catch (Exception e) {
                out.put("r_commit", failure(e));
            }
            r.close(Duration.ZERO);
            out.put("lso_after_r", latest(admin, 3, IsolationLevel.READ_COMMITTED));
        }
        return out;
    }

    static boolean sleepTrue(long ms) {
        Clients.sleep(ms);
        return true;
    }

    private TransactionScenarios() {}
}
