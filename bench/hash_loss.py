"""Proof under damaged state: workers drain jobs while another process deletes job hashes.

    .venv/bin/python -m bench.hash_loss --jobs 20000 --workers 4 --loss 0.01

``--workers`` worker processes (real ``python -c`` children running :class:`store.Worker`
with a short lock, 1.5 s, and a stall sweep every 0.5 s) drain ``--jobs`` jobs (a tenth of
them delayed by up to 2 s, priorities mixed) while a separate *deleter* process removes
random job hashes -- about ``--loss`` of them, in every state, only the hash, as eviction or
a careless ``DEL`` would -- leaving their ids in the sorted sets.  Half-way through (once
it holds claimed jobs), the driver SIGKILLs one worker, so its held jobs stall and must be
recovered by the others (after hashes were already deleted under the active set: the case
that used to poison stalled recovery for the whole store).

Checks: no worker exits on its own, and the survivors stop cleanly on SIGTERM; every job
whose hash survived is completed, with exactly one terminal entry in its ledger; then
``manage.py mqcheck --repair`` (the real command, in a child process) exits 0 or 1 and a
second ``manage.py mqcheck`` exits 0, and ``counts()`` equals a recount of the surviving
hashes per (queue, state).  Runs on a redis-server of its own (see bench/chaos.py); the
test ``tests/chaos/test_hash_loss.py`` runs it at CI size.  Exit status 0 when every check
passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `store` and `bench` importable
    sys.path.insert(0, str(REPO))

from bench.chaos import (  # noqa: E402
    Log,
    PrivateRedis,
    Report,
    WorkerProc,
    _stderr,
    child_env,
    side_key,
)
from store import TERMINAL_STATES, EnqueueRequest, RedisJobStore, connect  # noqa: E402

#: The worker process.  argv: url, prefix, JSON config, worker id.
WORKER_SCRIPT = r"""
import signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.stderr.write("loss-worker-ready\n")
sys.stderr.flush()
import json, logging, time
from store import Job, RedisJobStore, StoreRegistry, Worker, connect

url, prefix, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
store = RedisJobStore(connect(url), prefix=prefix)
registry = StoreRegistry()
registry.register(store)

def work(payload):
    time.sleep(payload["ms"] / 1000)
    return payload["n"]

job = Job("LossJob", handler=work, registry=registry)
Worker(
    store, [job], concurrency=cfg["concurrency"], prefetch=cfg["prefetch"],
    lock_duration_ms=cfg["lock_ms"], stalled_interval_ms=cfg["stalled_ms"],
    max_stalled_count=1000, poll_interval_ms=200, registry=registry,
    worker_id=sys.argv[4],
).run()
"""

#: The deleter process.  argv: url, prefix; its JSON config (with the job ids) on stdin.
#: Deletes random job hashes (only the hash) at a steady rate, SADDs each deleted id to
#: a side key, then prints "done".
DELETER_SCRIPT = r"""
import json, random, sys, time
import redis
url, prefix, cfg = sys.argv[1], sys.argv[2], json.loads(sys.stdin.read())
client = redis.Redis.from_url(url, decode_responses=True)
rng = random.Random(cfg["seed"])
ids = cfg["ids"]
rng.shuffle(ids)
victims = ids[: cfg["count"]]
pause = cfg["spread_s"] / max(1, len(victims))
tag = "{" + prefix + "}"
for job_id in victims:
    if client.delete(f"{tag}:job:{job_id}"):
        client.sadd(cfg["deleted_key"], job_id)
    time.sleep(pause)
