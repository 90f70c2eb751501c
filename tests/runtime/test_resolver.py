"""The worker's name resolver (jobs with no registered definition), worker ids in failure
exits, and handlers that raise SystemExit / KeyboardInterrupt."""

from __future__ import annotations

from typing import Any

import pytest

from store import EnqueueRequest, Job, StoreRegistry, Worker, system_clock
from store.jobs import JOBS, Unrecoverable, current_job
from tests.runtime.harness import eventually, running, state_of


class Resolver:
    """Serves queue "dyn": names listed in ``names``, handlers built on first use."""

    def __init__(self, store: Any, names: set[str]) -> None:
        self.store = store
        self.names_now = names
        self.listed = 0
        self.resolved: list[str] = []

    def queues(self) -> list[str]:
        return ["dyn"]

    def names(self, queue: str) -> set[str]:
        self.listed += 1
        return set(self.names_now) if queue == "dyn" else set()

    def resolve(self, name: str) -> Job:
        self.resolved.append(name)
        if name.startswith("bad."):

            def refuse(payload: Any) -> Any:
                raise Unrecoverable(f"{name} cannot run here")

            handler = refuse
        else:

            def handler(payload: Any) -> Any:
                return {"name": current_job().name, "payload": payload}

        definition = Job(name, store=self.store.store_key, handler=handler)
        JOBS.discard(definition)
        return definition


@pytest.fixture
def real_store(make_store: Any) -> Any:
    return make_store(clock=system_clock)


@pytest.fixture
def real_registry(real_store: Any) -> StoreRegistry:
    reg = StoreRegistry()
    reg.register(real_store)
    return reg


def test_resolver_names_are_claimed_and_resolved_once(real_store: Any, real_registry: Any) -> None:
    resolver = Resolver(real_store, {"a.one"})
    ids = [
        real_store.enqueue(EnqueueRequest(name="a.one", queue="dyn", payload={"n": n})).id
        for n in range(3)
    ]
    worker = Worker(real_store, registry=real_registry, resolver=resolver, burst=True)
    worker.run(install_signal_handlers=False)
    assert [real_store.get_job(i).state for i in ids] == ["completed"] * 3
    assert real_store.get_job(ids[0]).exit == {"name": "a.one", "payload": {"n": 0}}
    assert resolver.resolved == ["a.one"]  # built once, reused
    assert JOBS.get("a.one") is None  # not a registration


def test_a_name_the_resolver_does_not_list_is_left_alone(
    real_store: Any, real_registry: Any
) -> None:
    resolver = Resolver(real_store, {"a.one"})
    other = real_store.enqueue(EnqueueRequest(name="someone.else", queue="dyn")).id
    Worker(real_store, registry=real_registry, resolver=resolver, burst=True).run(
        install_signal_handlers=False
    )
    assert real_store.get_job(other).state == "waiting"
    assert resolver.resolved == []


def test_new_names_are_picked_up_by_a_running_worker(real_store: Any, real_registry: Any) -> None:
    resolver = Resolver(real_store, set())
    worker = Worker(real_store, registry=real_registry, resolver=resolver, poll_interval_ms=200)
    with running(worker):
        first = real_store.enqueue(EnqueueRequest(name="late.name", queue="dyn")).id
        resolver.names_now.add("late.name")
        # The enqueue woke the worker; its empty claim re-read the names (or the poll did).
        eventually(lambda: state_of(real_store, first) == "completed")


def test_a_failing_resolved_handler_fails_the_job_and_the_worker_goes_on(
    real_store: Any, real_registry: Any
) -> None:
    resolver = Resolver(real_store, {"bad.path", "good.path"})
    bad = real_store.enqueue(EnqueueRequest(name="bad.path", queue="dyn", attempts_max=3)).id
    good = real_store.enqueue(EnqueueRequest(name="good.path", queue="dyn")).id
    worker = Worker(real_store, registry=real_registry, resolver=resolver, burst=True)
    worker.run(install_signal_handlers=False)
    record = real_store.get_job(bad)
    assert record.state == "failed" and record.attempts_made == 1
    assert record.exit["error"]["message"] == "bad.path cannot run here"
    assert record.exit["error"]["worker"] == worker.worker_id
    assert real_store.get_job(good).state == "completed"


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_system_exit_in_a_handler_fails_the_job_not_the_worker(
    real_store: Any, real_registry: Any, kind: str, exc: type[BaseException]
) -> None:
    if kind == "sync":

        def handler(payload: Any) -> None:
            raise exc("leaving")

    else:

        async def handler(payload: Any) -> None:  # type: ignore[misc]
            raise exc("leaving")

    quitter = Job("Quitter", registry=real_registry, handler=handler)
    after = Job("After", registry=real_registry, handler=lambda payload: "still here")
    q = quitter.enqueue({})
    a = after.enqueue({})
    worker = Worker(real_store, [quitter, after], registry=real_registry, burst=True)
    worker.run(install_signal_handlers=False)
    record = real_store.get_job(q)
    assert record.state == "failed"
    assert record.exit["error"]["type"] == exc.__name__
    assert record.exit["error"]["module"] == "builtins"
    assert "leaving" in record.exit["error"]["traceback"]
    assert record.exit["error"]["worker"] == worker.worker_id
    assert real_store.get_job(a).exit == "still here"
    assert worker.stats["failed"] == 1 and worker.stats["completed"] == 1


def test_current_job_knows_its_worker(real_store: Any, real_registry: Any) -> None:
    job = Job("WhoAmI", registry=real_registry, handler=lambda payload: current_job().worker_id)
    job_id = job.enqueue({})
    worker = Worker(real_store, [job], registry=real_registry, burst=True, worker_id="w-named")
    worker.run(install_signal_handlers=False)
    assert real_store.get_job(job_id).exit == "w-named"
