"""Bad input is refused with a clear error BEFORE anything is written.

Serialisation failures are ``JobStoreError`` (store-contract.md §2.19: "driver failure
(connection, serialisation)"); malformed requests are ``InvalidRequestError`` (a
``StoreDefect`` and a ``ValueError``, python-api.md / the brief); an empty ``history_ttl``
object is refused at construction (§2.3, invariant 58).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from store import (
    Complete,
    DedupePolicy,
    EnqueueRequest,
    InvalidRequestError,
    JobStoreError,
    StoreDefect,
    StoreFailure,
)
from tests.store.helpers import claim_id, counts_of, fold_head, req, store_keys

NON_JSON_PAYLOADS = [
    ("object", object()),
    ("set", {1, 2}),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("nested-object", {"ok": [1, {"bad": object()}]}),
    ("bytes", b"raw"),
    ("int-key", {"ok": {1: "a"}}),
]


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"n": 1}
    loop["self"] = [loop]
    return loop


class Snapshot:
    """The store's keyspace and counts right after construction (and a harmless read)."""

    def __init__(self, store: Any, client: Any, prefix: str) -> None:
        self.store = store
        self.client = client
        self.prefix = prefix
        store.counts()
        self.keys = store_keys(client, prefix)
        self.counts = store.counts()

    def assert_unchanged(self) -> None:
        assert store_keys(self.client, self.prefix) == self.keys
        assert self.store.counts() == self.counts


@pytest.fixture
def snapshot(store, redis_client, prefix) -> Snapshot:
    return Snapshot(store, redis_client, prefix)


def _mentions_payload_or_json(error: BaseException) -> bool:
    return re.search(r"payload|json", str(error), re.IGNORECASE) is not None


@pytest.mark.parametrize(
    ("label", "payload"), NON_JSON_PAYLOADS, ids=[p[0] for p in NON_JSON_PAYLOADS]
)
def test_non_json_payload_is_refused_before_writing(store, snapshot, label, payload):
    with pytest.raises(JobStoreError) as info:
        store.enqueue(req(id="bad-payload", payload=payload))
    assert _mentions_payload_or_json(info.value), str(info.value)
    assert isinstance(info.value, StoreFailure)
    snapshot.assert_unchanged()
    assert store.counts() == counts_of()
    assert store.get_job("bad-payload") is None


@pytest.mark.timeout(20)
def test_circular_payload_is_refused_promptly_before_writing(store, snapshot):
    with pytest.raises(
        JobStoreError, match="payload is not JSON-serialisable: it refers to itself"
    ):
        store.enqueue(req(id="loop", payload=_circular()))
    with pytest.raises(JobStoreError, match="refers to itself"):
        store.enqueue_many([req(payload={"fine": 1}), req(payload=_circular())])
    snapshot.assert_unchanged()


def test_non_json_exit_is_refused_and_job_stays_active(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    with pytest.raises(JobStoreError):
        store.ack(result.id, "t-1", Complete(object()))
    job = store.get_job(result.id)
    assert job.state == "active"
    assert job.attempts_made == 0
    assert store.get_attempts(result.id) == []
    store.ack(result.id, "t-1", Complete({"ok": True}))
    assert store.get_job(result.id).state == "completed"


def test_empty_dedupe_key_is_refused(store, snapshot):
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(dedupe=DedupePolicy(key="")))
    snapshot.assert_unchanged()


def test_extend_without_ttl_is_refused(store, snapshot):
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(dedupe={"key": "x", "extend": True}))
    snapshot.assert_unchanged()


@pytest.mark.parametrize("attempts_max", [0, -1, -100])
def test_non_positive_attempts_max_is_refused(store, snapshot, attempts_max):
    with pytest.raises(InvalidRequestError) as info:
        store.enqueue(req(attempts_max=attempts_max))
    assert isinstance(info.value, StoreDefect) and isinstance(info.value, ValueError)
    snapshot.assert_unchanged()


