package kaas.e2e;

import static kaas.e2e.Clients.WAIT_S;
import static kaas.e2e.Clients.admin;
import static kaas.e2e.Clients.topic;
import static kaas.e2e.TransactionScenarios.failure;
import static kaas.e2e.TransactionScenarios.latest;
import static kaas.e2e.TransactionScenarios.txnProducerProps;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/**
 * The admin side of transactions (KIP-664, KIP-1152) as an operator uses it on a hanging
 * transaction: list the transactions (all, by state, by id pattern), describe the hanging one
 * and its producer on a partition, then abort it on that partition (WriteTxnMarkers).
 */
final class TransactionAdminScenarios {
    /** "hang" writes to partitions 0 and 1 and never ends its transaction; "done" commits
     *  one record on partition 1 after it. */
    static Map<String, Object> hangingTransaction() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String hang = topic + "-hang";
        String done = topic + "-done";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (Admin admin = admin()) {
            Clients.createTopic(admin, topic, 2);
            KafkaProducer<String, String> h = new KafkaProducer<>(txnProducerProps(hang));
            try (KafkaProducer<String, String> d = new KafkaProducer<>(txnProducerProps(done))) {
                h.initTransactions();
                h.beginTransaction();
                h.send(new ProducerRecord<>(topic, 0, "k", "hang-0")).get(WAIT_S, TimeUnit.SECONDS);
                h.send(new ProducerRecord<>(topic, 1, "k", "hang-1")).get(WAIT_S, TimeUnit.SECONDS);
                d.initTransactions();
                d.beginTransaction();
                d.send(new ProducerRecord<>(topic, 1, "k", "done-1")).get(WAIT_S, TimeUnit.SECONDS);
                d.commitTransaction();
                // Kafka answers EndTxn once PrepareCommit is logged and writes the markers
                // after; wait (at most 10 s) until the commit is complete, as an operator
                // looking at a settled cluster would see it.
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (admin.describeTransactions(List.of(done)).description(done).get(WAIT_S, TimeUnit.SECONDS)
                        .state() != TransactionState.COMPLETE_COMMIT && System.nanoTime() < deadline) {
                    Clients.sleep(50);
                }

                out.put("list_all", listed(admin, new ListTransactionsOptions()));
                out.put("list_ongoing",
                    listed(admin, new ListTransactionsOptions().filterStates(Set.of(TransactionState.ONGOING))));
                // Topic names are [a-zA-Z0-9._-]: only '.' needs escaping.
                String quoted = topic.replace(".", "\\.");
                out.put("list_pattern_whole",
                    listed(admin, new ListTransactionsOptions().filterOnTransactionalIdPattern(quoted + "-h.*")));
                out.put("list_pattern_part",
                    listed(admin, new ListTransactionsOptions().filterOnTransactionalIdPattern(quoted + "-h")));
                try {
                    listed(admin, new ListTransactionsOptions().filterOnTransactionalIdPattern("(ab(cd"));
                    out.put("list_pattern_invalid", "ok");
                } catch (Exception e) {
                    out.put("list_pattern_invalid", failure(e));
                }

                TransactionDescription desc = admin.describeTransactions(List.of(hang)).description(hang)
                    .get(WAIT_S, TimeUnit.SECONDS);
                out.put("describe_state", desc.state().toString());
                List<String> parts = new ArrayList<>();
                for (TopicPartition tp : desc.topicPartitions()) parts.add(tp.toString());
                parts.sort(null);
                out.put("describe_partitions", parts);
                out.put("describe_has_start_time", desc.transactionStartTimeMs().isPresent());

                ProducerState producer = null;
                for (ProducerState s : admin.describeProducers(List.of(p0)).partitionResult(p0)
                        .get(WAIT_S, TimeUnit.SECONDS).activeProducers()) {
                    if (s.producerId() == desc.producerId()) producer = s;
                }
                out.put("producer_found", producer != null);
                if (producer == null) return out;
                out.put("producer_txn_start_offset", producer.currentTransactionStartOffset().orElse(-1));
                out.put("lso_before", latest(admin, 2, IsolationLevel.READ_COMMITTED));

                // What kafka-transactions.sh abort sends: a marker for this partition only.
                AbortTransactionSpec spec = new AbortTransactionSpec(p0, producer.producerId(),
                    (short) producer.producerEpoch(), producer.coordinatorEpoch().orElse(0));
                try {
                    admin.abortTransaction(spec).all().get(WAIT_S, TimeUnit.SECONDS);
                    out.put("abort", "ok");
                } catch (Exception e) {
                    out.put("abort", failure(e));
                }
                out.put("lso_after", latest(admin, 2, IsolationLevel.READ_COMMITTED));
                out.put("hwm_after", latest(admin, 2, IsolationLevel.READ_UNCOMMITTED));
                out.put("read_committed", TransactionScenarios.readAll(2, "read_committed"));
            } finally {
                h.close(Duration.ZERO);
            }
        }
        return out;
    }

    /** The listed transactions of this run's ids: ["suffix", "state"] pairs, sorted. */
    static List<List<String>> listed(Admin admin, ListTransactionsOptions options) throws Exception {
        List<List<String>> out = new ArrayList<>();
        for (TransactionListing l : admin.listTransactions(options).all().get(WAIT_S, TimeUnit.SECONDS)) {
            if (l.transactionalId().startsWith(topic + "-")) {
                out.add(List.of(l.transactionalId().substring(topic.length() + 1), l.state().toString()));
            }
        }
        out.sort((a, b) -> a.toString().compareTo(b.toString()));
        return out;
    }

    private TransactionAdminScenarios() {}
}
