package kaas.e2e;

import java.util.Map;

/**
 * The Java Kafka client against a broker (kaas or Apache Kafka). Usage: Main SCENARIO BOOTSTRAP TOPIC
 * Prints one JSON line of what the scenario observed on stdout (the assertions live in
 * test_java_client.py); exits 1 on any unexpected error, 2 when the watchdog fires.
 * The scenarios live in ProducerScenarios, ConsumerScenarios, AdminScenarios, TransactionScenarios
 * and TransactionAdminScenarios.
 */
public final class Main {
    static final long SCENARIO_DEADLINE_S = 100; // the whole program (watchdog)

    interface Scenario {
        Map<String, Object> run() throws Exception;
    }

    static final Map<String, Scenario> SCENARIOS = Map.ofEntries(
        Map.entry("produce-consume", ProducerScenarios::produceConsume),
        Map.entry("acks", ProducerScenarios::acks),
        Map.entry("static-member", ConsumerScenarios::staticMember),
        Map.entry("cooperative-sticky", ConsumerScenarios::cooperativeSticky),
        Map.entry("admin-topics", AdminScenarios::topics),
        Map.entry("admin-configs", AdminScenarios::configs),
        Map.entry("admin-broker-configs", AdminScenarios::brokerConfigs),
        Map.entry("admin-groups", AdminScenarios::groupsAndOffsets),
        Map.entry("admin-records-producers", AdminScenarios::recordsAndProducers),
        Map.entry("txn-interleaved", TransactionScenarios::interleaved),
        Map.entry("txn-fencing", TransactionScenarios::fencing),
        Map.entry("txn-reaper", TransactionScenarios::reaper),
        Map.entry("txn-producers", TransactionScenarios::describeProducers),
        Map.entry("txn-admin", TransactionAdminScenarios::hangingTransaction));

    public static void main(String[] args) throws Exception {
        if (args.length != 3 || !SCENARIOS.containsKey(args[0])) {
            System.err.println("usage: Main " + String.join("|", new java.util.TreeSet<>(SCENARIOS.keySet()))
                + " BOOTSTRAP TOPIC");
            System.exit(64);
        }
        Clients.bootstrap = args[1];
        Clients.topic = args[2];
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
            out = SCENARIOS.get(args[0]).run();
        } catch (Throwable t) {
            System.err.println("FAIL: " + args[0] + ":");
            t.printStackTrace();
            System.out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }
        System.out.println(Clients.json(out));
        System.out.flush();
        Runtime.getRuntime().halt(0); // do not wait on client threads still closing
    }

    private Main() {}
}
