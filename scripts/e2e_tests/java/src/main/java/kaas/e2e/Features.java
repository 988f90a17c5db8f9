package kaas.e2e;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;

/**
 * Sets the finalized transaction.version of a broker (Apache Kafka: KIP-584's UpdateFeatures,
 * as kafka-features.sh upgrade/downgrade does). Usage: Features BOOTSTRAP LEVEL
 * Downgrades with SAFE_DOWNGRADE, upgrades with UPGRADE, then waits (bounded) until
 * ApiVersions reports the level. Prints {"before": B, "after": A}; exits 1 on an error.
 */
public final class Features {
    static final String TRANSACTION_VERSION = "transaction.version";

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Features BOOTSTRAP LEVEL");
            System.exit(64);
        }
        Clients.bootstrap = args[0];
        short level = Short.parseShort(args[1]);
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Clients.admin()) {
            Object before = TransactionScenarios.transactionVersion(admin);
            out.put("before", before);
            if (!before.equals((int) level)) {
                FeatureUpdate.UpgradeType how = before instanceof Integer && (Integer) before > level
                    ? FeatureUpdate.UpgradeType.SAFE_DOWNGRADE : FeatureUpdate.UpgradeType.UPGRADE;
                admin.updateFeatures(Map.of(TRANSACTION_VERSION, new FeatureUpdate(level, how)),
                    new UpdateFeaturesOptions()).all().get(Clients.WAIT_S, TimeUnit.SECONDS);
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            Object after = TransactionScenarios.transactionVersion(admin);
            while (!after.equals((int) level) && System.nanoTime() < deadline) {
                Clients.sleep(100);
                after = TransactionScenarios.transactionVersion(admin);
            }
            out.put("after", after);
        } catch (Exception e) {
            System.err.println("FAIL: setting " + TRANSACTION_VERSION + " to " + level + ":");
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
        System.out.println(Clients.json(out));
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    private Features() {}
}
