"""Changing a topic's configs after creation (issue 12), as admin clients do it:
confluent-kafka's incremental_alter_configs (IncrementalAlterConfigs) and kafka-python's
alter_configs (AlterConfigs, which replaces the topic's whole set), each read back with
describe_configs. Same assertions on kaas and on Apache Kafka."""

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from helpers import ck_admin, ck_create_topic, wait_for

T = 20  # admin call timeout, seconds
DEFAULT = object()  # in `_settles`: the config is at its default


def _describe(admin, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)


def _settles(admin, topic, want):
    """Waits until DescribeConfigs shows `want` (name -> value, or DEFAULT). An accepted
    change is not at once in every broker's answer: Kafka's broker applies it from the
    metadata log a moment after its controller committed it, a kaas broker other than the
    one that made it in its next ownership round."""
    seen = {}

    def shown():
        got = _describe(admin, topic)
        seen.update({k: (got[k].value, got[k].is_default) for k in want})
        return all(got[k].is_default if v is DEFAULT else got[k].value == v for k, v in want.items())

    wait_for(shown, T, what="configs %s, last seen %s" % (sorted(want), seen))


def _incremental(admin, topic, *ops, validate_only=False):
    """Runs one IncrementalAlterConfigs of (name, op, value) triples; the error code or None."""
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, op, value in ops]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    fut = admin.incremental_alter_configs([res], request_timeout=T, validate_only=validate_only)[res]
    try:
        fut.result(timeout=T)
        return None
    except KafkaException as e:
        return e.args[0].code()


def test_confluent_incremental_alter_configs(kaas_or_kafka, topic_name):
    admin = ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"retention.ms": "86400000"})
    SET, DELETE, APPEND, SUBTRACT = (AlterConfigOpType.SET, AlterConfigOpType.DELETE,
                                     AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT)

    assert _incremental(admin, topic_name, ("retention.bytes", SET, "1048576"),
                        ("cleanup.policy", APPEND, "compact")) is None
    # retention.ms, not named, stays as it was.
    _settles(admin, topic_name, {"retention.bytes": "1048576", "cleanup.policy": "delete,compact",
                                 "retention.ms": "86400000"})

    # Refused whole: nothing of the request applies.
    assert _incremental(admin, topic_name, ("retention.bytes", SET, "5"),
                        ("retention.ms", SET, "soon")) == KafkaError.INVALID_CONFIG
    assert _incremental(admin, topic_name, ("no.such.config", SET, "1")) == KafkaError.INVALID_CONFIG
    assert _incremental(admin, topic_name, ("retention.ms", APPEND, "1")) == KafkaError.INVALID_CONFIG
    assert _incremental(admin, topic_name, ("retention.ms", SET, "1"), validate_only=True) is None
    got = _describe(admin, topic_name)
    assert (got["retention.ms"].value, got["retention.bytes"].value) == ("86400000", "1048576")

    assert _incremental(admin, topic_name, ("retention.ms", DELETE, None),
                        ("cleanup.policy", SUBTRACT, "delete")) is None
    _settles(admin, topic_name, {"retention.ms": DEFAULT, "cleanup.policy": "compact"})

    assert _incremental(admin, topic_name + "-missing", ("retention.ms", SET, "1")) \
        == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_alter_configs_both_apis(kaas_or_kafka, topic_name):
    """kafka-python 3 alters with IncrementalAlterConfigs where the broker serves it and with
    AlterConfigs when told to (`incremental=False`), re-sending the topic's other overrides
    itself (AlterConfigs replaces the whole set): both keep what was set before."""
    from kafka.admin import ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient

    ck_create_topic(kaas_or_kafka.bootstrap, topic_name, 1, {"retention.ms": "86400000"})
    admin = KafkaAdminClient(bootstrap_servers=kaas_or_kafka.bootstrap, request_timeout_ms=T * 1000)

    def alter(configs, **kw):
        res = KpResource(ConfigResourceType.TOPIC, topic_name, configs=configs)
        return admin.alter_configs([res], **kw)["topic"][topic_name]

    try:
        assert alter({"retention.bytes": "2097152"}) == "OK"
        # AlterConfigs is built from what DescribeConfigs shows: wait until it shows it.
        _settles(ck_admin(kaas_or_kafka.bootstrap), topic_name, {"retention.bytes": "2097152"})
        assert alter({"segment.bytes": "4194304"}, incremental=False) == "OK"
        refused = alter({"segment.bytes": "-5"}, incremental=False)
        assert "InvalidConfiguration" in refused, refused
        refused = alter({"retention.ms": "soon"})
        assert "InvalidConfiguration" in refused, refused
    finally:
        admin.close()
    _settles(ck_admin(kaas_or_kafka.bootstrap), topic_name,
             {"retention.ms": "86400000", "retention.bytes": "2097152", "segment.bytes": "4194304"})


