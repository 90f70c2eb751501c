"""Crash tests with real processes (store-contract.md §6 crash matrix, §4.4 chunked FanOut).

(a) A relay SIGKILLed after ``record_child_results`` landed but before ``delete_outbox``: the
    next relay redelivers, the redelivered reports are ``applied: False``, counters stay exact.
(b) A worker SIGKILLed in the middle of a chunked fan-out (1,200 children, after the first
    500-row chunk): stall recovery hands the parent to a new worker, whose first chunk clears
    the staged rows; the flow settles with every child completed exactly once.

Each child process runs ``python -c <script>`` with ``PYTHONPATH`` = the repo; it writes a
marker file at the crash point and then blocks until the test SIGKILLs it (by its pid).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import (
    Claimed,
    Complete,
    Fail,
    Flow,
    FlowState,
    Job,
    RedisJobStore,
    StoreRegistry,
    Worker,
    children,
    system_clock,
)
from store.flow_runtime import relay_outbox
from tests.flows.helpers import eventually, fanout_parent, outcomes, rows, running, spec, state_of

REPO = str(Path(__file__).resolve().parents[2])

RELAY_SCRIPT = r"""
import sys, time
from store import FakeClock, RedisJobStore, StoreRegistry, connect
from store.flow_runtime import relay_outbox

url, prefix, marker, now = sys.argv[1:5]
client = connect(url)
clock = FakeClock(int(now))
main = RedisJobStore(client, prefix=prefix, store_key="main", clock=clock)
child = RedisJobStore(client, prefix=prefix + "-children", store_key="children", clock=clock)
real_record = main.record_child_results

def record(reports):
    results = real_record(reports)          # the reports land ...
    with open(marker, "w") as f:            # ... then we die before delete_outbox
        f.write(str(sum(r.applied for r in results)) + " " + str(len(reports)))
    while True:
        time.sleep(60)

main.record_child_results = record
registry = StoreRegistry()
registry.register(main)
registry.register(child)
relay_outbox(child, registry)
"""

FAN_OUT_SCRIPT = r"""
import sys, time
from store import Flow, Job, RedisJobStore, StoreRegistry, Worker, children, connect

url, prefix, marker = sys.argv[1:4]
client = connect(url)
main = RedisJobStore(client, prefix=prefix, store_key="main")
child = RedisJobStore(client, prefix=prefix + "-children", store_key="children")
registry = StoreRegistry()
registry.register(main)
registry.register(child)
digest = Job("CrashDigest", store="main", attempts=3, registry=registry)
email = Job("CrashEmail", store="children", handler=lambda payload: "old", registry=registry)
flow = Flow("crash", parent=digest, children=[email])
flow.fan_out(lambda payload: children(email, [("old-%04d" % i, {"i": i}) for i in range(1200)]))
flow.collect(lambda payload, results: "collected by the crashed worker")
real_run = main._run

def run(script, *args):
    reply = real_run(script, *args)
    if script == "fan_out" and int(args[7]) > 0:   # the first staging chunk landed
        with open(marker, "w") as f:
            f.write(str(args[7]))
        while True:
            time.sleep(60)
    return reply

