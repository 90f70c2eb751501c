"""The living demo: `make run`'s worker (with the development project's demo handlers,
mqadmin/demo/jobs.py) runs what `seed_demo` enqueues -- jobs complete, fail, retry and
the demo flow's children report to their parent -- as real processes on a test prefix."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import pytest

from mqadmin.management.commands.seed_demo import FLOW_PARENT_ID
from store import RedisJobStore
from tests.commands.test_worker_commands import ROOT, manage, wait_for


@pytest.fixture
def demo_env(redis_url: str, prefix: str) -> dict[str, str]:
    env = {
        **os.environ,
        "MQ_REDIS_URL": redis_url,
        "MQ_STORES": json.dumps({"default": {"prefix": prefix}}),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        "MQ_DEMO": "1",
    }
    env.pop("MQ_JOB_MODULES", None)
    return env


def test_seed_demo_with_the_demo_worker_running_moves_within_seconds(
    redis_client: Any, prefix: str, demo_env: dict[str, str]
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    worker = manage(["runworker", "--poll-interval-ms", "500"], demo_env)
    try:
        # The worker is up first, as under `make run`.
        wait_for(lambda: store.live_workers(), timeout=60)
        [info] = store.live_workers()
        assert {"emails", "billing", "reports", "default", "maintenance"} <= set(info.queues)
        assert "BuildMonthlyReport" in info.queues["reports"]

        seed = manage(["seed_demo", "--jobs", "300", "--hours", "1"], demo_env)
        out, _ = seed.communicate(timeout=120)
        assert seed.returncode == 0, out
        # It kept the worker quiet while it wrote the history, then let it go.
        assert f"stay quiet while seeding: {info.worker_id}" in out
        assert f"Live workers resumed: {info.worker_id}" in out
        # The counts when the data was in, before the worker was let go.
        seeded = {
            state: int(n)
            for state, n in re.findall(
                r"(waiting|completed) (\d+)", out.split("Seeded store", 1)[1]
            )
        }
        assert seeded["waiting"] >= 10, out
        # Most of the backlog completes (the demo handlers fail some of it, as they should).
        goal = seeded["completed"] + seeded["waiting"] // 2
        # How far the flow was when the data was in: read from the command's report, not the
        # store, since the worker (already let go) may have relayed every report it could by
        # the time this test would look; the last child waits out its stalled lock (20 s).
        found = re.search(r"(\d+) of (\d+) children reported", out)
        assert found is not None, out
        reported, children = int(found[1]), int(found[2])
        assert reported < children, out

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            counts = store.counts()
            flow = store.get_job(FLOW_PARENT_ID).flow  # type: ignore[union-attr]
            if counts["completed"] >= goal and flow.completed + flow.failed > reported:
                break
            time.sleep(0.2)
        counts = store.counts()
        flow = store.get_job(FLOW_PARENT_ID).flow  # type: ignore[union-attr]
        # The backlog completed, and the flow's children reported to their parent.
        assert counts["completed"] >= goal, (seeded, counts)
        assert flow.completed + flow.failed > reported, flow
        # Its presence record counts what it did.
        wait_for(
            lambda: any(w.totals.get("completed", 0) >= 10 for w in store.live_workers()),
            timeout=15,
        )
    finally:
        if worker.poll() is None:
            worker.terminate()
        out, _ = worker.communicate(timeout=30)
        store.close()
    assert worker.returncode == 0, out[-3000:]
