package kaas.e2e;

import static kaas.e2e.Clients.WAIT_S;
import static kaas.e2e.Clients.admin;
import static kaas.e2e.Clients.consumerProps;
import static kaas.e2e.Clients.partitionIds;
import static kaas.e2e.Clients.topic;

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
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/** Classic-protocol consumer groups: static membership and the cooperative-sticky assignor.
 *  Each scenario drives its consumers from this one thread, polling them in turn. */
final class ConsumerScenarios {
    static final Duration POLL = Duration.ofMillis(100);
    // A member learns of a rebalance from its heartbeat: a short interval keeps the
    // scenarios short (the default is 3 s).
    static final String HEARTBEAT_MS = "500";

    /** What a ConsumerRebalanceListener was told, in order and per kind. */
    static final class Rebalances implements ConsumerRebalanceListener {
        final List<String> log = new ArrayList<>();
        final Set<Integer> assigned = new TreeSet<>();
        final Set<Integer> revoked = new TreeSet<>();
        final Set<Integer> lost = new TreeSet<>();

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> ps) {
            log.add("assigned " + partitionIds(ps));
            assigned.addAll(partitionIds(ps));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> ps) {
            log.add("revoked " + partitionIds(ps));
            revoked.addAll(partitionIds(ps));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> ps) {
            log.add("lost " + partitionIds(ps));
            lost.addAll(partitionIds(ps));
        }

        void clear() {
            log.clear();
            assigned.clear();
            revoked.clear();
            lost.clear();
        }

