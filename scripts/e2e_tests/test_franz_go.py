"""franz-go, the pure Go client (no librdkafka, no Java) many newer systems use,
against kaas and against Apache Kafka with the same assertions ("[kaas]" and
"[kafka]" in the test name; the Kafka side skips without Java): kadm admin, its
default idempotent producer with acks=all, and a consumer group that commits offsets. The program is scripts/e2e_tests/go/main.go,
built from the committed go.mod/go.sum (modules come from the Go module proxy
on the first build, then from the module cache)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

GO_DIR = Path(__file__).resolve().parent / "go"
RECORDS = 3000


def _go():
    go = shutil.which("go")
    if go is None and os.access("/usr/local/go/bin/go", os.X_OK):
        go = "/usr/local/go/bin/go"
    return go


def _version(s):
    return tuple(int(x) for x in re.findall(r"\d+", s)[:3])


def _go_env():
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"  # never download a toolchain
    env.pop("GOFLAGS", None)  # no -mod=mod: build from the committed go.sum
    return env


@pytest.fixture(scope="module")
def franzgo(tmp_path_factory):
    """The built program's path (built once per session)."""
    go = _go()
    if go is None:
        pytest.skip("go is not installed")
    env = _go_env()
    have = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                          env=env, timeout=30).stdout.strip()
    need = re.search(r"^go (\S+)$", (GO_DIR / "go.mod").read_text(), re.M).group(1)
    if _version(have) < _version(need):
        pytest.skip("%s is older than go.mod's go %s" % (have, need))
    exe = tmp_path_factory.mktemp("franzgo") / "franzgo"
    out = subprocess.run([go, "build", "-o", str(exe), "."], cwd=GO_DIR, env=env,
                         capture_output=True, text=True, timeout=140)
    assert out.returncode == 0, "go build failed:\n%s\n%s" % (out.stdout[-3000:], out.stderr[-3000:])
    return exe


def test_franz_go_idempotent_produce_and_group_consume(franzgo, kaas_or_kafka, topic_name):
    out = subprocess.run([str(franzgo), kaas_or_kafka.bootstrap, topic_name, str(RECORDS)],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, "franz-go failed:\n%s\n%s" % (out.stdout[-3000:], out.stderr[-3000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["produced"] == result["consumed"] == RECORDS, result
    # Committed after every poll: by the end each partition's committed offset
    # is one past the last record consumed from it, and they sum to RECORDS.
    assert result["committed"] == RECORDS, result
    assert result["end_offsets"] == RECORDS, result
    assert result["duplicates"] == 0, result
    assert result["producer_id"] >= 0, result  # the broker gave the producer an id
    assert result["partitions"] == 3, result  # distinct keys spread over all partitions
