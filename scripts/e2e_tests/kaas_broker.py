"""Start, kill -9 and restart a real `kaas` broker process for end-to-end tests.

Shared by the pytest fixtures (conftest.py) and the benchmark (scripts/bench_tool).
Stdlib only, so the benchmark can import it without pytest.

Environment overrides (for developers; CI uses the defaults):
  KAAS_BIN      path of the broker binary (default: <repo>/target/release/kaas)
  KAAS_E2E_CMD  a command template, split on whitespace after formatting, with the
                fields {bin} {data_dir} {port} {host}; extra broker args are appended.
                Default: "{bin} serve --data-dir {data_dir} --listen {host}:{port}
                --advertised {host}:{port}"
  KAAS_E2E_KEEP=1  keep each broker's temp dir (data dir + broker.log) after the test

Every broker is started with PR_SET_PDEATHSIG=SIGKILL, so it dies with the Python process
even when that ends abruptly (e.g. a pytest-timeout os._exit), and never outlives a run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO_ROOT / "target" / "release" / "kaas"
DEFAULT_CMD = "{bin} serve --data-dir {data_dir} --listen {host}:{port} --advertised {host}:{port}"
HOST = "127.0.0.1"


class BrokerError(RuntimeError):
    pass


def _die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGKILL the child when the parent thread exits."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; teardown still stops the broker
        pass


def broker_binary() -> Path:
    return Path(os.environ.get("KAAS_BIN", str(DEFAULT_BIN)))


def free_port(host: str = HOST) -> int:
    """An ephemeral port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _api_versions_probe(host: str, port: int, timeout: float) -> bool:
    """Send ApiVersions v0 and check that a well-formed answer comes back.

    Returns True when the broker answered with the right correlation id and
    error_code 0. Any socket error or malformed answer gives False.
    """
    correlation_id = 0x4B414153  # "KAAS"
    client_id = b"kaas-e2e-probe"
    # request header v1: api_key, api_version, correlation_id, client_id (nullable string)
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    frame = struct.pack(">i", len(body)) + body
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(frame)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 6 or size > 1 << 20:
                return False
            resp = _recv_exact(s, size)
            corr, err = struct.unpack(">ih", resp[:6])
            return corr == correlation_id and err == 0
    except (OSError, ValueError, struct.error):
        return False