main._run = run
Worker(main, [digest], registry=registry, lock_duration_ms=1000, maintenance=False).run(
    install_signal_handlers=False
)
"""


class Child:
    """A ``python -c`` child process that the test SIGKILLs by pid."""

    def __init__(self, script: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": REPO}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_for(self, marker: Path, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                return marker.read_text()
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                pytest.fail(f"child exited early ({self.proc.returncode}):\n{out}\n{err}")
            time.sleep(0.02)
        pytest.fail(f"child never reached the crash point (no {marker})")

    def sigkill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        assert self.proc.returncode == -signal.SIGKILL


@pytest.fixture
def child_process() -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for child in made:
        if child.proc.poll() is None:
            os.kill(child.proc.pid, signal.SIGKILL)
            child.proc.wait(10)
        for stream in (child.proc.stdout, child.proc.stderr):
            if stream is not None:
                stream.close()


def test_relay_killed_between_record_and_delete_redelivers_without_double_counting(
    main_store: RedisJobStore,
    child_store: RedisJobStore,
    registry: StoreRegistry,
    redis_url: str,
    prefix: str,
    clock: Any,
    tmp_path: Path,
    child_process: list[Child],
) -> None:
    keys = [f"k{i:04d}" for i in range(700)]
    pid = fanout_parent(main_store, keys, store_key="children")
    child_store.enqueue_many([spec(pid, k, store_key="children").request for k in keys])
    expected: dict[str, str] = {}
    for i, key in enumerate(keys):
        child_id = f"flow/main/{pid}/{key}"
        if i % 7 == 6:
            child_store.cancel(child_id)  # 100 cancelled while waiting
            expected[key] = "cancelled"
            continue
        claimed = child_store.claim(
            queue="default", names=["ChildJob"], token=f"t-{key}", lock_duration_ms=30000
        )
        assert isinstance(claimed, Claimed) and claimed.job.id == child_id
        if i % 7 == 5:
            child_store.ack(child_id, f"t-{key}", Fail({"why": key}))
            expected[key] = "failed"
        else:
            child_store.ack(child_id, f"t-{key}", Complete({"done": key}))
            expected[key] = "completed"
    assert child_store.outbox_depth() == 700
    assert Counter(expected.values()) == {"completed": 500, "failed": 100, "cancelled": 100}

    marker = tmp_path / "recorded"
    relay = Child(RELAY_SCRIPT, redis_url, prefix, str(marker), str(clock()))
    child_process.append(relay)
    applied_first, first_page = (int(x) for x in relay.wait_for(marker).split())
    relay.sigkill()
    assert (applied_first, first_page) == (500, 500)
    # The reports of the first page landed, but nothing was deleted.
    assert child_store.outbox_depth() == 700
    parent = main_store.get_job(pid)
    assert parent is not None and parent.state == "waiting-children"
    assert parent.flow is not None and parent.flow.pending == 200 and parent.flow.total == 700

    seen: list[Any] = []
    real_record = main_store.record_child_results

    def spy(reports: Any) -> Any:
        results = real_record(reports)
        seen.extend(results)
        return results

    main_store.record_child_results = spy  # type: ignore[method-assign]
    assert relay_outbox(child_store, registry) == 700
    assert len(seen) == 700
    assert [r.applied for r in seen[:500]] == [False] * 500, "a redelivered report applied twice"
    assert [r.applied for r in seen[500:]] == [True] * 200
    assert sum(r.parent_settled for r in seen) == 1
    assert child_store.outbox_depth() == 0
    parent = main_store.get_job(pid)
    assert parent is not None and parent.state == "waiting"
    assert parent.flow == FlowState(completed=500, failed=100, cancelled=100)
    assert {r.child_key: r.status for r in rows(main_store, pid)} == expected


def test_worker_killed_mid_chunked_fan_out_recovers_and_settles_exactly(
    make_store: Any,
    extra_store: Any,
    registry: StoreRegistry,
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    child_process: list[Child],
) -> None:
    main = registry.register(make_store(store_key="main", clock=system_clock))
    child = extra_store("children", "children", clock=system_clock)
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def email_handler(payload: dict[str, int]) -> str:
        with lock:
            calls[f"new-{payload['i']:04d}"] += 1
        return f"new:{payload['i']}"

    digest = Job("CrashDigest", store="main", attempts=3, registry=registry)
    email = Job("CrashEmail", store="children", handler=email_handler, registry=registry)
    flow = Flow("crash", parent=digest, children=[email])
    flow.fan_out(lambda payload: children(email, [(f"new-{i:04d}", {"i": i}) for i in range(1200)]))
    collected: dict[str, Any] = {}

    @flow.collect
    def collect(payload: Any, results: Any) -> dict[str, int]:
        collected["values"] = {r.key: r.value for r in results.stream()}
        return {"completed": results.counts.completed}

    pid = digest.enqueue({})
    marker = tmp_path / "staged"
    crashed = Child(FAN_OUT_SCRIPT, redis_url, prefix, str(marker))
    child_process.append(crashed)
    assert crashed.wait_for(marker) == "500"
    crashed.sigkill()
    parent = main.get_job(pid)
    assert parent is not None and parent.state == "active" and parent.flow is None
    staged = rows(main, pid)
    assert len(staged) == 500 and all(r.child_key.startswith("old-") for r in staged)
    assert sum(child.counts().values()) == 0  # no child was enqueued by the crashed attempt

    with running(
        Worker(
            main,
            [digest],
            registry=registry,
            # The crashed child's own 1 s lock makes the recovery quick; the attempt that
            # recovers holds a longer one, so a loaded machine (a CI pass of six test
            # workers on two cores) that delays its heartbeat past 1 s does not count as a
            # second stall (max_stalled_count=1 would then fail the job).
            lock_duration_ms=10_000,
            stalled_interval_ms=300,
            max_stalled_count=1,
            flow_sweep_interval_ms=2000,
        ),
        Worker(child, [email], registry=registry, concurrency=4, flow_sweep_interval_ms=2000),
    ):
        eventually(lambda: state_of(main, pid) in ("completed", "failed", "cancelled"), timeout=90)
    assert digest.await_result(pid, timeout_s=1) == {"completed": 1200}
    assert outcomes(main, pid) == ["stalled", "fanned-out", "completed"]
    final = rows(main, pid)
    assert [r.child_key for r in final] == [f"new-{i:04d}" for i in range(1200)], (
        "staged old rows survived"
    )
    assert all(r.status == "completed" for r in final)
    flow_state = main.get_job(pid).flow
    assert flow_state == FlowState(completed=1200)
    assert (
        flow_state.pending + flow_state.completed + flow_state.failed + flow_state.cancelled == 1200
    )
    assert calls == Counter({f"new-{i:04d}": 1 for i in range(1200)}), "a child ran twice or never"
    assert collected["values"] == {f"new-{i:04d}": f"new:{i}" for i in range(1200)}
    assert child.counts()["completed"] == 1200 and sum(child.counts().values()) == 1200
    assert child.outbox_depth() == 0
    sample = [f"new-{i:04d}" for i in range(0, 1200, 97)]
    for key in sample:
        child_id = next(r.child_job_id for r in final if r.child_key == key)
        assert outcomes(child, child_id) == ["completed"]
