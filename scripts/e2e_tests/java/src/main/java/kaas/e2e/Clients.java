package kaas.e2e;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** What every scenario shares: the target, client configs, small waits, and JSON output. */
final class Clients {
    static final long WAIT_S = 30; // every single admin/producer future

    static String bootstrap;
    static String topic;

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

    static void createTopic(Admin admin, String name, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
    }

    /** `perPartition` acks=all records on each of partitions 0..partitions-1, values "p<i>-<n>",
     *  timestamps `firstTimestamp + n` (or the producer's clock when firstTimestamp is null). */
    static void produce(Properties p, int partitions, int perPartition, Long firstTimestamp) throws Exception {
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int part = 0; part < partitions; part++) {
                for (int n = 0; n < perPartition; n++) {
                    Long ts = firstTimestamp == null ? null : firstTimestamp + n;
                    fs.add(producer.send(new ProducerRecord<>(topic, part, ts, "k" + n, "p" + part + "-" + n)));
                }
            }
            producer.flush();
            for (Future<RecordMetadata> f : fs) f.get(WAIT_S, TimeUnit.SECONDS);
        }
    }

    /** "ok" when the future succeeds, else the simple class name of the exception it failed
     *  with (the error as the Java client surfaces it); the message goes to stderr. */
    static String outcome(KafkaFuture<?> f) throws InterruptedException, java.util.concurrent.TimeoutException {
        try {
            f.get(WAIT_S, TimeUnit.SECONDS);
            return "ok";
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            System.err.println("outcome: " + cause);
            return cause.getClass().getSimpleName();
        }
    }

    static List<Integer> partitionIds(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList());
    }

    static List<TopicPartition> partitions(int n) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < n; i++) tps.add(new TopicPartition(topic, i));
        return tps;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
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
            return ((Collection<?>) o).stream().map(Clients::json).collect(Collectors.joining(", ", "[", "]"));
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : o.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
            else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
            else sb.append(ch);
        }
        return sb.append('"').toString();
    }

    private Clients() {}
}