        Map<String, Object> summary() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("log", new ArrayList<>(log));
            m.put("assigned", new ArrayList<>(assigned));
            m.put("revoked", new ArrayList<>(revoked));
            m.put("lost", new ArrayList<>(lost));
            return m;
        }
    }

    /** Polls every consumer in turn until `done` holds (false after `seconds`). */
    static boolean pollUntil(List<KafkaConsumer<String, String>> cs, long seconds, BooleanSupplier done) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) return false;
            for (KafkaConsumer<String, String> c : cs) c.poll(POLL);
        }
        return true;
    }

    /** Keeps polling for `ms`, so that a rebalance that is going to happen does. */
    static void settle(List<KafkaConsumer<String, String>> cs, long ms) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms);
        while (System.nanoTime() < deadline) for (KafkaConsumer<String, String> c : cs) c.poll(POLL);
    }

    static boolean split(int partitions, KafkaConsumer<String, String> a, KafkaConsumer<String, String> b) {
        Set<TopicPartition> all = new HashSet<>(a.assignment());
        all.addAll(b.assignment());
        return !a.assignment().isEmpty() && !b.assignment().isEmpty()
            && a.assignment().size() + b.assignment().size() == partitions && all.size() == partitions;
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(WAIT_S, TimeUnit.SECONDS);
    }

    /** Two static members (group.instance.id) share 4 partitions. Member a commits offset 5 on
     *  its partitions and closes (a static member does not leave the group on close); a new
     *  consumer with a's instance id joins within the session timeout. It must get a's
     *  partitions back and resume at the commit, in the same generation, while b sees no
     *  rebalance at all. */
    static Map<String, Object> staticMember() throws Exception {
        int partitions = 4;
        Map<String, Object> out = new LinkedHashMap<>();
        String group = topic + "-group";
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, partitions);
            Clients.produce(Clients.producerProps("all"), partitions, 10, null);

            Properties base = consumerProps(group);
            base.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            base.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000"); // outlives the restart below
            base.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, HEARTBEAT_MS);
            base.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
            Properties pa = new Properties();
            pa.putAll(base);
            pa.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-a");
            Properties pb = new Properties();
            pb.putAll(base);
            pb.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-b");

            Rebalances ra = new Rebalances(), rb = new Rebalances(), ra2 = new Rebalances();
            KafkaConsumer<String, String> b = new KafkaConsumer<>(pb);
            try {
                List<Integer> aPartitions;
                String aMember;
                int generation;
                try (KafkaConsumer<String, String> a = new KafkaConsumer<>(pa)) {
                    a.subscribe(List.of(topic), ra);
                    b.subscribe(List.of(topic), rb);
                    if (!pollUntil(List.of(a, b), 40, () -> split(partitions, a, b))) {
                        throw new IllegalStateException("a and b did not split the partitions in 40s: "
                            + ra.log + " " + rb.log);
                    }
                    settle(List.of(a, b), 1000);
                    aPartitions = partitionIds(a.assignment());
                    aMember = a.groupMetadata().memberId();
                    generation = a.groupMetadata().generationId();
                    out.put("b_generation_before", b.groupMetadata().generationId());
                    out.put("b_partitions_before", partitionIds(b.assignment()));
                    Map<TopicPartition, OffsetAndMetadata> commit = new LinkedHashMap<>();
                    for (TopicPartition tp : a.assignment()) commit.put(tp, new OffsetAndMetadata(5));
                    a.commitSync(commit, Duration.ofSeconds(WAIT_S));
                }
                out.put("a_partitions_before", aPartitions);
                out.put("a_generation_before", generation);

                rb.clear();
                long t0 = System.nanoTime();
                Map<Integer, Long> resumedAt = new TreeMap<>();
                try (KafkaConsumer<String, String> a2 = new KafkaConsumer<>(pa)) {
                    a2.subscribe(List.of(topic), ra2);
                    long[] rejoinMs = {-1};
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    while (System.nanoTime() < deadline
                            && (a2.assignment().isEmpty() || resumedAt.size() < a2.assignment().size())) {
                        for (ConsumerRecord<String, String> r : a2.poll(POLL)) resumedAt.putIfAbsent(r.partition(), r.offset());
                        if (rejoinMs[0] < 0 && !a2.assignment().isEmpty()) {
                            rejoinMs[0] = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                        }
                        b.poll(POLL); // b keeps polling (and heartbeating) meanwhile
                    }
                    if (a2.assignment().isEmpty()) throw new IllegalStateException("a did not rejoin in 30s: " + ra2.log);
                    settle(List.of(a2, b), 1500);
                    out.put("rejoin_ms", rejoinMs[0]);
                    out.put("a_partitions_after", partitionIds(a2.assignment()));
                    out.put("a_generation_after", a2.groupMetadata().generationId());
                    out.put("a_member_id_changed", !aMember.equals(a2.groupMetadata().memberId()));
                    out.put("a_resumed_at", resumedAt.values().stream().distinct().collect(Collectors.toList()));
                    out.put("a_rebalances_after", ra2.summary());
                    out.put("b_partitions_after", partitionIds(b.assignment()));
                    out.put("b_generation_after", b.groupMetadata().generationId());
                    out.put("b_rebalances_after", rb.summary());

                    ConsumerGroupDescription d = describe(admin, group);
                    out.put("group_state", String.valueOf(d.groupState()));
                    out.put("members", d.members().size());
                    out.put("member_instance_ids", d.members().stream()
                        .map(m -> m.groupInstanceId().orElse("")).sorted().collect(Collectors.toList()));
                    String a2Member = a2.groupMetadata().memberId();
                    out.put("a_member_described", d.members().stream().map(MemberDescription::consumerId)
                        .anyMatch(a2Member::equals));
                }
            } finally {
                b.close(Duration.ofSeconds(5));
            }
        }
        return out;
    }

    /** A cooperative-sticky consumer owns all 6 partitions; a second one joins. The first must
     *  keep half of its partitions throughout and be asked to revoke only the ones that move;
     *  the second gets exactly those, and nobody's partitions are "lost". */
    static Map<String, Object> cooperativeSticky() throws Exception {
        int partitions = 6;
        Map<String, Object> out = new LinkedHashMap<>();
        String group = topic + "-group";
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, partitions);
            Properties p = consumerProps(group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, HEARTBEAT_MS);
            Rebalances r1 = new Rebalances(), r2 = new Rebalances();
            try (KafkaConsumer<String, String> c1 = new KafkaConsumer<>(p);
                 KafkaConsumer<String, String> c2 = new KafkaConsumer<>(p)) {
                c1.subscribe(List.of(topic), r1);
                if (!pollUntil(List.of(c1), 30, () -> c1.assignment().size() == partitions)) {
                    throw new IllegalStateException("c1 was not given all partitions in 30s: " + r1.log);
                }
                out.put("c1_initial", partitionIds(c1.assignment()));
                out.put("c1_initial_rebalances", r1.summary());
                out.put("generation_initial", c1.groupMetadata().generationId());
                r1.clear();

                c2.subscribe(List.of(topic), r2);
                // While c2 joins, check on every round that c1 never lets go of what it keeps.
                Set<Integer> c1Min = new TreeSet<>(partitionIds(c1.assignment()));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(40);
                while (!split(partitions, c1, c2) && System.nanoTime() < deadline) {
                    c1.poll(POLL);
                    c1Min.retainAll(partitionIds(c1.assignment()));
                    c2.poll(POLL);
                }
                if (!split(partitions, c1, c2)) {
                    throw new IllegalStateException("c2 got no partitions in 40s: " + r1.log + " " + r2.log);
                }
                settle(List.of(c1, c2), 1500);
                c1Min.retainAll(partitionIds(c1.assignment()));
                out.put("c1_final", partitionIds(c1.assignment()));
                out.put("c1_never_released", new ArrayList<>(c1Min));
                out.put("c2_final", partitionIds(c2.assignment()));
                out.put("c1_rebalances", r1.summary());
                out.put("c2_rebalances", r2.summary());
                out.put("c1_generation_final", c1.groupMetadata().generationId());
                out.put("c2_generation_final", c2.groupMetadata().generationId());
                ConsumerGroupDescription d = describe(admin, group);
                out.put("group_state", String.valueOf(d.groupState()));
                out.put("group_assignor", d.partitionAssignor());
                out.put("group_members", d.members().size());
            }
        }
        return out;
    }

    private ConsumerScenarios() {}
}