def api_versions(host: str, port: int, timeout: float = 5.0) -> dict:
    """ApiVersions v0 over a raw socket: {api_key: (min_version, max_version)}."""
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"e2e0"
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        resp = _recv_exact(s, size)
    corr, err, n = struct.unpack(">ihi", resp[:10])
    if corr != 7 or err != 0:
        raise BrokerError("ApiVersions v0: correlation id %d, error %d" % (corr, err))
    out = {}
    for i in range(n):
        key, lo, hi = struct.unpack(">hhh", resp[10 + 6 * i: 16 + 6 * i])
        out[key] = (lo, hi)
    return out


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class KaasBroker:
    """One broker process on 127.0.0.1:<ephemeral port> with its own data dir.

    restart() reuses the same data dir and port. All waits are bounded.
    """

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        workdir: Optional[Path] = None,
        start_timeout: float = 30.0,
        name: str = "kaas",
        data_dir: Optional[Path] = None,
    ) -> None:
        self.binary = broker_binary()
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.name = name
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="kaas-e2e-"))
            self._owns_workdir = True
        else:
            workdir.mkdir(parents=True, exist_ok=True)
            self._owns_workdir = False
        self.workdir = workdir
        # several brokers of one cluster share a data dir (each keeps its own log)
        self.data_dir = data_dir if data_dir is not None else workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        self.host = HOST
        self.port: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.kills = 0
        self.expect_down = False  # set by kill9()/stop(): an exit then is no surprise

    # ------------------------------------------------------------------ info
    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return "%s:%d" % (self.host, self.port)

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died_unexpectedly(self) -> Optional[int]:
        """The exit code if the broker exited on its own (not by kill9()/stop())."""
        if self.proc is not None and not self.expect_down and self.proc.poll() is not None:
            return self.proc.returncode
        return None

    def command(self) -> List[str]:
        template = os.environ.get("KAAS_E2E_CMD", DEFAULT_CMD)
        cmd = shlex.split(
            template.format(bin=self.binary, data_dir=self.data_dir, port=self.port, host=self.host)
        )
        return cmd + self.extra_args

    def log_tail(self, max_lines: int = 80, max_bytes: int = 64 * 1024) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                data = f.read()
        except OSError as e:
            return "(no broker log: %s)" % e
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-max_lines:])

    # ------------------------------------------------------------- lifecycle
    def start(self) -> "KaasBroker":
        """First start: pick a free port (retrying a few ports if bind races)."""
        if not self.binary.exists() and "KAAS_E2E_CMD" not in os.environ:
            raise BrokerError(
                "broker binary %s is missing: build it with `cargo build --release -p kaas`"
                % self.binary
            )
        last_err: Optional[Exception] = None
        for _attempt in range(3):
            self.port = free_port(self.host)
            try:
                self._spawn_and_wait()
                return self
            except BrokerError as e:
                last_err = e
                self._reap(kill=True)
        raise BrokerError("broker did not start after 3 attempts: %s" % last_err)

    def restart(self) -> "KaasBroker":
        """Stop (gracefully if still running) and start again on the same dir and port.

        The old listening socket may linger briefly after kill -9, so a spawn
        that exits early is retried until start_timeout.
        """
        assert self.port is not None, "restart() before start()"
        if self.is_running():
            self.stop()
        deadline = time.monotonic() + self.start_timeout
        last_err: Optional[Exception] = None
        while time.monotonic() < deadline:
            try:
                self._spawn_and_wait(deadline=deadline)
                return self
            except BrokerError as e:
                last_err = e
                self._reap(kill=True)
                time.sleep(0.5)
        raise BrokerError("broker did not restart on port %s: %s" % (self.port, last_err))

    def kill9(self) -> None:
        """SIGKILL the broker and wait until it is gone (bounded)."""
        if self.proc is None:
            return
        self.expect_down = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.kills += 1
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise BrokerError("broker pid %d survived SIGKILL for 10 s" % self.proc.pid)
        self._note("killed with SIGKILL (exit %s)" % self.proc.returncode)

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        self.expect_down = True
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._note("stopped (exit %s)" % self.proc.returncode)
        return self.proc.returncode

    def close(self, keep: bool = False) -> Optional[int]:
        """Teardown: always ends the process (SIGTERM, then SIGKILL after 10 s), then
        removes the temp workdir unless `keep` or KAAS_E2E_KEEP=1. Returns the exit code."""
        try:
            rc = self.stop(timeout=10.0)
        finally:
            self._close_log()
            if not keep and os.environ.get("KAAS_E2E_KEEP") != "1" and self._owns_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return rc

    # -------------------------------------------------------------- internals
    def _note(self, msg: str) -> None:
        try:
            with open(self.log_path, "ab") as f:
                f.write(("\n=== [e2e %s] %s ===\n" % (time.strftime("%H:%M:%S"), msg)).encode())
        except OSError:
            pass

    _log_file = None

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _reap(self, kill: bool) -> None:
        if self.proc is not None and self.proc.poll() is None and kill:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _spawn_and_wait(self, deadline: Optional[float] = None) -> None:
        self.starts += 1
        cmd = self.command()
        self._note("start #%d: %s" % (self.starts, " ".join(map(str, cmd))))
        self._close_log()
        self._log_file = open(self.log_path, "ab")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")  # plain broker.log (tracing-subscriber honours it)
        self.proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a ^C to pytest does not hit the broker first
            preexec_fn=_die_with_parent,
        )
        if deadline is None:
            deadline = time.monotonic() + self.start_timeout
        # 1. the port accepts TCP connections
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise BrokerError(
                    "broker exited with code %s during startup; log tail:\n%s"
                    % (rc, self.log_tail(30))
                )
            if port_accepts(self.host, self.port, timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise BrokerError(
                    "port %d not accepting connections within %.0f s; log tail:\n%s"
                    % (self.port, self.start_timeout, self.log_tail(30))
                )
            time.sleep(0.05)
        # 2. it answers ApiVersions v0 (a process that merely holds the port is not enough)
        while not _api_versions_probe(self.host, self.port, timeout=2.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BrokerError(
                    "broker on port %d accepts connections but does not answer ApiVersions "
                    "v0; log tail:\n%s" % (self.port, self.log_tail(30))
                )
            time.sleep(0.1)
        self.expect_down = False
        self._note("ready on %s (pid %d)" % (self.bootstrap, self.proc.pid))

    def __repr__(self) -> str:
        return "KaasBroker(%s, pid=%s, dir=%s)" % (
            self.bootstrap if self.port else "-",
            self.pid,
            self.workdir,
        )
