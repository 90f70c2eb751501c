"""The store's public surface for applications (issue 25: a closed store boundary).

What ``mqadmin`` needs from the store is public here, so the app never touches the
store's Redis client, its key names or its private methods: the ``JobStore`` protocol,
index summaries, list plans, the resolvable names of name-resolving workers, a probe
client, the scripts probe, and the redis-py error types a raw client raises.
"""

from __future__ import annotations

import ast
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

import store as store_package
from store import (
    UNAVAILABLE_ERRORS,
    InvalidRequestError,
    JobStore,
    JobStoreError,
    ListIndexDisabledError,
    ListOrderUnsupportedError,
    RedisJobStore,
    check_prefix,
)
from store.connection import connect_probe
from store.indexes import index_status, index_summary, ready_marker_key
from store.keys import StoreKeys
from store.layout import plain_job_count
from store.listing import plan_list_query, plan_state_query
from store.scripts import probe_scripts
from tests.store.helpers import NO_WAKE_WINDOW_S, Waiter, claim_empty, req

STORE_DIR = Path(store_package.__file__).parent


@pytest.fixture
def dead_client() -> Iterator[Any]:
    client = redis.Redis(
        host="127.0.0.1",
        port=1,
        decode_responses=True,
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    yield client
    client.close()


# ---------------------------------------------------------------------- the protocol


def _shape(method: Any) -> str:
    """A method's signature as text (the protocol spells ``list`` as ``builtins.list``:
    its method ``list`` shadows the builtin in the class)."""
    return str(inspect.signature(method)).replace("builtins.", "")


def test_redis_job_store_implements_the_job_store_protocol(store: RedisJobStore) -> None:
    assert isinstance(store, JobStore)
    members = [name for name in dir(JobStore) if not name.startswith("_")]
    assert "client" not in members and "keys" not in members
    for name in members:
        declared = _shape(getattr(JobStore, name))
        assert declared == _shape(getattr(RedisJobStore, name)), name
    for name in JobStore.__annotations__:
        assert hasattr(store, name), name


# ---------------------------------------------------------------------- index summary


def test_index_summary_counts_the_known_index_sets(make_store: Any) -> None:
    store = make_store()
    for k in range(7):
        store.enqueue(req(name=f"n{k % 3}", queue=f"q{k % 2}"))
    summary = {s.kind: s for s in store.index_summary()}
    assert summary == {s.kind: s for s in index_summary(store)}
    status = {s.kind: s for s in index_status(store)}
    for kind, known in (("name", 3), ("queue", 2)):
        got = summary[kind]
        assert got.enabled and got.marker_present and got.bad_marker is None
        assert got.ready_at == status[kind].ready_at
        assert (got.zsets, got.members, got.known) == (known, 7, known)
        assert (got.zsets, got.members) == (status[kind].zsets, status[kind].members)


def test_index_summary_reports_missing_and_unreadable_markers(
    make_store: Any, redis_client: Any
) -> None:
    store = make_store(indexes={"name": True, "queue": False})
    store.enqueue(req(name="a", queue="q"))
    redis_client.set(ready_marker_key(store, "name"), "not-a-time" * 10)
    summary = {s.kind: s for s in store.index_summary()}
    assert summary["name"].ready_at is None
    assert summary["name"].bad_marker == ("not-a-time" * 10)[:40]
    assert summary["name"].marker_present
    queue = summary["queue"]
    assert not queue.enabled and not queue.marker_present and queue.ready_at is None
    assert (queue.zsets, queue.members, queue.known) == (0, 0, 1)


def test_index_summary_failures_are_job_store_errors(
    make_store: Any, dead_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    monkeypatch.setattr(store, "client", dead_client)
    with pytest.raises(JobStoreError) as failed:
        store.index_summary()
    assert isinstance(failed.value.cause, RedisError)


def test_ready_marker_key_names_the_marker_and_refuses_unknown_kinds(store: RedisJobStore) -> None:
    assert ready_marker_key(store, "queue") == StoreKeys(store.prefix).index_ready("queue")
    with pytest.raises(InvalidRequestError):
        ready_marker_key(store, "state")


# ---------------------------------------------------------------------- list plans


def test_plan_list_routes_like_list(make_store: Any) -> None:
    store = make_store(indexes={"name": True, "queue": False})
    keys = StoreKeys(store.prefix)
    for args in (
        {},
        {"name": "a", "states": ["failed"]},
        {"queue": "q", "states": ["delayed"], "order_by": "run_at", "order": "asc"},
        {"metadata": {"k": "v"}, "order": "asc"},
    ):
        assert store.plan_list(**args) == plan_list_query(
            keys,
            store.indexes,
            args.get("queue"),
            args.get("name"),
            args.get("states"),
            args.get("metadata"),
            args.get("order_by", "enqueued_at"),
            args.get("order", "desc"),
        )
    with pytest.raises(ListIndexDisabledError):
        store.plan_list(queue="q")
    with pytest.raises(ListOrderUnsupportedError):
        store.plan_list(order_by="run_at")
    with pytest.raises(InvalidRequestError):
        store.plan_list(order="sideways")


def test_plan_list_by_state_routes_like_list_by_state(store: RedisJobStore) -> None:
    store.enqueue(req(name="a", queue="q"))
    plan = store.plan_list_by_state(["failed"], queue="q")
    assert plan == plan_state_query(
        StoreKeys(store.prefix), ["failed"], "q", None, None, "desc", store.queue_name_pairs()
    )
    assert plan.order_field == "finished_at"
    with pytest.raises(ListOrderUnsupportedError):
        store.plan_list_by_state(["failed", "delayed"])


# ---------------------------------------------------------------------- resolvable names


def test_resolvable_names_round_trip(store: RedisJobStore) -> None:
    assert store.resolvable_names() == {}
    store.record_resolvable("default", "app.tasks.one")
    store.record_resolvable("default", "app.tasks.one")
    store.record_resolvable("default", "app.tasks.two")
    store.record_resolvable("other", "app.tasks.one")
    assert store.resolvable_names() == {
        "default": {"app.tasks.one", "app.tasks.two"},
        "other": {"app.tasks.one"},
    }


def test_record_resolvable_wakes_the_queue_only_when_asked(store: RedisJobStore) -> None:
    waiter = Waiter(store, ["default"], claim_empty(store).wake_token).start_parked()
    store.record_resolvable("default", "app.tasks.quiet")
    assert not waiter.done.wait(NO_WAKE_WINDOW_S), "woken without wake=True"
    store.record_resolvable("default", "app.tasks.loud", wake=True)
    assert waiter.outcome() is True


def test_resolvable_names_failures_are_job_store_errors(
    make_store: Any, dead_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    monkeypatch.setattr(store, "client", dead_client)
    for call in (store.resolvable_names, lambda: store.record_resolvable("q", "n")):
        with pytest.raises(JobStoreError):
            call()


# ---------------------------------------------------------------------- clients


@pytest.mark.parametrize(("close_client", "closes"), [(False, 0), (True, 1)])
def test_close_leaves_the_client_open_unless_asked(
    make_store: Any,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    close_client: bool,
    closes: int,
) -> None:
    client = store_package.connect(redis_url)
    real_close = client.close
    calls: list[str] = []
    monkeypatch.setattr(client, "close", lambda: calls.append("closed"))
    try:
        make_store(client=client).close(close_client=close_client)
    finally:
        real_close()
    assert len(calls) == closes


def test_connect_probe_fails_fast_and_never_retries(redis_url: str) -> None:
    client = connect_probe(redis_url, 0.25)
    try:
        assert client.ping()
        options = client.connection_pool.connection_kwargs
        assert options["socket_timeout"] == options["socket_connect_timeout"] == 0.25
        assert options["retry"].get_retries() == 0
    finally:
        client.close()
    started = time.monotonic()
    with pytest.raises(JobStoreError):
        connect_probe("redis://127.0.0.1:1/0", 0.25)
    assert time.monotonic() - started < 2.0


def test_probe_scripts_runs_the_probe_without_building_a_store(
    redis_client: Any, prefix: str, dead_client: Any
) -> None:
    found = probe_scripts(redis_client, prefix)
    assert found.ok and found.refusal is None and found.tag == "{" + prefix + "}"
    unreachable = probe_scripts(dead_client, prefix)
    assert not unreachable.ok and unreachable.refusal is None
    with pytest.raises(ValueError):
        probe_scripts(redis_client, "bad{prefix}")


def test_plain_job_count_counts_a_plain_all_set(
    redis_client: Any, prefix: str, dead_client: Any
) -> None:
    assert plain_job_count(redis_client, prefix) == 0
    redis_client.zadd(StoreKeys(prefix).all, {"j-1": 1, "j-2": 2, "j-3": 3})
    assert plain_job_count(redis_client, prefix) == 3
    with pytest.raises(JobStoreError):
        plain_job_count(dead_client, prefix)


def test_check_prefix_refuses_what_store_keys_refuses() -> None:
    check_prefix("mq")
    check_prefix("x[1]*")
    for bad in ("", "a{b", "a}b", "a\0b"):
        with pytest.raises(ValueError, match="store prefix"):
            check_prefix(bad)
        with pytest.raises(ValueError, match="store prefix"):
            StoreKeys(bad)


def test_unavailable_errors_are_the_raw_client_failures() -> None:
    assert set(UNAVAILABLE_ERRORS) == {RedisError, RedisClusterException}
    assert not issubclass(RedisClusterException, RedisError)  # why both are listed


# ---------------------------------------------------------------------- no import circle


def _run_time_imports(path: Path) -> set[str]:
    """The ``store.*`` modules a module imports when it runs (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for child in node.body for inner in ast.walk(child))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "store":
                found.update(f"store.{alias.name}" for alias in node.names)
            elif node.module.startswith("store."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("store."))
    return found


def test_errors_indexes_and_layout_sit_below_the_store_class() -> None:
    graph = {
        f"store.{path.stem}": _run_time_imports(path)
        for path in STORE_DIR.glob("*.py")
        if path.stem != "__init__"
    }

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for module in ("store.errors", "store.keys", "store.chunks", "store.indexes", "store.layout"):
        assert "store.redis_store" not in reaches(module), module
        assert module not in reaches(module), f"{module} imports itself through a circle"
    assert not (STORE_DIR / "index_admin.py").exists()
