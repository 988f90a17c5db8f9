package kaas.e2e;

import static kaas.e2e.Clients.WAIT_S;
import static kaas.e2e.Clients.admin;
import static kaas.e2e.Clients.consumerProps;
import static kaas.e2e.Clients.producerProps;
import static kaas.e2e.Clients.topic;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
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

/** The producer: every compression codec with idempotence, and the three acks settings. */
final class ProducerScenarios {
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
            List<TopicPartition> tps = Clients.partitions(3);
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

    private ProducerScenarios() {}
}
