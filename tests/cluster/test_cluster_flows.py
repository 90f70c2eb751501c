"""A flow across stores that live on different cluster masters, run by real workers.

The parent store and the two child stores are placed (by prefix) on three different
masters, so every fan-out, child enqueue, outbox relay and child report crosses nodes:
each store's scripts stay on its own slot, and the cross-store traffic is Python calls
between stores, never one script touching two stores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store import (
    Flow,
    FlowState,
    Job,
    RedisJobStore,
    StoreRegistry,
    Worker,
    child_job_id,
    children,
)
from tests.cluster.conftest import (
    delete_cluster_prefix,
    prefixes_on_distinct_masters,
    slot_node,
)
from tests.flows.helpers import drive, running, state_of

EMAILS = 12
SMS = 8


@pytest.fixture
def spread_stores(
    cluster_client: Any, make_store: Callable[..., RedisJobStore]
) -> Iterator[dict[str, RedisJobStore]]:
    """Stores "main", "email" and "sms", each on a prefix owned by a different master."""
    prefixes = prefixes_on_distinct_masters(cluster_client, 3)
    try:
        yield {
            key: make_store(prefix=prefix, store_key=key)
            for key, prefix in zip(("main", "email", "sms"), prefixes, strict=True)
        }
    finally:
        for prefix in prefixes:
            delete_cluster_prefix(cluster_client, prefix)


def test_a_flow_with_parent_and_children_on_three_masters_settles_and_collects_everything(
    cluster_client: Any, spread_stores: dict[str, RedisJobStore], clock: Any
) -> None:
    main, email, sms = spread_stores["main"], spread_stores["email"], spread_stores["sms"]
    owners = {slot_node(cluster_client, s.prefix).name for s in spread_stores.values()}
    slots = {cluster_client.keyslot(s.keys.all) for s in spread_stores.values()}
    assert len(owners) == 3 and len(slots) == 3  # three slots on three masters

    registry = StoreRegistry()  # private: nothing leaks into store.default_registry
    for store in spread_stores.values():
        registry.register(store)
    digest = Job("Digest", store="main", registry=registry)
    send_email = Job(
        "SendEmail",
        store="email",
        queue="email",
        handler=lambda payload: f"mail:{payload['user']}",
        registry=registry,
    )

    def send_sms(payload: dict[str, str]) -> str:
        if payload["user"] == "s3":
            raise RuntimeError("no such number")
        return f"sms:{payload['user']}"

    send_text = Job("SendSms", store="sms", queue="sms", handler=send_sms, registry=registry)
    flow = Flow("notify", parent=digest, children=[send_email, send_text])

    @flow.fan_out
    def fan_out(payload: dict[str, Any]) -> Any:
        return [
            children(send_email, [(f"e{i}", {"user": f"e{i}"}) for i in range(EMAILS)]),
            children(send_text, [(f"s{i}", {"user": f"s{i}"}) for i in range(SMS)]),
        ]

    seen: dict[str, Any] = {}

    @flow.collect
    def collect(payload: dict[str, Any], results: Any) -> dict[str, int]:
        seen["counts"] = results.counts
        seen["all"] = results.all()
        return {"ok": results.counts.completed, "failed": results.counts.failed}

    with running(
        Worker(main, [digest], registry=registry),
        Worker(email, [send_email], registry=registry, concurrency=4),
        Worker(sms, [send_text], registry=registry, concurrency=2),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        drive(
            clock,
            lambda: state_of(main, pid) == "completed",
            step_ms=200,
            timeout=60,
            message="the parent settles",
        )

    assert digest.await_result(pid, timeout_s=1) == {"ok": EMAILS + SMS - 1, "failed": 1}
    assert seen["counts"] == FlowState(pending=0, completed=EMAILS + SMS - 1, failed=1)
    everything = seen["all"]
    values = sorted(r.value for r in everything["completed"])
    assert values == sorted(
        [f"mail:e{i}" for i in range(EMAILS)] + [f"sms:s{i}" for i in range(SMS) if i != 3]
    )
    assert [(r.key, r.name) for r in everything["failed"]] == [("s3", "SendSms")]
    assert everything["failed"][0].error["message"] == "no such number"
    assert everything["cancelled"] == []
    # Every child really ran in its own store (on its own master), and all reports landed.
    assert email.counts()["completed"] == EMAILS
    assert sms.counts()["completed"] == SMS - 1 and sms.counts()["failed"] == 1
    for i in range(EMAILS):
        assert state_of(email, child_job_id("main", pid, f"e{i}")) == "completed"
    assert email.outbox_depth() == 0 and sms.outbox_depth() == 0
    assert main.get_job(pid).flow == FlowState(completed=EMAILS + SMS - 1, failed=1)
    # Each store's keys live on its own master only (three masters hold data).
    for store in spread_stores.values():
        holders = {
            node.name
            for node in cluster_client.get_primaries()
            if any(
                True
                for _ in cluster_client.scan_iter(
                    match=store.keys.tag + "*", count=1000, target_nodes=node
                )
            )
        }
        assert holders == {slot_node(cluster_client, store.prefix).name}