def _broker_resource(name, ops):
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops]
    return ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)


def _alter_broker(admin, name, *ops, validate_only=False):
    """One IncrementalAlterConfigs of a BROKER resource: None, or the error code.
    (confluent-kafka refuses an empty resource name, so the cluster default "" is not
    reachable from it: net/tests/broker_configs.rs and the differential suite cover it.)"""
    res = _broker_resource(name, ops)
    fut = admin.incremental_alter_configs([res], request_timeout=T, validate_only=validate_only)[res]
    try:
        fut.result(timeout=T)
        return None
    except KafkaException as e:
        return e.args[0].code()


def _source(entry):
    """A ConfigEntry's source as its wire number (an enum or an int, by client version)."""
    return int(getattr(entry.source, "value", entry.source))


def _describe_broker(admin, name):
    res = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([res], request_timeout=T)[res].result(timeout=T)


def test_confluent_dynamic_broker_config(kaas_or_kafka, topic_name):
    """KIP-226 with confluent-kafka's AdminClient: a per-broker log.retention.ms is validated,
    set, described with its source and synonyms, becomes a new topic's default, and is
    deleted again (Kafka's node is shared: the test leaves its broker config as it was)."""
    from confluent_kafka.admin import ConfigSource

    admin = ck_admin(kaas_or_kafka.bootstrap)
    broker = str(next(iter(admin.list_topics(timeout=T).brokers)))
    SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    day = "86400000"

    # Refused whole, as Kafka refuses them: a static config, a bad value, another broker's id.
    assert _alter_broker(admin, broker, ("log.retention.ms", SET, day),
                         ("broker.id", SET, "7")) == KafkaError.INVALID_REQUEST
    assert _alter_broker(admin, broker, ("log.retention.ms", SET, "soon")) \
        == KafkaError.INVALID_REQUEST
    assert _alter_broker(admin, broker, ("log.retention.ms", SET, day), validate_only=True) is None
    got = _describe_broker(admin, broker).get("log.retention.ms")
    assert got is None or _source(got) != ConfigSource.DYNAMIC_BROKER_CONFIG.value, \
        "validate_only changed it"
    # Only the ms spelling of a time is dynamic, in Kafka as in kaas.
    assert _describe_broker(admin, broker)["log.retention.hours"].is_read_only
    assert _alter_broker(admin, broker, ("log.retention.hours", SET, "1"), validate_only=True) \
        == KafkaError.INVALID_REQUEST

    try:
        assert _alter_broker(admin, broker, ("log.retention.ms", SET, day)) is None

        def dynamic():
            e = _describe_broker(admin, broker)["log.retention.ms"]
            return e.value == day and _source(e) == ConfigSource.DYNAMIC_BROKER_CONFIG.value

        wait_for(dynamic, T, what="a dynamic log.retention.ms")
        e = _describe_broker(admin, broker)["log.retention.ms"]
        assert not e.is_read_only
        synonyms = [(s.name, s.value, _source(s)) for s in e.synonyms.values()]
        assert synonyms[0] == ("log.retention.ms", day, ConfigSource.DYNAMIC_BROKER_CONFIG.value), \
            synonyms
        # Kafka's node may also set it statically (STATIC_BROKER_CONFIG); the value is the same.
        assert any(n == "log.retention.hours" and v == "168" for n, v, _ in synonyms), synonyms

        # A new topic that sets no retention.ms takes the broker's, and says so.
        ck_create_topic(admin, topic_name, 1)
        r = _describe(admin, topic_name)["retention.ms"]
        assert (r.value, _source(r)) == (day, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        assert _alter_broker(admin, broker, ("log.retention.ms", DELETE, None)) is None

    def gone():
        e = _describe_broker(admin, broker).get("log.retention.ms")
        return e is None or _source(e) != ConfigSource.DYNAMIC_BROKER_CONFIG.value

    wait_for(gone, T, what="log.retention.ms back to its default")
