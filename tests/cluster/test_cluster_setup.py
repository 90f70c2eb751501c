"""The private test cluster itself: three masters covering every slot."""

from __future__ import annotations

from typing import Any

import redis.cluster

from tests.cluster.conftest import PrivateCluster, prefixes_on_distinct_masters, slot_node


def test_the_cluster_has_three_masters_covering_every_slot(
    test_cluster: PrivateCluster, cluster_client: Any
) -> None:
    assert isinstance(cluster_client, redis.cluster.RedisCluster)
    primaries = cluster_client.get_primaries()
    assert len(primaries) == 3
    for port in test_cluster.ports:
        node = test_cluster.node(port)
        try:
            info = node.cluster("INFO")
            assert info["cluster_state"] == "ok"
            assert int(info["cluster_slots_ok"]) == 16384
        finally:
            node.close()
    print(f"cluster of {test_cluster.binary} v{test_cluster.version} on {test_cluster.ports}")


def test_a_store_prefix_maps_to_one_slot(cluster_client: Any) -> None:
    prefix = "orders"
    keys = [f"{{{prefix}}}:job:1", f"{{{prefix}}}:waiting:default\0Send", f"{{{prefix}}}:all"]
    slots = {cluster_client.keyslot(key) for key in keys}
    assert slots == {cluster_client.keyslot(prefix)}
    assert int(cluster_client.cluster_keyslot(keys[0])) in slots


def test_prefixes_on_distinct_masters_really_are(cluster_client: Any) -> None:
    prefixes = prefixes_on_distinct_masters(cluster_client, 3)
    owners = {slot_node(cluster_client, p).name for p in prefixes}
    assert len(owners) == 3
