"""The Java Kafka client (org.apache.kafka:kafka-clients, see java/pom.xml) against kaas
and against Apache Kafka (the `kaas_or_kafka` fixture: every test runs on both, "[kaas]"
and "[kafka]" in its name): the producer (acks 0/1/all, idempotence, every codec), classic
consumer groups (static membership, cooperative-sticky), and the AdminClient (topics,
configs, groups, offsets, DeleteRecords, DescribeProducers).

Each scenario is one JVM run of java/src/main/java/kaas/e2e/Main.java (the scenarios
are in ProducerScenarios, ConsumerScenarios and AdminScenarios), which prints one JSON
line of what it saw; the assertions are here, the same for both brokers except where
docs/oracle.md ("Java client and franz-go against both brokers") lists a difference,
and there each side's own answer is asserted."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

JAVA = Path(__file__).resolve().parent / "java"
JAR = JAVA / "target" / "kaas-e2e-java.jar"
LIB = JAVA / "target" / "lib"

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None,
    reason="java or mvn is not installed",
)


def _stale() -> bool:
    if not JAR.exists() or not LIB.is_dir():
        return True
    built = JAR.stat().st_mtime
    sources = [JAVA / "pom.xml", *(JAVA / "src").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


@pytest.fixture(scope="session")
def java_client_classpath():
    """Build the module once per session (skipped when the jar is newer than its sources).
    A fresh ~/.m2 downloads kafka-clients and the Maven plugins (about 2 minutes here).
    Under pytest-xdist every worker process has this session fixture: the build holds a
    lock in java/target, so that two `mvn package` never write one jar at once and the
    second worker finds the first one's jar fresh."""
    (JAVA / "target").mkdir(exist_ok=True)
    with open(JAVA / "target" / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale():
            t0 = time.monotonic()
            out = subprocess.run(
                ["mvn", "-q", "-B", "package", "-DskipTests"],
                cwd=JAVA, capture_output=True, text=True, timeout=600,
            )
            assert out.returncode == 0, "mvn package failed:\n%s\n%s" % (out.stdout[-4000:], out.stderr[-4000:])
            print("built %s in %.1fs" % (JAR, time.monotonic() - t0))
    return "%s:%s/*" % (JAR, LIB)


def run_scenario(classpath: str, scenario: str, bootstrap: str, topic: str) -> dict:
    t0 = time.monotonic()
    out = subprocess.run(
        ["java", "-Xss1m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "kaas.e2e.Main", scenario, bootstrap, topic],
        capture_output=True, text=True, timeout=150,
    )
    assert out.returncode == 0, "java %s failed (exit %s):\n%s\n%s" % (
        scenario, out.returncode, out.stdout[-3000:], out.stderr[-6000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print("%s took %.1fs: %s" % (scenario, time.monotonic() - t0, result))
    return result


def test_java_produce_consume_every_codec_cooperative_group(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "produce-consume", kaas_or_kafka.bootstrap, topic_name)
    assert r["codecs"] == {c: 500 for c in ("none", "gzip", "snappy", "lz4", "zstd")}, r
    assert r["produced"] == r["consumed"] == r["distinct"] == 2500, r
    assert r["duplicates"] == 0 and r["unexpected"] == 0, r
    assert r["assigned_partitions"] == 3, r
    assert r["group_assignor"] == "cooperative-sticky" and r["group_members"] == 1, r
    # committed offsets are per-partition high watermarks: they sum to the record count
    assert r["committed"] == 2500 and r["committed_partitions"] == 3, r


def test_java_acks_settings(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "acks", kaas_or_kafka.bootstrap, topic_name)
    # acks=0 gets no offset back by design; acks=1 and acks=all must each carry one
    assert r["acked_with_offset"] == {"0": 0, "1": 100, "all": 100}, r
    read = r["read_back"]
    assert read["1"] == 100 and read["all"] == 100, r
    assert 0 <= read["0"] <= 100, r  # fire-and-forget: neither broker promises more
    assert r["duplicates"] == 0, r
    assert r["end_offsets_sum"] == sum(read.values()), r


def test_java_static_member_rejoins_without_a_rebalance(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "static-member", kaas_or_kafka.bootstrap, topic_name)
    assert sorted(r["a_partitions_before"] + r["b_partitions_before"]) == [0, 1, 2, 3], r
    assert r["a_generation_before"] == r["b_generation_before"] >= 1, r
    # a's instance id brings its member back in a's place: same partitions, same
    # generation (no rebalance), resuming at a's commit, well inside the 30 s session
    assert r["a_partitions_after"] == r["a_partitions_before"], r
    assert r["a_generation_after"] == r["a_generation_before"], r
    assert r["a_member_id_changed"] is True, r
    assert r["a_resumed_at"] == [5], r
    assert r["a_rebalances_after"]["log"] == ["assigned %s" % r["a_partitions_before"]], r
    assert r["rejoin_ms"] < 20000, r
    # ... and b notices nothing
    assert r["b_partitions_after"] == r["b_partitions_before"], r
    assert r["b_generation_after"] == r["b_generation_before"], r
    assert r["b_rebalances_after"]["log"] == [], r
    assert r["group_state"].lower() == "stable" and r["members"] == 2, r
    assert r["member_instance_ids"] == ["static-a", "static-b"] and r["a_member_described"] is True, r


def test_java_cooperative_sticky_revokes_only_what_moves(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "cooperative-sticky", kaas_or_kafka.bootstrap, topic_name)
    everything = [0, 1, 2, 3, 4, 5]
    assert r["c1_initial"] == everything, r
    assert r["c1_initial_rebalances"]["log"] == ["assigned %s" % everything], r
    c1, c2 = r["c1_final"], r["c2_final"]
    assert len(c1) == len(c2) == 3 and sorted(c1 + c2) == everything, r
    # c1 kept its three throughout (it never let go of them, not even for a moment) ...
    assert r["c1_never_released"] == c1, r
    # ... was asked to revoke exactly the three that moved, gained nothing, lost nothing
    c1_seen, c2_seen = r["c1_rebalances"], r["c2_rebalances"]
    assert c1_seen["revoked"] == c2 and c1_seen["assigned"] == [] and c1_seen["lost"] == [], r
    assert [e for e in c1_seen["log"] if e.startswith("revoked")] == ["revoked %s" % c2], r
    # ... and c2 got exactly those, once revoked
    assert c2_seen["assigned"] == c2 and c2_seen["revoked"] == [] and c2_seen["lost"] == [], r
    # the two-step cooperative rebalance: c2 joins (one generation), then c1's revocation
    # makes it rejoin so the freed partitions can be handed out (the next one)
    assert r["c1_generation_final"] == r["c2_generation_final"] == r["generation_initial"] + 2, r
    assert r["group_state"].lower() == "stable" and r["group_members"] == 2, r
    assert r["group_assignor"] == "cooperative-sticky", r


def test_java_admin_topics(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "admin-topics", kaas_or_kafka.bootstrap, topic_name)
    assert r["create"] == "ok" and r["listed"] is True, r
    assert r["cluster_nodes"] == 1 and r["partitions"] == [0, 1, 2], r
    assert r["leaders_are_the_node"] is True and r["internal"] is False and r["has_topic_id"] is True, r
    assert r["create_existing"] == "TopicExistsException", r
    assert r["create_invalid_name"] == "InvalidTopicException", r
    assert r["create_zero_partitions"] == "InvalidPartitionsException", r
    assert r["create_three_replicas"] == "InvalidReplicationFactorException", r
    assert r["increase_to_5"] == "ok" and r["partitions_after_increase"] == 5, r
    assert r["shrink_to_2"] == "InvalidPartitionsException", r
    assert r["delete"] == "ok" and r["listed_after_delete"] is False, r
    assert r["describe_deleted"] == "UnknownTopicOrPartitionException", r
    assert r["delete_again"] == "UnknownTopicOrPartitionException", r


def test_java_admin_configs(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "admin-configs", kaas_or_kafka.bootstrap, topic_name)
    override = {"value": "123456789", "source": "DYNAMIC_TOPIC_CONFIG", "default": False, "read_only": False}
    assert r["retention_ms"] == override, r
    assert r["cleanup_policy"] == {"value": "delete", "source": "DEFAULT_CONFIG", "default": True,
                                   "read_only": False}, r
    assert r["max_message_bytes_present"] is True, r
    assert r["describe_missing_topic"] == "UnknownTopicOrPartitionException", r
    assert r["incremental_alter"] == "ok", r
    assert r["retention_ms_after_alter"] == dict(override, value="3600000"), r
    assert r["append_and_delete"] == "ok", r
    assert r["invalid_value"] == "InvalidConfigurationException", r
    assert r["unknown_name"] == "InvalidConfigurationException", r
    assert r["cleanup_policy_after_append"] == dict(override, value="delete,compact"), r
    assert r["retention_ms_after_delete"]["source"] == "DEFAULT_CONFIG", r
    # Both describe every topic config of Kafka 4.1 (kaas acts on some; docs/protocol.md).
    assert r["entries"] > 30, r
    # Each explained when asked (the words are each broker's own), and only then.
    assert r["documentation_unasked"] is False, r
    assert r["documented_entries"] == r["entries"], r


def test_java_admin_dynamic_broker_default(kaas_or_kafka, topic_name, java_client_classpath):
    """The Java AdminClient on the cluster-wide default broker resource (KIP-226), which
    confluent-kafka cannot name: set, seen with its source on the default resource, on the
    broker and as a new topic's default, deleted again."""
    r = run_scenario(java_client_classpath, "admin-broker-configs", kaas_or_kafka.bootstrap, topic_name)
    assert r["static_refused"] == "InvalidRequestException", r
    assert r["set_default"] == "ok", r
    dynamic = {"value": "1048588", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG", "default": False,
               "read_only": False}
    assert r["broker_message_max_bytes"] == dynamic, r
    assert r["default_message_max_bytes"] == dynamic, r
    assert r["default_lists_retention_ms"] is False, r
    assert r["topic_max_message_bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG", r
    assert r["topic_max_message_bytes"]["value"] == "1048588", r
    assert r["delete_default"] == "ok", r
    assert r["broker_message_max_bytes_after_delete"]["source"] in ("STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"), r


def test_java_admin_groups_and_offsets(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "admin-groups", kaas_or_kafka.bootstrap, topic_name)
    # ListOffsets on 10 records with timestamps t0..t0+9
    assert (r["earliest"], r["latest"]) == (0, 10), r
    assert r["for_timestamp_t0_plus_5"] == 5 and r["for_timestamp_between"] == 4, r
    assert r["for_timestamp_future"] == -1 and r["max_timestamp"] == 9, r
    # a running group as the admin API sees it
    assert r["listed_while_active"] is True and r["listed_state"].lower() == "stable", r
    assert r["state_while_active"].lower() == "stable" and r["members_while_active"] == 1, r
    assert r["assignor"] == "range" and r["member_partitions"] == [[0, 1]], r
    assert r["member_client_id"] == "kaas-e2e-java-consumer" and r["coordinator_set"] is True, r
    assert r["member_host_set"] is True, r
    # what an active group refuses
    assert r["delete_group_while_active"] == "GroupNotEmptyException", r
    assert r["delete_offsets_while_subscribed"] == "GroupSubscribedToTopicException", r
    assert r["alter_offsets_while_active"] == "UnknownMemberIdException", r
    # once the member left
    assert r["committed"] == {"0": [7, "e2e-meta"], "1": [3, ""]}, r
    assert r["state_after_leave"].lower() == "empty" and r["members_after_leave"] == 0, r
    assert r["alter_offsets"] == "ok" and r["committed_after_alter"] == {"0": [2, ""], "1": [9, ""]}, r
    assert r["new_member_started_at"] == {"0": 2, "1": 9}, r
    assert r["delete_offsets"] == "ok" and r["committed_after_delete_offsets"] == {"0": [2, ""]}, r
    assert r["delete_group"] == "ok" and r["listed_after_delete"] is False, r
    assert r["committed_after_delete_group"] == {}, r
    assert r["delete_unknown_group"] == "GroupIdNotFoundException", r
    assert r["describe_unknown_group"] == "GroupIdNotFoundException", r


def test_java_admin_delete_records_and_describe_producers(kaas_or_kafka, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "admin-records-producers", kaas_or_kafka.bootstrap, topic_name)
    # one idempotent producer wrote 10 records (sequences 0..9) to partition 0
    assert r["producers"] == 1 and r["producer_ids_valid"] is True, r
    assert r["producer_epochs"] == [0] and r["last_sequences"] == [9], r
    assert r["last_timestamp_set"] is True and r["in_transaction"] is False, r
    assert r["producers_p1"] == 0, r
    # DeleteRecords before 4: the log now starts there, for ListOffsets and for a consumer
    assert r["low_watermark"] == 4 and (r["earliest"], r["latest"]) == (4, 10), r
    assert r["consumer_read"] == [4, 5, 6, 7, 8, 9], r
    assert r["delete_beyond_end"] == "OffsetOutOfRangeException", r
