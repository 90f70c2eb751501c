"""WNS — named stores / multi-store routing (conformance-cases.md §26)."""

from __future__ import annotations

import pytest

from store import InvalidRequestError, Job, StoreRegistry, Worker
from tests.runtime.harness import running


@pytest.fixture
def durable(make_other_store, registry):
    """A second store under the key "durable" on its own prefix, registered next to "default"."""
    other = make_other_store(store_key="durable")
    registry.register(other)
    return other


def test_wns_01_job_bound_to_a_named_store_runs_on_it_isolated(store, durable, registry):
    invoice = Job(
        "GenerateInvoice",
        store="durable",
        metadata=lambda payload: {"invoiceId": payload["id"]},
        handler=lambda payload: f"generated {payload['id']}",
        registry=registry,
    )
    with running(Worker(durable, [invoice], registry=registry)):
        assert invoice.execute({"id": "inv-1"}, timeout_s=5) == "generated inv-1"
    assert durable.counts()["completed"] == 1
    assert store.counts()["completed"] == 0
    assert sum(store.counts().values()) == 0
    assert len(durable.list(metadata={"invoiceId": "inv-1"}).items) == 1
    # The producer needs that store: without it in the registry, enqueue is refused.
    lonely = StoreRegistry()
    lonely.register(store)
    orphan = Job("GenerateInvoice", store="durable", registry=lonely)
    with pytest.raises(InvalidRequestError):
        orphan.enqueue({"id": "inv-2"})


def test_wns_02_named_store_job_on_a_default_store_worker_fails(store, durable, registry):
    invoice = Job("Bound", store="durable", handler=lambda payload: None, registry=registry)
    worker = Worker(store, registry=registry)
    with pytest.raises(InvalidRequestError) as info:
        worker.register(invoice)
    assert "durable" in str(info.value) and "default" in str(info.value)
    with pytest.raises(InvalidRequestError):
        Worker(store, [invoice], registry=registry)


def test_wns_03_default_store_job_on_a_named_store_worker_fails(store, durable, registry):
    plain = Job("Plain", handler=lambda payload: None, registry=registry)
    worker = Worker(durable, registry=registry)
    with pytest.raises(InvalidRequestError):
        worker.register(plain)


def test_wns_04_two_workers_for_two_stores_coexist(store, durable, registry):
    ran: list[str] = []
    email = Job("Email", handler=lambda payload: ran.append("email"), registry=registry)
    sync = Job(
        "Sync", store="durable", handler=lambda payload: ran.append("sync"), registry=registry
    )
    with (
        running(Worker(store, [email], registry=registry)),
        running(Worker(durable, [sync], registry=registry)),
    ):
        email.execute({}, timeout_s=5)
        sync.execute({}, timeout_s=5)
    assert sorted(ran) == ["email", "sync"]
    assert store.counts()["completed"] == 1
    assert durable.counts()["completed"] == 1