print("done", flush=True)
"""


@dataclass
class LossConfig:
    jobs: int = 20_000
    workers: int = 4
    concurrency: int = 4
    prefetch: int = 4
    loss: float = 0.01
    max_ms: int = 4
    delayed_share: float = 0.1
    lock_ms: int = 1500
    stalled_ms: int = 500
    spread_s: float = 8.0
    timeout_s: float = 300.0
    seed: int | None = None


def _manage(url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.update(
        {
            "MQ_REDIS_URL": url,
            "MQ_PREFIX": prefix,
            "MQ_STORES": "",
            "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        }
    )
    env.setdefault("DJANGO_SECRET_KEY", "hash-loss-bench")
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "mqcheck", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=300,
    )


def _spawn(url: str, prefix: str, conf: dict[str, Any], path: Path, index: int) -> WorkerProc:
    handle = path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, url, prefix, json.dumps(conf), _worker_id(index)],
        env=child_env(),
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=handle,
    )
    handle.close()
    return WorkerProc(proc, path, time.monotonic(), index)


def _worker_id(index: int) -> str:
    return f"loss-worker-{index}"


def _holds_jobs(store: RedisJobStore, worker_id: str) -> bool:
    """Whether the worker holds a claimed job (its lock tokens are "<worker id>:<n>")."""
    ids = store.client.zrange(store.keys.active, 0, 499)
    pipe = store.client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(store.keys.job(job_id), "lock_token")
    return any(token and token.startswith(f"{worker_id}:") for token in pipe.execute())


def _surviving(store: RedisJobStore, ids: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        pipe = store.client.pipeline(transaction=False)
        for job_id in chunk:
            pipe.hmget(store.keys.job(job_id), "state", "queue")
        for job_id, (state, queue) in zip(chunk, pipe.execute(), strict=True):
            if state is not None:
                out[job_id] = {"state": state, "queue": queue}
    return out


def run_hash_loss(
    url: str, prefix: str, cfg: LossConfig, workdir: Path, log: Log = _stderr
) -> Report:
    """Run the fault test against ``url`` (a private server) under ``prefix``."""
    rng = random.Random(cfg.seed)
    report = Report()
    client = connect(url)
    store = RedisJobStore(client, prefix=prefix)
    deleted_key = side_key(prefix, "deleted")
    requests = []
    for n in range(cfg.jobs):
        delayed = rng.random() < cfg.delayed_share
        requests.append(
            EnqueueRequest(
                name="LossJob",
                payload={"ms": rng.randint(0, cfg.max_ms), "n": n},
                priority=rng.choice((0, 0, 0, 1, 5)),
                delay_ms=rng.randint(1, 2000) if delayed else 0,
            )
        )
    ids: list[str] = []
    for start in range(0, len(requests), 500):
        ids.extend(r.id for r in store.enqueue_many(requests[start : start + 500]))
    log(f"hash-loss: {len(ids)} jobs enqueued")
    conf = {
        "concurrency": cfg.concurrency,
        "prefetch": cfg.prefetch,
        "lock_ms": cfg.lock_ms,
        "stalled_ms": cfg.stalled_ms,
    }
    victims = max(1, int(cfg.jobs * cfg.loss))
    deleter = subprocess.Popen(
        [sys.executable, "-c", DELETER_SCRIPT, url, prefix],
        env=child_env(),
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers: list[WorkerProc] = []
    started = time.monotonic()
    killed: WorkerProc | None = None
    victim: WorkerProc | None = None
    crashed: list[str] = []
    finished_at: float | None = None
    try:
        workers.extend(
            _spawn(url, prefix, conf, workdir / f"worker-{i}.log", i) for i in range(cfg.workers)
        )
        assert deleter.stdin is not None
        deleter.stdin.write(
            json.dumps(
                {
                    "seed": rng.randrange(1 << 30),
                    "ids": ids,
                    "count": victims,
                    "spread_s": cfg.spread_s,
                    "deleted_key": deleted_key,
                }
            )
        )
        deleter.stdin.close()
        while True:
            now = time.monotonic()
            if now - started > cfg.timeout_s:
                report.problem(
                    f"the surviving jobs did not all complete within {cfg.timeout_s:.0f} s: "
                    f"counts {store.counts()}"
                )
                break
            # Half-way, and only once the victim holds jobs (on a slow machine a
            # worker may still be starting then): its jobs must stall.
            if killed is None and now - started >= cfg.spread_s / 2:
                victim = victim or rng.choice(workers)
                if _holds_jobs(store, _worker_id(victim.index)):
                    killed = victim
                    os.kill(killed.pid, signal.SIGKILL)
                    killed.proc.wait(10)
                    log(f"hash-loss: SIGKILLed worker pid {killed.pid}")
            for w in workers:
                if w is not killed and not w.reported and w.proc.poll() is not None:
                    w.reported = True
                    crashed.append(f"worker pid {w.pid} exited on its own:\n{w.log_tail()}")
            if killed is not None and deleter.poll() is not None:
                survivors = _surviving(store, ids)
                if all(row["state"] in TERMINAL_STATES for row in survivors.values()):
                    finished_at = time.monotonic()
                    break
            time.sleep(0.25)
    finally:
        for w in workers:
            if w is not killed and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in workers:
            if w is killed:
                continue
            try:
                code = w.proc.wait(30)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait(10)
                report.problem(f"worker pid {w.pid} did not stop within 30 s of SIGTERM")
                continue
            if code != 0 and not w.reported:
                report.problem(f"worker pid {w.pid} exited with {code} on SIGTERM:\n{w.log_tail()}")
        if deleter.poll() is None:
            deleter.kill()
        deleter.wait(10)
        if deleter.returncode != 0:
            report.problem(
                f"the deleter exited {deleter.returncode}: {deleter.stderr.read()[-2000:]}"
            )
    report.problems.extend(crashed)
    wall = (finished_at or time.monotonic()) - started
    deleted = set(client.smembers(deleted_key))
    survivors = _surviving(store, ids)
    log(f"hash-loss: drained in {wall:.1f} s, {len(deleted)} hashes deleted; verifying")

    states = Counter(row["state"] for row in survivors.values())
    if set(states) - {"completed"}:
        report.problem(f"surviving jobs not completed: {dict(states)}")
    if len(survivors) + len(deleted) != len(ids):
        report.problem(
            f"{len(ids)} jobs, {len(deleted)} deleted, but {len(survivors)} hashes survive"
        )
    twice = stalled = 0
    for start in range(0, len(ids), 500):
        chunk = [job_id for job_id in ids[start : start + 500] if job_id in survivors]
        for job_id in chunk:
            # Through the store: layout 2 folds a job's last run into its hash.
            outcomes = [attempt.outcome for attempt in store.get_attempts(job_id)]
            stalled += "stalled" in outcomes
            terminal = [o for o in outcomes if o in TERMINAL_STATES]
            if len(terminal) != 1:
                twice += 1
                if twice <= 10:
                    report.problem(f"job {job_id}: {len(terminal)} terminal ledger entries")

    repair = _manage(url, prefix, "--repair")
    if repair.returncode not in (0, 1):
        report.problem(f"mqcheck --repair exited {repair.returncode}:\n{repair.stderr[-2000:]}")
    check = _manage(url, prefix)
    if check.returncode != 0:
        report.problem(
            f"mqcheck after --repair exited {check.returncode}:\n{check.stdout[-2000:]}"
            f"{check.stderr[-2000:]}"
        )
    expected: Counter[tuple[str, str]] = Counter(
        (row["queue"], row["state"]) for row in survivors.values()
    )
    counters = {
        (queue, state): n
        for queue, per_state in store.counts_by_queue().items()
        for state, n in per_state.items()
        if n
    }
    if counters != dict(expected):
        report.problem(f"counters {counters} differ from the rows {dict(expected)}")
    repaired_lines = [line for line in repair.stdout.splitlines() if "found" in line]
    report.figures = {
        "jobs": len(ids),
        "worker processes (one SIGKILLed)": cfg.workers,
        "job hashes deleted": len(deleted),
        "surviving jobs completed": states.get("completed", 0),
        "jobs with a stall in their ledger": stalled,
        "jobs with other than one terminal ledger entry": twice,
        "wall time to drain (s)": round(wall, 1),
        "mqcheck --repair exit": repair.returncode,
        "mqcheck --repair found": "; ".join(s.strip() for s in repaired_lines) or "-",
        "mqcheck after repair exit": check.returncode,
    }
    client.delete(deleted_key)
    store.close()
    client.close()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--loss", type=float, default=0.01, help="share of hashes deleted")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--redis-server", default=None, help="redis-server binary to use")
    args = parser.parse_args(argv)
    cfg = LossConfig(jobs=args.jobs, workers=args.workers, loss=args.loss, seed=args.seed)
    server = PrivateRedis(args.redis_server).start()
    try:
        with tempfile.TemporaryDirectory(prefix="mq-hash-loss-") as workdir:
            report = run_hash_loss(server.url, "hash-loss", cfg, Path(workdir))
    finally:
        server.close()
    sys.stdout.write(report.table("hash loss under load") + "\n")
    return 0 if not report.problems else 1


if __name__ == "__main__":
    sys.exit(main())