@pytest.mark.parametrize(
    "metadata",
    [{"n": 1}, {"n": None}, {"n": ["x"]}, {"n": {"x": "y"}}, {"n": True}, {1: "x"}],
    ids=["int", "none", "list", "dict", "bool", "non-string-key"],
)
def test_non_string_metadata_is_refused(store, snapshot, metadata):
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(metadata=metadata))
    snapshot.assert_unchanged()


def test_empty_job_name_is_refused(store, snapshot):
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(name=""))
    snapshot.assert_unchanged()


def test_empty_history_ttl_object_is_refused_at_construction(make_store):
    with pytest.raises(InvalidRequestError):
        make_store(history_ttl={})


def _batch_with(bad: Any, position: int, size: int = 1201) -> list[Any]:
    items = [req(id=f"ok-{i}", payload={"i": i}) for i in range(size)]
    items[position] = bad()
    return items


@pytest.mark.parametrize(
    ("label", "bad", "error"),
    [
        ("attempts-max", lambda: req(id="bad", attempts_max=0), InvalidRequestError),
        ("empty-name", lambda: req(id="bad", name=""), InvalidRequestError),
        ("metadata", lambda: req(id="bad", metadata={"n": 1}), InvalidRequestError),
        ("dedupe-key", lambda: req(id="bad", dedupe=DedupePolicy(key="")), InvalidRequestError),
        ("extend", lambda: req(id="bad", dedupe={"key": "k", "extend": True}), InvalidRequestError),
        ("payload", lambda: req(id="bad", payload={1, 2}), JobStoreError),
    ],
    ids=["attempts-max", "empty-name", "metadata", "dedupe-key", "extend", "payload"],
)
@pytest.mark.parametrize("position", [0, 700, 1200])
def test_one_bad_item_refuses_the_whole_batch(store, snapshot, label, bad, error, position):
    items = _batch_with(bad, position)
    with pytest.raises(error):
        store.enqueue_many(items)
    snapshot.assert_unchanged()
    assert store.get_job("ok-0") is None and store.get_job("ok-1199") is None


def test_bad_item_after_dedupe_items_refuses_the_whole_batch(store, snapshot):
    items = [req(payload={"i": i}, dedupe={"key": f"k-{i}"}) for i in range(5)]
    items.append(req(attempts_max=0))
    with pytest.raises(InvalidRequestError):
        store.enqueue_many(items)
    snapshot.assert_unchanged()
    assert store.enqueue(req(dedupe={"key": "k-0"})).duplicate is False


# ---------------------------------------------------------------- strings Redis cannot hold


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.list(name="\ud800"),
        lambda s: s.list(queue="q\udfff"),
        lambda s: s.list(cursor="1:\ud800"),
        lambda s: s.list(metadata={"k": "\ud800"}),
        lambda s: s.enqueue(EnqueueRequest(name="A", id="\ud800")),
        lambda s: s.enqueue(EnqueueRequest(name="A\ud800")),
        lambda s: s.enqueue(EnqueueRequest(name="A", dedupe={"key": "\ud800"})),
    ],
)
def test_lone_surrogates_are_refused_with_a_clear_error(store, call):
    with pytest.raises(InvalidRequestError, match="not valid Unicode"):
        call(store)
    assert store.counts() == dict.fromkeys(store.counts(), 0)


def test_non_utf8_data_written_by_a_foreign_client_is_a_store_error_at_boot(
    store, make_store, redis_client, prefix
):
    raw = redis_client.connection_pool.connection_class(
        **{**redis_client.connection_pool.connection_kwargs, "decode_responses": False}
    )
    store.enqueue(EnqueueRequest(name="A"))
    fold_head(store)
    try:
        # Into the chunk of the all-jobs set that holds the job (store/chunks.py).
        chunk = store.keys.chunk(
            store.keys.all, redis_client.zrange(store.keys.all, 0, 0)[0].split("\0")[1]
        )
        raw.send_command("ZADD", chunk, 0, b"\xff\xfe")
        raw.read_response()
        raw.send_command("DEL", "{" + prefix + "}:index:name:ready")
        raw.read_response()
    finally:
        raw.disconnect()
    with pytest.raises(JobStoreError, match="not UTF-8"):
        make_store()
