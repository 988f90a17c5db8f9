package kaas.e2e;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A consume-transform-produce application with exactly-once semantics (KIP-98, KIP-447) on the
 * Java client, the counterpart of eos_app.py (same arguments, same stdout protocol, so
 * test_transactions.py drives either). Usage: EosCopy BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
 *
 * It reads INPUT (read_committed) in GROUP with a static member id and copies each record to
 * OUTPUT, same partition, key and headers, value prefixed with "eos:", plus a header
 * src="<partition>:<offset>". Each poll (at most MAX_POLL records) is one transaction: the copies
 * and the consumed offsets (sendOffsetsToTransaction with the consumer's group metadata) commit
 * together or not at all. Every instance uses the same transactional id, so a new one fences the
 * old one. The errors follow the Java client's documented pattern: fenced, out-of-order or
 * unauthorized is fatal (exit 3; the test starts a new instance), any other KafkaException aborts
 * the transaction and rewinds the consumer to the group's committed offsets. SIGTERM finishes
 * the transaction in flight and exits 0.
 *
 * stdout, one line each: "ready", "open N" (records produced and flushed, not committed; then a
 * PAUSE_MS pause so that a kill sent on this line lands inside the transaction), "committed N",
 * "aborted N WHY", "fatal WHY". Everything else goes to stderr.
 */
public final class EosCopy {
    static final int MAX_POLL = 250;
    static final long PAUSE_MS = 50;
    static volatile boolean stop = false;

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
        log(line);
    }

    static void log(String line) {
        System.err.println(System.currentTimeMillis() + " " + line);
        System.err.flush();
    }

    static boolean fatal(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof OutOfOrderSequenceException
            || e instanceof AuthorizationException || e instanceof FencedInstanceIdException
            || e instanceof UnsupportedVersionException;
    }

    static String oneLine(Throwable e) {
        return (e.getClass().getSimpleName() + ": " + e.getMessage()).replace('\n', ' ');
    }

    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: EosCopy BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID");
            System.exit(64);
        }
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3], txnId = args[4];
        CountDownLatch finished = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop = true;
            try {
                finished.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(0);
        }));
        Clients.bootstrap = bootstrap;
        Properties pp = Clients.producerProps("all");
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        Properties cp = Clients.consumerProps(group);
        cp.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, group + "-member");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(MAX_POLL));
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        // a restarted broker is back within a second or two
        for (Properties p : List.of(pp, cp)) p.put("reconnect.backoff.max.ms", "500");

        int rc = 0;
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
        try {
            producer.initTransactions();
            say("ready");
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> ps) {
                    log("revoked " + ps);
                }

                @Override
                public void onPartitionsAssigned(java.util.Collection<TopicPartition> ps) {
                    log("assigned " + ps);
                }
            });
            while (!stop) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        String src = r.partition() + ":" + r.offset();
                        byte[] value = r.value() == null ? null : concat("eos:".getBytes(StandardCharsets.UTF_8), r.value());
                        ProducerRecord<byte[], byte[]> copy = new ProducerRecord<>(output, r.partition(), r.key(), value);
                        for (Header h : r.headers()) copy.headers().add(h.key(), h.value());
                        copy.headers().add("src", src.getBytes(StandardCharsets.UTF_8));
                        producer.send(copy);
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.flush();
                    say("open " + records.count());
                    Thread.sleep(PAUSE_MS);
                    producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                    producer.commitTransaction();
                    say("committed " + records.count());
                } catch (KafkaException e) {
                    if (fatal(e)) throw e;
                    log("aborting after " + oneLine(e));
                    producer.abortTransaction();
                    rewind(consumer);
                    say("aborted " + records.count() + " " + oneLine(e));
                }
            }
        } catch (Exception e) {
            say("fatal " + oneLine(e));
            rc = 3;
        }
        if (rc == 0) {
            consumer.close(Duration.ofSeconds(10));
            producer.close(Duration.ofSeconds(10));
            finished.countDown();
        } else {
            finished.countDown();
            Runtime.getRuntime().halt(rc);
        }
        Runtime.getRuntime().halt(0);
    }

    /** Seeks every assigned partition back to the group's committed offset (the start without one). */
    static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        Set<TopicPartition> assigned = new HashSet<>(consumer.assignment());
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata o = committed.get(tp);
            if (o == null) consumer.seekToBeginning(List.of(tp));
            else consumer.seek(tp, o.offset());
        }
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] out = new byte[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private EosCopy() {}
}
