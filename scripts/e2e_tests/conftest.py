"""Fixtures for the kaas end-to-end suite.

`kaas`          a fresh broker (temp data dir, ephemeral 127.0.0.1 port) per test.
`kaas_factory`  start extra brokers with extra CLI args, e.g. ["--auto-create-topics", "false"].
`kafka_ref`     Apache Kafka (scripts/kafka-ref), one node for the whole session, started
                only when a selected test asks for it; skipped without Java (see kafka_ref.py).
`kaas_or_kafka` parametrized over both: the test runs once against a fresh kaas broker
                ("[kaas]" in its name) and once against the shared Kafka node ("[kafka]").
                `.name` says which one it got. Kafka is shared: use unique topics and groups.

Every broker a test started is ended at teardown, and when a test fails the tail of each
of its brokers' logs (Kafka's too) is attached to the failure report ("broker log") and
its temp dir (data + broker.log) is kept. A broker that died on its own during a test, or
did not exit 0 on SIGTERM at the end, fails the test's teardown.
"""

from __future__ import annotations

import itertools
import os
import uuid

import pytest

from kaas_broker import BrokerError, KaasBroker
from kafka_ref import KafkaRef, missing_prerequisite

_BROKERS_ATTR = "_kaas_brokers"
_FAILED_ATTR = "_kaas_failed"


def _register(request, broker: KaasBroker) -> None:
    brokers = getattr(request.node, _BROKERS_ATTR, None)
    if brokers is None:
        brokers = []
        setattr(request.node, _BROKERS_ATTR, brokers)
    brokers.append(broker)


def _start(request, extra_args=(), name="kaas") -> KaasBroker:
    broker = KaasBroker(extra_args=extra_args, name=name)
    _register(request, broker)  # register first: a failed start still shows its log
    try:
        broker.start()
    except BrokerError as e:
        broker.close()
        pytest.fail("could not start %s: %s" % (name, e), pytrace=False)
    return broker


def _finish(request, brokers) -> None:
    """Stop every broker; then fail the test's teardown if one had died on its own
    during the test, or did not exit 0 on SIGTERM (a graceful shutdown). The temp dir
    (data + broker.log) of a failed test is kept and its path printed."""
    problems = []
    failed = getattr(request.node, _FAILED_ATTR, False)
    for b in brokers:
        died = b.died_unexpectedly()
        rc = b.stop(timeout=10.0)
        problem = None
        if died is not None:
            problem = "%s exited on its own during the test (exit code %s)" % (b.name, died)
        elif rc not in (0, None):
            problem = "%s exited with code %s after SIGTERM (expected a clean 0)" % (b.name, rc)
        keep = failed or problem is not None
        if problem:
            problems.append("%s; log tail:\n%s" % (problem, b.log_tail(40)))
        b.close(keep=keep)
        if keep:
            print("kept %s's temp dir: %s" % (b.name, b.workdir))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def kaas(request):
    """A running broker; `.bootstrap`, `.data_dir`, `.kill9()`, `.restart()`."""
    broker = _start(request)
    try:
        yield broker
    finally:
        _finish(request, [broker])


@pytest.fixture
def kaas_factory(request):
    """Callable(extra_args=(), name=...) -> started KaasBroker; all closed at teardown."""
    started = []
    counter = itertools.count(1)

    def make(extra_args=(), name=None):
        b = _start(request, extra_args=extra_args, name=name or "kaas-%d" % next(counter))
        started.append(b)
        return b

    try:
        yield make
    finally:
        _finish(request, started)


@pytest.fixture(scope="session")
def kafka_ref(tmp_path_factory):
    """The session's Apache Kafka node, with its own state file; stopped at session end."""
    why = missing_prerequisite()
    if why is not None:
        pytest.skip("Apache Kafka cannot run here: %s" % why)
    node = KafkaRef(tmp_path_factory.mktemp("kafka-ref") / "run.state")
    try:
        node.start()
    except Exception as e:  # noqa: BLE001 - every Kafka-side test errors with the reason
        pytest.fail("could not start Apache Kafka: %s" % e, pytrace=False)
    print("\nApache Kafka started in %.1fs at %s" % (node.start_seconds, node.bootstrap))
    try:
        yield node
    finally:
        node.stop()


# kaas configured as scripts/kafka-ref configures Kafka, where the two defaults differ:
# Kafka's node runs with group.initial.rebalance.delay.ms=0 (the default is 3 s).
KAAS_AS_KAFKA_REF = ["--group-initial-rebalance-delay-ms", "0"]


@pytest.fixture(params=["kaas", "kafka"])
def kaas_or_kafka(request):
    """A fresh kaas broker, or the session's Kafka node: the same test, both brokers."""
    if request.param == "kaas":
        broker = _start(request, extra_args=KAAS_AS_KAFKA_REF)
        try:
            yield broker
        finally:
            _finish(request, [broker])
    else:
        node = request.getfixturevalue("kafka_ref")
        _register(request, node)  # its log tail goes into this test's failure report
        yield node


@pytest.fixture
def topic_name(request):
    """A topic name unique to this test (letters, digits, '-', '_', '.')."""
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in request.node.name)[:120]
    return "%s-%s" % (base, uuid.uuid4().hex[:8])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    setattr(item, _FAILED_ATTR, True)
    if report.when == "teardown":
        return  # the teardown failure message carries the log tail itself
    brokers = getattr(item, _BROKERS_ATTR, None) or []
    lines = int(os.environ.get("KAAS_E2E_LOG_LINES", "60"))
    for b in brokers:
        report.sections.append(
            (
                "broker log (%s, %s, %s, last %d lines)"
                % (b.name, b.bootstrap if b.port else "-", b.log_path, lines),
                b.log_tail(lines),
            )
        )

