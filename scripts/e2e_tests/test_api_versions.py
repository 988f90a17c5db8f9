"""The broker advertises every API it is meant to serve (see the brief in DESIGN.md)."""

from kaas_broker import api_versions

# api key -> name, for the APIs kaas serves today
SERVED = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    37: "CreatePartitions",
    42: "DeleteGroups",
    47: "OffsetDelete",
    60: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
}


def test_api_versions_lists_served_apis(kaas):
    versions = api_versions(kaas.host, kaas.port)
    print("advertised:", {SERVED.get(k, k): v for k, v in sorted(versions.items())})
    missing = [name for key, name in SERVED.items() if key not in versions]
    assert not missing, "not advertised: %s" % missing
    for key, (lo, hi) in versions.items():
        assert 0 <= lo <= hi, "api %d advertises versions %d..%d" % (key, lo, hi)
    # the versions every current client needs at least
    assert versions[0][1] >= 3, "Produce must reach v3 (record batches, magic 2)"
    assert versions[1][1] >= 4, "Fetch must reach v4 (record batches, isolation level)"
    assert versions[18][1] >= 3, "ApiVersions must reach v3 (flexible, KIP-511)"
    # topic-id based requests need topic ids in Metadata
    if versions[1][1] >= 13:
        assert versions[3][1] >= 10, "Fetch v13+ addresses topics by id: Metadata must reach v10"
