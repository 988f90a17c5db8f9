"""The Java Kafka client (org.apache.kafka:kafka-clients, see java/pom.xml) against kaas:
idempotent producers with every compression codec and a cooperative-sticky consumer
group, the three acks settings, the admin API, and a static group member that rejoins.
Each scenario is one run of java/src/main/java/kaas/e2e/Main.java, which prints one
JSON line of what it saw; the assertions are here."""

from __future__ import annotations

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
    A fresh ~/.m2 downloads kafka-clients and the Maven plugins (about 2 minutes here)."""
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


def test_java_produce_consume_every_codec_cooperative_group(kaas, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "produce-consume", kaas.bootstrap, topic_name)
    assert r["codecs"] == {c: 500 for c in ("none", "gzip", "snappy", "lz4", "zstd")}, r
    assert r["produced"] == r["consumed"] == r["distinct"] == 2500, r
    assert r["duplicates"] == 0 and r["unexpected"] == 0, r
    assert r["assigned_partitions"] == 3, r
    assert r["group_assignor"] == "cooperative-sticky" and r["group_members"] == 1, r
    # committed offsets are per-partition high watermarks: they sum to the record count
    assert r["committed"] == 2500 and r["committed_partitions"] == 3, r


def test_java_acks_settings(kaas, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "acks", kaas.bootstrap, topic_name)
    # acks=0 gets no offset back by design; acks=1 and acks=all must each carry one
    assert r["acked_with_offset"] == {"0": 0, "1": 100, "all": 100}, r
    read = r["read_back"]
    assert read["1"] == 100 and read["all"] == 100, r
    assert 0 <= read["0"] <= 100, r  # fire-and-forget: kaas promises nothing more
    assert r["duplicates"] == 0, r
    assert r["end_offsets_sum"] == sum(read.values()), r


def test_java_admin_client(kaas, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "admin", kaas.bootstrap, topic_name)
    assert r["created"] is True and r["partitions"] == 3, r
    assert r["config_retention_ms"] == "123456789", r
    assert r["config_cleanup_policy"] == "delete" and r["config_entries"] > 1, r
    assert r["partitions_after_increase"] == 5, r
    # one idempotent producer wrote 10 records (sequences 0..9) to partition 0
    assert r["producers"] == 1 and len(r["producer_ids"]) == 1 and r["producer_ids"][0] >= 0, r
    assert r["producer_last_sequences"] == [9], r
    assert r["delete_records_low_watermark"] == 4, r
    assert r["earliest_offset_p0"] == 4 and r["latest_offset_p0"] == 10, r
    assert r["group_listed"] is True, r
    assert r["group_state"].lower() == "stable" and r["group_members"] == 1, r
    assert r["group_assignor"] == "range", r  # the classic consumer's first default assignor
    assert r["group_assigned_partitions"] == 5, r
    assert r["group_committed_p0"] == 7 and r["group_committed_metadata"] == "admin-e2e", r
    assert r["deleted"] is True, r


def test_java_static_member_rejoins_and_resumes(kaas, topic_name, java_client_classpath):
    r = run_scenario(java_client_classpath, "static-member", kaas.bootstrap, topic_name)
    assert r["first_offsets_start"] == 0 and r["first_read"] == 10 and r["committed"] == 10, r
    assert r["resumed_at"] == r["committed"], r
    assert r["members"] == 1 and r["member_instance_ids"] == ["static-e2e-1"], r
    assert r["member_is_second"] is True and r["member_id_changed"] is True, r
    # the static member takes its old place; it does not wait out the 30s session
    assert r["rejoin_ms"] < 20000, r
