"""The Django service layer on a cluster: ``MQ_REDIS_URL=redis+cluster://...`` just works."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis.cluster

from mqadmin import services
from store import EnqueueRequest
from tests.cluster.conftest import PrivateCluster


@pytest.fixture
def cluster_settings(settings: Any, cluster_url: str, prefix: str) -> Iterator[Any]:
    """MQ_REDIS_URL on the cluster, one store "default" on this test's prefix; caches reset."""
    settings.MQ_REDIS_URL = cluster_url
    settings.MQ_STORES = {"default": {"prefix": prefix}}
    services.reset()
    try:
        yield settings
    finally:
        services.reset()


def test_get_named_store_counts_on_a_cluster_url(
    cluster_settings: Any, test_cluster: PrivateCluster, prefix: str
) -> None:
    job_store = services.get_named_store("default")
    assert isinstance(job_store.client, redis.cluster.RedisCluster)
    assert job_store.prefix == prefix
    assert sum(job_store.counts().values()) == 0

    job_store.enqueue(EnqueueRequest(name="Send", queue="mail"))
    job_store.enqueue(EnqueueRequest(name="Send", queue="mail", delay_ms=60_000))
    assert services.get_named_store("default") is job_store  # cached
    counts = services.get_named_store("default").counts()
    assert (counts["waiting"], counts["delayed"]) == (1, 1)

    (overview,) = services.store_overviews()
    assert overview.error is None, overview.error
    assert overview.counts["waiting"] == 1
    assert overview.server_version == test_cluster.version  # one version across the nodes
    assert overview.redis == cluster_settings.MQ_REDIS_URL
