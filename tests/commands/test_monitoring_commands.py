"""runworker --metrics-port (one process, and --processes N summed), and mqhealth."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from store import EnqueueRequest, RedisJobStore
from tests.commands.test_worker_commands import manage, wait_for


@pytest.fixture
def env(redis_url: str, prefix: str) -> dict[str, str]:
    from tests.commands.test_worker_commands import ROOT

    return {
        **os.environ,
        "MQ_REDIS_URL": redis_url,
        "MQ_STORES": json.dumps({"default": {"prefix": prefix}}),
        "MQ_JOB_MODULES": "tests.commands.sample_jobs,tests.commands.metrics_jobs",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
    }


@pytest.fixture
def store(redis_client: Any, prefix: str) -> Iterator[RedisJobStore]:
    job_store = RedisJobStore(redis_client, prefix=prefix)
    yield job_store
    job_store.close()


class Lines:
    """A process's output, read line by line in the background."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r}; saw {self.seen}") from None
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def total(samples: dict[str, Any], sample: str, /, **labels: str) -> float:
    return sum(
        v
        for k, v in samples.get(sample, {}).items()
        if all(dict(k).get(key) == want for key, want in labels.items())
    )


def mqhealth(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = manage(["mqhealth", *args], env)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_runworker_serves_its_metrics_and_mqhealth_sees_it(
    store: RedisJobStore, env: dict[str, str]
) -> None:
    assert mqhealth(env, "--worker")[0] == 1  # no worker yet
    proc = manage(["runworker", "--metrics-port", "0", "--poll-interval-ms", "200"], env)
    try:
        lines = Lines(proc)
        url = lines.wait_for(r"metrics at (http://\S+)").group(1)
        ids = [
            r.id
            for r in store.enqueue_many(
                [EnqueueRequest(name="Echo", payload={"n": i}) for i in range(5)]
            )
        ]
        failing = store.enqueue(EnqueueRequest(name="AlwaysFails")).id
        wait_for(
            lambda: (
                all(store.get_job(i).state == "completed" for i in ids)
                and store.get_job(failing).state == "failed"
            )
        )
        samples = scrape(url)
        assert (
            total(
                samples,
                "mq_job_duration_seconds_count",
                name="Echo",
                queue="default",
                outcome="completed",
            )
            == 5
        )
        assert (
            total(samples, "mq_job_duration_seconds_count", name="AlwaysFails", outcome="failed")
            == 1
        )
        assert total(samples, "mq_job_attempts_total", name="Echo") == 5
        assert total(samples, "mq_jobs_in_flight") == 0
        assert "mq_lock_lost_total" in samples
        # The presence heartbeat of this host is fresh.
        code, out = mqhealth(env, "--worker")
        assert code == 0, out
        assert "1 live worker(s)" in out
        # A worker with queues is not a sweeper.
        assert mqhealth(env, "--sweepers")[0] == 1
        assert mqhealth(env, "--worker", "--queue", "default")[0] == 0
        assert mqhealth(env, "--worker", "--queue", "nobody-serves-this")[0] == 1
        assert mqhealth(env, "--worker", "--host", "some-other-host")[0] == 1
    finally:
        stop(proc)
    assert proc.returncode == 0, lines.seen
    # A clean stop removes the presence entry: the probe fails again.
    assert mqhealth(env, "--worker")[0] == 1


def test_runworker_processes_sum_their_children_metrics(
    store: RedisJobStore, env: dict[str, str]
) -> None:
    proc = manage(
        ["runworker", "--processes", "2", "--metrics-port", "0", "--poll-interval-ms", "200"], env
    )
    try:
        lines = Lines(proc)
        url = lines.wait_for(r"metrics at (http://\S+)").group(1)
        pids = lines.wait_for(r"supervising 2 worker processes: \[(\d+), (\d+)\]").groups()
        ids = [
            r.id
            for r in store.enqueue_many(
                [EnqueueRequest(name="Echo", payload={"n": i}) for i in range(40)]
            )
        ]
        wait_for(lambda: all(store.get_job(i).state == "completed" for i in ids))
        wait_for(lambda: len(store.live_workers()) == 2)
        samples = scrape(url)
        assert total(samples, "mq_job_attempts_total", name="Echo") == 40
        assert (
            total(samples, "mq_job_duration_seconds_count", name="Echo", outcome="completed") == 40
        )
        assert total(samples, "mq_jobs_in_flight") == 0
        assert sorted(str(w.pid) for w in store.live_workers()) == sorted(pids)
        assert mqhealth(env, "--worker")[0] == 0
    finally:
        stop(proc)
    assert proc.returncode == 0, lines.seen


def test_mqhealth_checks_the_stores(env: dict[str, str]) -> None:
    code, out = mqhealth(env)
    assert code == 0 and "1 store(s) answering" in out
    broken = {
        **env,
        "MQ_STORES": json.dumps(
            {"default": {"prefix": "x", "url": "redis://:hunter2@127.0.0.1:1/0"}}
        ),
    }
    code, out = mqhealth(broken)
    assert code == 1
    assert "not answering: default" in out
    assert "hunter2" not in out
    code, out = mqhealth(env, "--store", "nope")
    assert code == 1 and "no store named 'nope'" in out


def test_mqhealth_sweepers_sees_runsweepers(store: RedisJobStore, env: dict[str, str]) -> None:
    assert mqhealth(env, "--sweepers")[0] == 1
    proc = manage(["runsweepers"], env)
    try:
        lines = Lines(proc)
        lines.wait_for(r"sweeping store default")
        wait_for(lambda: mqhealth(env, "--sweepers")[0] == 0, timeout=30)
        # Sweepers serve no queue: they do not pass for a worker.
        assert mqhealth(env, "--worker")[0] == 1
        code, out = mqhealth(env, "--worker", "--sweepers")
        assert code == 1 and "not both" in out
    finally:
        stop(proc)
    assert proc.returncode == 0, lines.seen


def test_runsweepers_metrics_count_recovered_stalls(
    store: RedisJobStore, env: dict[str, str]
) -> None:
    from store import Claimed

    stalled = store.enqueue(EnqueueRequest(name="Echo", queue="default")).id
    claimed = store.claim(queue="default", names=["Echo"], token="dead:1", lock_duration_ms=1)
    assert isinstance(claimed, Claimed) and claimed.job.id == stalled
    proc = manage(["runsweepers", "--metrics-port", "0", "--stalled-interval-ms", "200"], env)
    try:
        lines = Lines(proc)
        url = lines.wait_for(r"metrics at (http://\S+)").group(1)
        wait_for(lambda: store.get_job(stalled).state == "waiting")
        wait_for(lambda: total(scrape(url), "mq_stalled_recovered_total", outcome="requeued") == 1)
    finally:
        stop(proc)
    assert proc.returncode == 0, lines.seen
