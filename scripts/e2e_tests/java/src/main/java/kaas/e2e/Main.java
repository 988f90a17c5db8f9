package kaas.e2e;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java Kafka client against kaas. Usage: Main SCENARIO BOOTSTRAP TOPIC
 * Scenarios: produce-consume, acks, admin, static-member. Prints one JSON line of what
 * happened on stdout; exits 1 on any error or mismatch, 2 when the watchdog fires.
 */
public final class Main {
    static final long WAIT_S = 30; // every single admin/producer future
    static final long SCENARIO_DEADLINE_S = 100; // the whole program (watchdog)

    static String bootstrap;
    static String topic;

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Main produce-consume|acks|admin|static-member BOOTSTRAP TOPIC");
            System.exit(64);
        }
        bootstrap = args[1];
        topic = args[2];
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(SCENARIO_DEADLINE_S * 1000);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("FAIL: watchdog: scenario still running after " + SCENARIO_DEADLINE_S + "s");
            Runtime.getRuntime().halt(2);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        Map<String, Object> out;
        try {
            switch (args[0]) {
                case "produce-consume": out = produceConsume(); break;
                case "acks": out = acks(); break;
                case "admin": out = adminScenario(); break;
                case "static-member": out = staticMember(); break;
                default: throw new IllegalArgumentException("unknown scenario " + args[0]);
            }
        } catch (Throwable t) {
            System.err.println("FAIL: " + args[0] + ":");
            t.printStackTrace();
            System.out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }
        System.out.println(json(out));
        System.out.flush();
        Runtime.getRuntime().halt(0); // do not wait on client threads still closing
    }

    // ---- scenarios ----

    /** Idempotent acks=all producers, one per compression codec, then a cooperative-sticky
     *  classic group reads everything exactly once and commits synchronously. */
    static Map<String, Object> produceConsume() throws Exception {
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        int perCodec = 500;
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
            Set<String> expected = new HashSet<>();
            Map<String, Object> acked = new LinkedHashMap<>(); // codec -> records acked with an offset
            for (String codec : codecs) {
                Properties p = producerProps("all");
                p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
                p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
                p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                    for (int i = 0; i < perCodec; i++) {
                        // highly compressible values, so a codec really changes the batch
                        String value = codec + "-" + i + "-" + "abc".repeat(i % 40);
                        expected.add(value);
                        fs.add(producer.send(new ProducerRecord<>(topic, "k-" + i, value)));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> f : fs) {
                        RecordMetadata md = f.get(WAIT_S, TimeUnit.SECONDS);
                        if (!md.hasOffset()) throw new IllegalStateException(codec + ": no offset in ack: " + md);
                    }
                    acked.put(codec, fs.size());
                }
            }
            out.put("produced", expected.size());
            out.put("codecs", acked);

            String group = topic + "-group";
            Properties c = consumerProps(group);
            c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
            c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            Set<String> seen = new HashSet<>();
            int duplicates = 0, unexpected = 0, consumed = 0;
            Set<TopicPartition> assigned;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (seen.size() < expected.size() && System.nanoTime() < deadline) {
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(500));
                    for (ConsumerRecord<String, String> r : recs) {
                        consumed++;
                        if (!expected.contains(r.value())) unexpected++;
                        else if (!seen.add(r.value())) duplicates++;
                    }
                    if (!recs.isEmpty()) consumer.commitSync(Duration.ofSeconds(WAIT_S));
                }
                // a last poll: anything beyond what was produced would be a duplicate
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    consumed++;
                    if (!expected.contains(r.value())) unexpected++;
                    else if (!seen.add(r.value())) duplicates++;
                }
                consumer.commitSync(Duration.ofSeconds(WAIT_S));
                assigned = consumer.assignment();
                // while still a member: the group runs the protocol this consumer asked for
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups()
                    .get(group).get(WAIT_S, TimeUnit.SECONDS);
                out.put("group_assignor", d.partitionAssignor());
                out.put("group_members", d.members().size());
            }
            out.put("consumed", consumed);
            out.put("distinct", seen.size());
            out.put("duplicates", duplicates);
            out.put("unexpected", unexpected);
            out.put("assigned_partitions", assigned.size());
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS);
            out.put("committed", committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
            out.put("committed_partitions", committed.size());
        }
        return out;
    }

    /** 100 records each with acks=0, acks=1 and acks=all, then read back from the start. */
    static Map<String, Object> acks() throws Exception {
        String[] settings = {"0", "1", "all"};
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> acked = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
            for (String acks : settings) {
                Properties p = producerProps(acks);
                p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false"); // idempotence needs acks=all
                int withOffset = 0;
                try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                    List<Future<RecordMetadata>> fs = new ArrayList<>();
                    for (int i = 0; i < 100; i++) {
                        fs.add(producer.send(new ProducerRecord<>(topic, "acks" + acks + "-" + i)));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> f : fs) {
                        if (f.get(WAIT_S, TimeUnit.SECONDS).hasOffset()) withOffset++;
                    }
                }
                acked.put(acks, withOffset); // acks=0 answers carry no offset
            }
            out.put("acked_with_offset", acked);
            List<TopicPartition> tps = List.of(0, 1, 2).stream().map(i -> new TopicPartition(topic, i)).collect(Collectors.toList());
            Map<String, Integer> counts = new TreeMap<>();
            for (String acks : settings) counts.put(acks, 0);
            int duplicates = 0;
            Set<String> seen = new HashSet<>();
            Properties c = consumerProps(null);
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(WAIT_S));
                out.put("end_offsets_sum", end.values().stream().mapToLong(Long::longValue).sum());
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (System.nanoTime() < deadline) {
                    boolean done = true;
                    for (TopicPartition tp : tps) done &= consumer.position(tp, Duration.ofSeconds(WAIT_S)) >= end.get(tp);
                    if (done) break;
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        if (!seen.add(r.value())) duplicates++;
                        String acks = r.value().substring(4, r.value().indexOf('-'));
                        counts.merge(acks, 1, Integer::sum);
                    }
                }
            }
            out.put("read_back", counts);
            out.put("duplicates", duplicates);
        }
        return out;
    }

    /** One pass over the admin API a Java operator would use. */
    @SuppressWarnings("deprecation") // listConsumerGroups: still the consumer-group call in 4.1
    static Map<String, Object> adminScenario() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicPartition tp0 = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            NewTopic nt = new NewTopic(topic, 3, (short) 1).configs(Map.of("retention.ms", "123456789"));
            admin.createTopics(List.of(nt)).all().get(WAIT_S, TimeUnit.SECONDS);
            out.put("created", true);
            out.put("partitions", describePartitions(admin));

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            out.put("config_entries", cfg.entries().size());
            out.put("config_retention_ms", cfg.get("retention.ms") == null ? null : cfg.get("retention.ms").value());
            out.put("config_cleanup_policy", cfg.get("cleanup.policy") == null ? null : cfg.get("cleanup.policy").value());

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get(WAIT_S, TimeUnit.SECONDS);
            out.put("partitions_after_increase", describePartitions(admin));

            // an idempotent producer writes 10 records to partition 0
            Properties p = producerProps("all");
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < 10; i++) fs.add(producer.send(new ProducerRecord<>(topic, 0, "k", "v" + i)));
                producer.flush();
                for (Future<RecordMetadata> f : fs) f.get(WAIT_S, TimeUnit.SECONDS);
            }
            Collection<ProducerState> producers = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                .get(WAIT_S, TimeUnit.SECONDS).activeProducers();
            out.put("producers", producers.size());
            out.put("producer_ids", producers.stream().map(ProducerState::producerId).collect(Collectors.toList()));
            out.put("producer_last_sequences", producers.stream().map(ProducerState::lastSequence).collect(Collectors.toList()));

            DeletedRecords del = admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(4)))
                .lowWatermarks().get(tp0).get(WAIT_S, TimeUnit.SECONDS);
            out.put("delete_records_low_watermark", del.lowWatermark());
            out.put("earliest_offset_p0", admin.listOffsets(Map.of(tp0, OffsetSpec.earliest())).partitionResult(tp0)
                .get(WAIT_S, TimeUnit.SECONDS).offset());
            out.put("latest_offset_p0", admin.listOffsets(Map.of(tp0, OffsetSpec.latest())).partitionResult(tp0)
                .get(WAIT_S, TimeUnit.SECONDS).offset());

            // a group member that consumed partition 0 and committed offset 7
            String group = topic + "-group";
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(group))) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (consumer.assignment().isEmpty() && System.nanoTime() < deadline) consumer.poll(Duration.ofMillis(200));
                if (consumer.assignment().isEmpty()) throw new IllegalStateException("no assignment within 30s");
                consumer.commitSync(Map.of(tp0, new OffsetAndMetadata(7, "admin-e2e")), Duration.ofSeconds(WAIT_S));
                out.put("group_listed", admin.listConsumerGroups().all().get(WAIT_S, TimeUnit.SECONDS).stream()
                    .map(ConsumerGroupListing::groupId).anyMatch(group::equals));
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(WAIT_S, TimeUnit.SECONDS);
                out.put("group_state", String.valueOf(d.groupState()));
                out.put("group_members", d.members().size());
                out.put("group_assignor", d.partitionAssignor());
                out.put("group_assigned_partitions", d.members().stream()
                    .mapToInt(m -> m.assignment().topicPartitions().size()).sum());
            }
            OffsetAndMetadata om = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                .get(WAIT_S, TimeUnit.SECONDS).get(tp0);
            out.put("group_committed_p0", om == null ? null : om.offset());
            out.put("group_committed_metadata", om == null ? null : om.metadata());

            admin.deleteTopics(List.of(topic)).all().get(WAIT_S, TimeUnit.SECONDS);
            out.put("deleted", !admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic));
        }
        return out;
    }

    /** A static member (group.instance.id) commits and closes (a static member does not
     *  leave the group on close); a new consumer with the same instance id takes its
     *  place and resumes from the committed offset. */
    static Map<String, Object> staticMember() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicPartition tp = new TopicPartition(topic, 0);
        String group = topic + "-group";
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
            Properties p = producerProps("all");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < 30; i++) fs.add(producer.send(new ProducerRecord<>(topic, 0, null, "v" + i)));
                producer.flush();
                for (Future<RecordMetadata> f : fs) f.get(WAIT_S, TimeUnit.SECONDS);
            }
            Properties c = consumerProps(group);
            c.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-e2e-1");
            c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000"); // outlives the restart below
            c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");

            List<Long> first = new ArrayList<>();
            String firstMember;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (first.isEmpty() && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) first.add(r.offset());
                }
                if (first.isEmpty()) throw new IllegalStateException("first static member read nothing in 30s");
                long next = first.get(first.size() - 1) + 1;
                consumer.commitSync(Map.of(tp, new OffsetAndMetadata(next)), Duration.ofSeconds(WAIT_S));
                out.put("committed", next);
                firstMember = consumer.groupMetadata().memberId();
            }
            out.put("first_read", first.size());
            out.put("first_offsets_start", first.get(0));

            List<Long> second = new ArrayList<>();
            String secondMember;
            long t0 = System.nanoTime();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                consumer.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (second.isEmpty() && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) second.add(r.offset());
                }
                if (second.isEmpty()) throw new IllegalStateException("second static member read nothing in 30s");
                out.put("rejoin_ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
                secondMember = consumer.groupMetadata().memberId();
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(WAIT_S, TimeUnit.SECONDS);
                out.put("members", d.members().size());
                out.put("member_instance_ids", d.members().stream()
                    .map(m -> m.groupInstanceId().orElse("")).collect(Collectors.toList()));
                out.put("member_is_second", d.members().stream().map(MemberDescription::consumerId)
                    .anyMatch(secondMember::equals));
            }
            out.put("resumed_at", second.get(0));
            out.put("second_read", second.size());
            out.put("member_id_changed", !firstMember.equals(secondMember));
        }
        return out;
    }

    // ---- helpers ----

    static int describePartitions(Admin admin) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS).get(topic);
        return d.partitions().size();
    }

    static Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kaas-e2e-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static Properties producerProps(String acks) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kaas-e2e-java-producer");
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    static Properties consumerProps(String group) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, "kaas-e2e-java-consumer");
        if (group != null) c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return c;
    }

    /** Enough JSON for maps, lists, strings, numbers, booleans and null. */
    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map) {
            StringBuilder sb = new StringBuilder("{");
            boolean firstEntry = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (!firstEntry) sb.append(", ");
                firstEntry = false;
                sb.append(json(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (o instanceof Collection) {
            return ((Collection<?>) o).stream().map(Main::json).collect(Collectors.joining(", ", "[", "]"));
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
            else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
            else sb.append(ch);
        }
        return sb.append('"').toString();
    }

    private Main() {}
}
