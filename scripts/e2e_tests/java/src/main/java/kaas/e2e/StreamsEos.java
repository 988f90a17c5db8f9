package kaas.e2e;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams application with processing.guarantee=exactly_once_v2, for
 * test_kafka_streams.py. Usage:
 *
 *   StreamsEos BOOTSTRAP INPUT COPY COUNTS APPLICATION_ID STATE_DIR RECORDS_PER_SECOND DEADLINE_S
 *
 * The topology copies every INPUT record (string key and value) to COPY, and counts the
 * records per key (groupByKey().count(), a store with a compacted changelog topic that
 * Streams creates), writing each key's count as a decimal string to COUNTS.
 * RECORDS_PER_SECOND paces the processing (0: as fast as it goes), so that a test can
 * act while a known share of the input is still to be processed.
 *
 * The input is written before the application starts. A watcher thread reads the
 * group's committed offsets (stable ones: an open transaction's offsets do not count)
 * and prints "progress COMMITTED TOTAL" on stdout whenever they move; once they reach
 * the input's end offsets the application closes cleanly and prints one JSON line of
 * what it saw, and exits 0. Exit 1: Streams reached ERROR (or could not start), 2: the
 * deadline passed first, 3: close() did not finish.
 */
public final class StreamsEos {
    private static final long ADMIN_CALL_MS = 3000;

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println("usage: StreamsEos BOOTSTRAP INPUT COPY COUNTS APPLICATION_ID STATE_DIR"
                + " RECORDS_PER_SECOND DEADLINE_S");
            System.exit(64);
        }
        String bootstrap = args[0], input = args[1], copy = args[2], counts = args[3], appId = args[4];
        String stateDir = args[5];
        long perSecond = Long.parseLong(args[6]);
        long deadlineMs = Long.parseLong(args[7]) * 1000;
        long t0 = System.currentTimeMillis();

        Map<String, Object> out = new LinkedHashMap<>();
        List<String> states = Collections.synchronizedList(new ArrayList<>());
        List<String> threadFailures = Collections.synchronizedList(new ArrayList<>());
        out.put("states", states);
        out.put("thread_failures", threadFailures);

        try (Admin admin = admin(bootstrap)) {
            Map<TopicPartition, Long> ends = endOffsets(admin, input);
            long total = ends.values().stream().mapToLong(Long::longValue).sum();
            out.put("input_end_offsets", byPartition(ends));

            KafkaStreams streams = new KafkaStreams(topology(input, copy, counts, perSecond),
                streamsProps(bootstrap, appId, stateDir));
            CountDownLatch failed = new CountDownLatch(1);
            streams.setStateListener((now, before) -> {
                states.add(String.format("%.1fs %s->%s", (System.currentTimeMillis() - t0) / 1000.0, before, now));
                if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) failed.countDown();
            });
            // A stream thread that dies of an exception Streams did not handle itself is
            // replaced (its tasks are then recovered from the last commit); each such death
            // is reported, so the test can tell it from a clean run.
            streams.setUncaughtExceptionHandler(e -> {
                threadFailures.add(String.format("%.1fs %s", (System.currentTimeMillis() - t0) / 1000.0, e));
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
            });
            streams.start();

            // watch the group's stable committed offsets until they reach the input's end
            long lastPrinted = -1;
            boolean done = false;
            int watchErrors = 0;
            Map<TopicPartition, Long> seen = new TreeMap<>(StreamsEos::compare);
            while (!done) {
                if (failed.await(200, TimeUnit.MILLISECONDS)) break;
                if (System.currentTimeMillis() - t0 > deadlineMs) break;
                Map<TopicPartition, Long> committed;
                try {
                    committed = committedOffsets(admin, appId, ends.keySet());
                } catch (Exception e) {
                    watchErrors++; // the broker may be down or restarting: asked again
                    continue;
                }
                // a partition whose offsets are unstable at the moment (an open transaction
                // commits them) is left out of the answer: it keeps what was seen before
                committed.replaceAll((tp, o) -> Math.max(o, seen.getOrDefault(tp, 0L)));
                seen.putAll(committed);
                long sum = committed.values().stream().mapToLong(Long::longValue).sum();
                if (sum != lastPrinted) {
                    System.out.println("progress " + sum + " " + total);
                    System.out.flush();
                    lastPrinted = sum;
                }
                done = committed.equals(ends);
            }
            out.put("done", done);
            out.put("watch_errors", watchErrors);
            out.put("processed_ms", System.currentTimeMillis() - t0);
            out.put("state_at_end", streams.state().toString());
            boolean closed = streams.close(Duration.ofSeconds(60));
            out.put("closed", closed);
            out.put("elapsed_ms", System.currentTimeMillis() - t0);
            if (done) {
                // what the group holds once the application is gone
                out.put("committed_after_close", byPartition(committedOffsets(admin, appId, ends.keySet())));
                out.put("changelog", changelogFacts(admin, appId + "-counts-changelog"));
            }
            System.out.println(Clients.json(out));
            System.out.flush();
            int rc = !done ? (failed.getCount() == 0 ? 1 : 2) : (closed ? 0 : 3);
            Runtime.getRuntime().halt(rc);
        } catch (Throwable t) {
            System.err.println("FAIL: StreamsEos:");
            t.printStackTrace();
            out.put("exception", t.toString());
            System.out.println(Clients.json(out));
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
    }

    static org.apache.kafka.streams.Topology topology(String input, String copy, String counts, long perSecond) {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> in = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> paced = perSecond > 0 ? in.peek(pacer(perSecond)) : in;
        paced.to(copy, Produced.with(Serdes.String(), Serdes.String()));
        paced.groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(n -> Long.toString(n))
            .to(counts, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    /** Sleeps 10 ms every perSecond/100 records: about perSecond records a second at most. */
    static org.apache.kafka.streams.kstream.ForeachAction<String, String> pacer(long perSecond) {
        long every = Math.max(1, perSecond / 100);
        AtomicLong n = new AtomicLong();
        return (k, v) -> {
            if (n.incrementAndGet() % every == 0) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        };
    }

    static Properties streamsProps(String bootstrap, String appId, String stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName());
        return p;
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kaas-e2e-streams-watch");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, Long.toString(ADMIN_CALL_MS));
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000"); // the watch's calls: ADMIN_CALL_MS
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        return Admin.create(p);
    }

    static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        Map<TopicPartition, OffsetSpec> q = new LinkedHashMap<>();
        d.partitions().forEach(p -> q.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest()));
        Map<TopicPartition, Long> out = new TreeMap<>(StreamsEos::compare);
        admin.listOffsets(q).all().get(30, TimeUnit.SECONDS).forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }

    /** The group's stable committed offsets (KIP-447), 0 where there is none yet (or where
     *  the group answers UNSTABLE_OFFSET_COMMIT: a transaction that commits it is open). */
    static Map<TopicPartition, Long> committedOffsets(Admin admin, String group, Iterable<TopicPartition> tps)
            throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got = admin
            .listConsumerGroupOffsets(group, new ListConsumerGroupOffsetsOptions().requireStable(true).timeoutMs((int) ADMIN_CALL_MS))
            .partitionsToOffsetAndMetadata().get(ADMIN_CALL_MS + 1000, TimeUnit.MILLISECONDS);
        Map<TopicPartition, Long> out = new TreeMap<>(StreamsEos::compare);
        for (TopicPartition tp : tps) {
            OffsetAndMetadata om = got.get(tp);
            out.put(tp, om == null ? 0L : om.offset());
        }
        return out;
    }

    /** What Streams asked for its count store's changelog topic: partitions and cleanup.policy. */
    static Map<String, Object> changelogFacts(Admin admin, String topic) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
        out.put("partitions", d.partitions().size());
        org.apache.kafka.common.config.ConfigResource r =
            new org.apache.kafka.common.config.ConfigResource(org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic);
        out.put("cleanup.policy", admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r)
            .get("cleanup.policy").value());
        return out;
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> m) {
        Map<String, Object> out = new TreeMap<>();
        m.forEach((tp, o) -> out.put(String.valueOf(tp.partition()), o));
        return out;
    }

    private static int compare(TopicPartition a, TopicPartition b) {
        int c = a.topic().compareTo(b.topic());
        return c != 0 ? c : Integer.compare(a.partition(), b.partition());
    }

    private StreamsEos() {}
}
