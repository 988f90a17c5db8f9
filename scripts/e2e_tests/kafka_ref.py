"""Apache Kafka as the reference broker of the end-to-end suite (docs/oracle.md).

A thin wrapper over `scripts/kafka-ref`: one KRaft node on 127.0.0.1, started once
per pytest session and shared by every test that runs against Kafka (tests keep
apart by unique topic and group names). Each node gets its own state file, so
other nodes on the machine (other sessions, a developer's own) are left alone.

Environment: KAAS_KAFKA_REF_CACHE (where the Kafka jars are cached) and the other
KAAS_KAFKA_REF_* variables pass through to the script; KAAS_KAFKA_REF_STATE is
always set here, to a file in this session's temp dir.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional

from kaas_broker import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "kafka-ref"
# A cold start fetches the jars with Maven first (about 30 s here) and then waits
# up to KAAS_KAFKA_REF_START_TIMEOUT (60 s) for the broker itself.
START_TIMEOUT_S = 240
STOP_TIMEOUT_S = 60


def _cache_dir() -> Path:
    return Path(os.environ.get("KAAS_KAFKA_REF_CACHE", str(REPO_ROOT / ".cache" / "kafka-ref")))


def missing_prerequisite() -> Optional[str]:
    """Why Kafka cannot run here (no Java; no Maven and no cached jars), or None."""
    java = os.environ.get("KAAS_KAFKA_REF_JAVA")
    if not java and os.environ.get("JAVA_HOME") and os.access(os.path.join(os.environ["JAVA_HOME"], "bin", "java"), os.X_OK):
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    java = java or shutil.which("java")
    if not java:
        return "java is not installed (Apache Kafka needs Java 17+)"
    cached = any(_cache_dir().glob("*/.complete"))
    if not cached and shutil.which("mvn") is None:
        return "mvn is not installed and no Kafka jars are cached (scripts/kafka-ref fetch needs Maven)"
    return None


class KafkaRef:
    """One Kafka node; `.bootstrap`, `.log_tail()`. Quacks like KaasBroker where the
    failure reports of conftest.py need it (name, port, bootstrap, log_path, log_tail)."""

    name = "kafka"

    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self.port: Optional[int] = None
        self.data_dir: Optional[Path] = None
        self.start_seconds: Optional[float] = None

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "Kafka not started"
        return "127.0.0.1:%d" % self.port

    @property
    def log_path(self) -> Optional[Path]:
        return self.data_dir / "kafka.log" if self.data_dir else None

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        env = dict(os.environ, KAAS_KAFKA_REF_STATE=str(self.state_file))
        return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)

    def start(self) -> "KafkaRef":
        t0 = time.monotonic()
        out = self._run("start", timeout=START_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError("scripts/kafka-ref start failed (exit %s):\n%s\n%s"
                               % (out.returncode, out.stdout[-2000:], out.stderr[-6000:]))
        m = re.search(r"^bootstrap=127\.0\.0\.1:(\d+)$", out.stdout, re.M)
        if m is None:
            self.stop()
            raise RuntimeError("scripts/kafka-ref start printed no bootstrap line:\n%s" % out.stdout)
        self.port = int(m.group(1))
        state = dict(line.split("=", 1) for line in self.state_file.read_text().splitlines() if "=" in line)
        self.data_dir = Path(state["dir"]) if "dir" in state else None
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        out = self._run("stop", timeout=STOP_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError("scripts/kafka-ref stop failed (exit %s): %s" % (out.returncode, out.stderr[-2000:]))

    def log_tail(self, max_lines: int = 80) -> str:
        if self.log_path is None:
            return "(Kafka not started)"
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as e:
            return "(no Kafka log: %s)" % e
        return "\n".join(lines[-max_lines:])
