package kaas.e2e;

import static kaas.e2e.Clients.WAIT_S;
import static kaas.e2e.Clients.admin;
import static kaas.e2e.Clients.consumerProps;
import static kaas.e2e.Clients.outcome;
import static kaas.e2e.Clients.partitionIds;
import static kaas.e2e.Clients.topic;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/** The AdminClient: topics, configs, groups and their offsets, DeleteRecords, DescribeProducers.
 *  Errors are recorded as the exception class the client surfaces ("ok" when none). */
final class AdminScenarios {

    /** Create, list, describe, grow, delete; and the errors for an existing topic, a bad name,
     *  a bad partition count, too many replicas, shrinking, and a topic that is gone. */
    static Map<String, Object> topics() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            NewTopic nt = new NewTopic(topic, 3, (short) 1).configs(Map.of("retention.ms", "123456789"));
            out.put("create", outcome(admin.createTopics(List.of(nt)).all()));
            out.put("listed", listed(admin));
            TopicDescription d = describe(admin);
            Collection<Node> nodes = admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS);
            int nodeId = nodes.iterator().next().id();
            out.put("cluster_nodes", nodes.size());
            out.put("partitions", d.partitions().stream().map(TopicPartitionInfo::partition).collect(Collectors.toList()));
            out.put("leaders_are_the_node", d.partitions().stream().allMatch(p -> p.leader() != null
                && p.leader().id() == nodeId && p.replicas().size() == 1 && p.isr().size() == 1));
            out.put("internal", d.isInternal());
            out.put("has_topic_id", d.topicId() != null && !d.topicId().equals(org.apache.kafka.common.Uuid.ZERO_UUID));

            out.put("create_existing", outcome(admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all()));
            out.put("create_invalid_name", outcome(admin.createTopics(
                List.of(new NewTopic("bad/name!" + topic, 1, (short) 1))).all()));
            out.put("create_zero_partitions", outcome(admin.createTopics(
                List.of(new NewTopic(topic + "-zero", 0, (short) 1))).all()));
            out.put("create_three_replicas", outcome(admin.createTopics(
                List.of(new NewTopic(topic + "-rf3", 1, (short) 3))).all()));

            out.put("increase_to_5", outcome(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all()));
            out.put("partitions_after_increase", describe(admin).partitions().size());
            out.put("shrink_to_2", outcome(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all()));

            out.put("delete", outcome(admin.deleteTopics(List.of(topic)).all()));
            // a broker's metadata may trail the controller by a moment after the delete
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (listed(admin) && System.nanoTime() < deadline) Clients.sleep(100);
            out.put("listed_after_delete", listed(admin));
            out.put("describe_deleted", outcome(admin.describeTopics(List.of(topic)).allTopicNames()));
            out.put("delete_again", outcome(admin.deleteTopics(List.of(topic)).all()));
        }
        return out;
    }

    /** DescribeConfigs of a topic created with one override; IncrementalAlterConfigs of it: SET,
     *  APPEND to a list, DELETE back to the default, an invalid value and an unknown name. */
    static Map<String, Object> configs() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            NewTopic nt = new NewTopic(topic, 1, (short) 1).configs(Map.of("retention.ms", "123456789"));
            admin.createTopics(List.of(nt)).all().get(WAIT_S, TimeUnit.SECONDS);
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            out.put("entries", cfg.entries().size());
            out.put("retention_ms", entry(cfg, "retention.ms"));
            out.put("cleanup_policy", entry(cfg, "cleanup.policy"));
            out.put("max_message_bytes_present", cfg.get("max.message.bytes") != null);
            // Documentation comes only when asked for (DescribeConfigs v3+).
            out.put("documentation_unasked", cfg.get("retention.ms").documentation() != null);
            Config documented = admin.describeConfigs(List.of(res), new DescribeConfigsOptions().includeDocumentation(true))
                .all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            out.put("documented_entries", documented.entries().stream()
                .filter(e -> e.documentation() != null && !e.documentation().isEmpty()).count());

            AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
            out.put("incremental_alter", outcome(admin.incrementalAlterConfigs(Map.of(res, List.of(set))).all()));
            Config after = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            out.put("retention_ms_after_alter", entry(after, "retention.ms"));

            AlterConfigOp append = new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND);
            AlterConfigOp reset = new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE);
            out.put("append_and_delete", outcome(admin.incrementalAlterConfigs(Map.of(res, List.of(append, reset))).all()));
            AlterConfigOp bad = new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET);
            out.put("invalid_value", outcome(admin.incrementalAlterConfigs(Map.of(res, List.of(bad))).all()));
            AlterConfigOp unknown = new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET);
            out.put("unknown_name", outcome(admin.incrementalAlterConfigs(Map.of(res, List.of(unknown))).all()));
            // An accepted change reaches DescribeConfigs a moment later on Kafka (its broker
            // applies it from the metadata log), so read until it shows, boundedly.
            Config last = null;
            for (int i = 0; i < 100; i++) {
                last = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
                ConfigEntry policy = last.get("cleanup.policy");
                if (policy != null && "delete,compact".equals(policy.value())) break;
                Thread.sleep(100);
            }
            out.put("cleanup_policy_after_append", entry(last, "cleanup.policy"));
            out.put("retention_ms_after_delete", entry(last, "retention.ms"));

            ConfigResource missing = new ConfigResource(ConfigResource.Type.TOPIC, topic + "-missing");
            out.put("describe_missing_topic", outcome(admin.describeConfigs(List.of(missing)).all()));
        }
        return out;
    }

    /** Dynamic broker configs (KIP-226) on the cluster-wide default (ConfigResource(BROKER, "")):
     *  a static config refused, message.max.bytes set there (to its default value: Kafka's node is
     *  shared), seen with its source on the default resource, on the broker and as a new topic's
     *  default, then deleted again. */
    static Map<String, Object> brokerConfigs() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            String id = String.valueOf(admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS)
                .iterator().next().id());
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
            AlterConfigOp fixed = new AlterConfigOp(new ConfigEntry("num.partitions", "3"), AlterConfigOp.OpType.SET);
            out.put("static_refused", outcome(admin.incrementalAlterConfigs(Map.of(cluster, List.of(fixed))).all()));
            AlterConfigOp set = new AlterConfigOp(new ConfigEntry("message.max.bytes", "1048588"), AlterConfigOp.OpType.SET);
            out.put("set_default", outcome(admin.incrementalAlterConfigs(Map.of(cluster, List.of(set))).all()));
            // Kafka's broker applies it from the metadata log a moment later: read until it shows.
            Config seen = null;
            for (int i = 0; i < 100; i++) {
                seen = admin.describeConfigs(List.of(broker)).all().get(WAIT_S, TimeUnit.SECONDS).get(broker);
                ConfigEntry e = seen.get("message.max.bytes");
                if (e != null && e.source() == ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) break;
                Thread.sleep(100);
            }
            out.put("broker_message_max_bytes", entry(seen, "message.max.bytes"));
            Config dflt = admin.describeConfigs(List.of(cluster)).all().get(WAIT_S, TimeUnit.SECONDS).get(cluster);
            out.put("default_message_max_bytes", entry(dflt, "message.max.bytes"));
            out.put("default_lists_retention_ms", dflt.get("log.retention.ms") != null);
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config t = admin.describeConfigs(List.of(res)).all().get(WAIT_S, TimeUnit.SECONDS).get(res);
            out.put("topic_max_message_bytes", entry(t, "max.message.bytes"));
            AlterConfigOp delete = new AlterConfigOp(new ConfigEntry("message.max.bytes", null), AlterConfigOp.OpType.DELETE);
            out.put("delete_default", outcome(admin.incrementalAlterConfigs(Map.of(cluster, List.of(delete))).all()));
            for (int i = 0; i < 100; i++) {
                seen = admin.describeConfigs(List.of(broker)).all().get(WAIT_S, TimeUnit.SECONDS).get(broker);
                ConfigEntry e = seen.get("message.max.bytes");
                if (e != null && e.source() != ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) break;
                Thread.sleep(100);
            }
            out.put("broker_message_max_bytes_after_delete", entry(seen, "message.max.bytes"));
        }
        return out;
    }

    /** ListOffsets (earliest, latest, by timestamp, max timestamp); a consumer group seen by
     *  ListGroups/DescribeGroups/OffsetFetch while it runs and once it is empty; the errors for
     *  deleting or rewriting an active group; AlterConsumerGroupOffsets (a new member starts
     *  there); DeleteConsumerGroupOffsets; DeleteGroups. */
    @SuppressWarnings("deprecation") // listConsumerGroups: still the consumer-group call in 4.1
    static Map<String, Object> groupsAndOffsets() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String group = topic + "-group";
        TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
        long t0 = System.currentTimeMillis() - 60_000;
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 2);
            Clients.produce(Clients.producerProps("all"), 2, 10, t0); // timestamps t0 .. t0+9

            out.put("earliest", offset(admin, tp0, OffsetSpec.earliest()));
            out.put("latest", offset(admin, tp0, OffsetSpec.latest()));
            out.put("for_timestamp_t0_plus_5", offset(admin, tp0, OffsetSpec.forTimestamp(t0 + 5)));
            out.put("for_timestamp_between", offset(admin, tp0, OffsetSpec.forTimestamp(t0 + 4)));
            out.put("for_timestamp_future", offset(admin, tp0, OffsetSpec.forTimestamp(t0 + 3_600_000)));
            out.put("max_timestamp", offset(admin, tp0, OffsetSpec.maxTimestamp()));

            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(group))) {
                c.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (c.assignment().size() < 2 && System.nanoTime() < deadline) c.poll(Duration.ofMillis(100));
                if (c.assignment().size() < 2) throw new IllegalStateException("no assignment within 30s");
                c.commitSync(Map.of(tp0, new OffsetAndMetadata(7, "e2e-meta"), tp1, new OffsetAndMetadata(3)),
                    Duration.ofSeconds(WAIT_S));
                Collection<ConsumerGroupListing> listings = admin.listConsumerGroups().all().get(WAIT_S, TimeUnit.SECONDS);
                out.put("listed_while_active", listings.stream().map(ConsumerGroupListing::groupId).anyMatch(group::equals));
                out.put("listed_state", listings.stream().filter(l -> l.groupId().equals(group))
                    .map(l -> String.valueOf(l.groupState().orElse(null))).findFirst().orElse(null));
                ConsumerGroupDescription d = describeGroup(admin, group);
                out.put("state_while_active", String.valueOf(d.groupState()));
                out.put("members_while_active", d.members().size());
                out.put("assignor", d.partitionAssignor());
                out.put("member_partitions", d.members().stream()
                    .map(m -> partitionIds(m.assignment().topicPartitions())).collect(Collectors.toList()));
                out.put("member_client_id", d.members().stream().map(m -> m.clientId()).findFirst().orElse(null));
                out.put("member_host_set", d.members().stream().allMatch(m -> m.host() != null && !m.host().isEmpty()));
                out.put("coordinator_set", d.coordinator() != null && d.coordinator().id() >= 0);

                out.put("delete_group_while_active", outcome(admin.deleteConsumerGroups(List.of(group)).all()));
                out.put("delete_offsets_while_subscribed",
                    outcome(admin.deleteConsumerGroupOffsets(group, Set.of(tp0)).all()));
                out.put("alter_offsets_while_active",
                    outcome(admin.alterConsumerGroupOffsets(group, Map.of(tp0, new OffsetAndMetadata(1))).all()));
            }
            out.put("committed", committed(admin, group));
            ConsumerGroupDescription empty = describeGroup(admin, group);
            out.put("state_after_leave", String.valueOf(empty.groupState()));
            out.put("members_after_leave", empty.members().size());

            out.put("alter_offsets", outcome(admin.alterConsumerGroupOffsets(group,
                Map.of(tp0, new OffsetAndMetadata(2), tp1, new OffsetAndMetadata(9))).all()));
            out.put("committed_after_alter", committed(admin, group));
            Map<Integer, Long> startedAt = new TreeMap<>();
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(group))) {
                c.subscribe(List.of(topic));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (startedAt.size() < 2 && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) startedAt.putIfAbsent(r.partition(), r.offset());
                }
            }
            out.put("new_member_started_at", startedAt);

            out.put("delete_offsets", outcome(admin.deleteConsumerGroupOffsets(group, Set.of(tp1)).all()));
            out.put("committed_after_delete_offsets", committed(admin, group));
            out.put("delete_group", outcome(admin.deleteConsumerGroups(List.of(group)).all()));
            out.put("listed_after_delete", admin.listConsumerGroups().all().get(WAIT_S, TimeUnit.SECONDS).stream()
                .map(ConsumerGroupListing::groupId).anyMatch(group::equals));
            out.put("committed_after_delete_group", committed(admin, group));
            out.put("delete_unknown_group", outcome(admin.deleteConsumerGroups(List.of(group + "-unknown")).all()));
            try {
                out.put("describe_unknown_group", String.valueOf(describeGroup(admin, group + "-unknown").groupState()));
            } catch (ExecutionException e) {
                out.put("describe_unknown_group", e.getCause().getClass().getSimpleName());
            }
        }
        return out;
    }

    /** An idempotent producer's 10 records on partition 0: DescribeProducers shows it; then
     *  DeleteRecords before offset 4 moves the log start, which ListOffsets and a consumer see. */
    static Map<String, Object> recordsAndProducers() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        TopicPartition tp0 = new TopicPartition(topic, 0), tp1 = new TopicPartition(topic, 1);
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 2);
            Properties p = Clients.producerProps("all");
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            Clients.produce(p, 1, 10, null);

            Collection<ProducerState> producers = admin.describeProducers(List.of(tp0)).partitionResult(tp0)
                .get(WAIT_S, TimeUnit.SECONDS).activeProducers();
            out.put("producers", producers.size());
            out.put("producer_ids_valid", producers.stream().allMatch(s -> s.producerId() >= 0));
            out.put("producer_epochs", producers.stream().map(ProducerState::producerEpoch).collect(Collectors.toList()));
            out.put("last_sequences", producers.stream().map(ProducerState::lastSequence).collect(Collectors.toList()));
            out.put("last_timestamp_set", producers.stream().allMatch(s -> s.lastTimestamp() > 0));
            out.put("in_transaction", producers.stream().anyMatch(s -> s.currentTransactionStartOffset().isPresent()));
            out.put("producers_p1", admin.describeProducers(List.of(tp1)).partitionResult(tp1)
                .get(WAIT_S, TimeUnit.SECONDS).activeProducers().size());

            out.put("low_watermark", admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(4)))
                .lowWatermarks().get(tp0).get(WAIT_S, TimeUnit.SECONDS).lowWatermark());
            out.put("earliest", offset(admin, tp0, OffsetSpec.earliest()));
            out.put("latest", offset(admin, tp0, OffsetSpec.latest()));
            List<Long> read = new ArrayList<>();
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(consumerProps(null))) {
                c.assign(List.of(tp0)); // no committed offset: auto.offset.reset=earliest
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (read.size() < 6 && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) read.add(r.offset());
                }
            }
            out.put("consumer_read", read);
            out.put("delete_beyond_end", outcome(admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(20)))
                .lowWatermarks().get(tp0)));
        }
        return out;
    }

    // ---- helpers ----

    static boolean listed(Admin admin) throws Exception {
        return admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS).contains(topic);
    }

    static TopicDescription describe(Admin admin) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(WAIT_S, TimeUnit.SECONDS).get(topic);
    }

    static ConsumerGroupDescription describeGroup(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(WAIT_S, TimeUnit.SECONDS);
    }

    static long offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get(WAIT_S, TimeUnit.SECONDS).offset();
    }

    /** partition -> [offset, metadata] of the group's committed offsets. */
    static Map<Integer, List<Object>> committed(Admin admin, String group) throws Exception {
        Map<Integer, List<Object>> m = new TreeMap<>();
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS)
            .forEach((tp, om) -> {
                if (om != null) m.put(tp.partition(), List.of(om.offset(), om.metadata()));
            });
        return m;
    }

    static Map<String, Object> entry(Config cfg, String name) {
        ConfigEntry e = cfg.get(name);
        if (e == null) return null;
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("value", e.value());
        m.put("source", String.valueOf(e.source()));
        m.put("default", e.isDefault());
        m.put("read_only", e.isReadOnly());
        return m;
    }

    private AdminScenarios() {}
}
