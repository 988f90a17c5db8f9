"""kafkajs, a pure JavaScript client (no librdkafka, no Java), against kaas:
admin, an idempotent producer, and a consumer group with committed offsets."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).resolve().parent / "js"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_idempotent_produce_and_group_consume(kaas, topic_name):
    if not (JS / "node_modules" / "kafkajs").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=300)
    out = subprocess.run(
        ["node", str(JS / "roundtrip.js"), kaas.bootstrap, topic_name, "3000"],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, "kafkajs failed:\n%s\n%s" % (out.stdout[-3000:], out.stderr[-3000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["produced"] == result["consumed"] == 3000
    # kafkajs commits after each batch it processed: by the end every
    # partition's committed offset is its high watermark.
    assert result["committed"] == 3000, result
