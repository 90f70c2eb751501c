"""A 10,000-child flow end to end with real workers, on a private redis-server.

    .venv/bin/python -m bench.flow_bench                     # 10,000 children, 3 runs
    .venv/bin/python bench/flow_bench.py --children 2000 --runs 1

Per run (fresh key prefixes): a parent job "BenchDigest" (parent store, store key "main") fans
out ``--children`` no-op children "BenchLeaf" into a second store ("children"); one worker per
store runs in a thread of this process (the child worker with ``--concurrency`` takers), with
the outbox relay and the flow sweeper as in production.  Timed, on the wall clock:

* **fan-out ack (staging)**: the ``FanOut`` ack alone (manifest rows staged in 500-row chunks,
  committed by the last chunk);
* **child enqueue**: the worker's ``enqueue_many`` of the children into their store;
* **child processing + relay**: from the first child enqueue call to the report that settles
  the parent (children run while later enqueue chunks still land, so this overlaps the
  previous row);
* **whole flow**: parent enqueue -> parent ``completed`` (fan-out handler, ack, enqueue,
  children, relay, collect).

Each is reported as children/s (median of ``--runs``, with min-max).  The longest single Redis
call comes from the server's SLOWLOG (``slowlog-log-slower-than 1000`` µs, reset before each run,
``SLOWLOG GET 128`` at the end; every entry is read when more than 128 were logged), with the
command (EVALSHA/FCALL calls are named after their store script).  Target: < 50 ms.

The server is started with ``redis-server --port N --save "" --appendonly no --daemonize yes``
on a free loopback port (never 6379) and shut down at the end, also on errors and Ctrl-C.  The
Markdown table goes to stdout, progress to stderr; exit status 1 if the target fails.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import redis

from store import Flow, FlowState, Job, RedisJobStore, StoreRegistry, Worker, children, connect
from store.scripts import script_names, script_text

SLOWLOG_US = 1000
SLOWLOG_GET = 128
SLOWLOG_KEEP = 4096
TARGET_MS = 50.0
PHASES = (
    ("fanout_ack", "fan-out ack (staging)"),
    ("enqueue", "child enqueue"),
    ("processing", "child processing + relay"),
    ("whole", "whole flow"),
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- private server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return port if port != 6379 else free_port()


@contextlib.contextmanager
def private_redis(binary: str) -> Iterator[str]:
    """A daemonized redis-server on a free loopback port, no persistence; shut down on exit."""
    tmpdir = tempfile.mkdtemp(prefix="flow-bench-")
    port = 0
    started = False
    try:
        for _ in range(3):  # the port may be taken between free_port() and bind
            port = free_port()
            subprocess.run(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--daemonize", "yes", "--dir", tmpdir, "--pidfile", os.path.join(tmpdir, "redis.pid"),
                 "--logfile", os.path.join(tmpdir, "redis.log")],
                check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            if _wait_ready(port):
                started = True
                break
        if not started:
            raise RuntimeError(f"could not start {binary} (see {tmpdir}/redis.log)")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if started:
            with contextlib.suppress(redis.RedisError):
                redis.Redis(host="127.0.0.1", port=port, socket_timeout=10).shutdown(nosave=True)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _wait_ready(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            try:
                client.ping()
                return True
            except redis.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        client.close()


# ---------------------------------------------------------------------- one run


@dataclass
class RunResult:
    children: int
    seconds: dict[str, float]
    slowlog: list[tuple[int, str]] = field(default_factory=list)
    slowlog_len: int = 0
    flow: FlowState | None = None

    def rate(self, phase: str) -> float:
        return self.children / self.seconds[phase] if self.seconds[phase] > 0 else float("inf")

    def longest(self) -> tuple[float, str]:
        if not self.slowlog:
            return 0.0, "(none over 1 ms)"
        us, command = max(self.slowlog)
        return us / 1000, command


class Marks:
    """Wall-clock instants of the phases, recorded by wrappers around store calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[str, float] = {}

    def first(self, name: str) -> None:
        with self.lock:
            self.at.setdefault(name, time.perf_counter())

    def last(self, name: str) -> None:
        with self.lock:
            self.at[name] = time.perf_counter()


def _instrument(main: RedisJobStore, child: RedisJobStore, marks: Marks) -> None:
    """Instance attributes shadow the methods of these two stores only (bench instrumentation)."""
    ack, enqueue_many, record = main.ack, child.enqueue_many, main.record_child_results

    def timed_ack(job_id: str, token: str, outcome: Any) -> Any:
        is_fan_out = type(outcome).__name__ == "FanOut"
        if is_fan_out:
            marks.first("fanout_start")
        result = ack(job_id, token, outcome)
        if is_fan_out:
            marks.last("fanout_end")
        return result

    def timed_enqueue_many(requests: Any) -> Any:
        marks.first("enqueue_start")
        result = enqueue_many(requests)
        marks.last("enqueue_end")
        return result

    def timed_record(reports: Any) -> Any:
        results = record(reports)
        if any(r.parent_settled for r in results):
            marks.first("settled")
        return results

    main.ack = timed_ack  # type: ignore[method-assign]
    child.enqueue_many = timed_enqueue_many  # type: ignore[method-assign]
    main.record_child_results = timed_record  # type: ignore[method-assign]


def _script_names() -> dict[str, str]:
    """EVALSHA digests of the store's scripts -> script names (Redis < 7 or without Functions)."""
    return {hashlib.sha1(script_text(name).encode()).hexdigest(): name for name in script_names()}


def _label(command: Any, shas: dict[str, str]) -> str:
    if isinstance(command, bytes):
        command = command.decode("utf-8", "replace")
    parts = command.split() if isinstance(command, str) else [str(c) for c in command]
    if not parts:
        return "?"
    verb = parts[0].upper()
    if verb in ("EVALSHA", "EVALSHA_RO") and len(parts) > 1:
        return f"EVALSHA {shas.get(parts[1], parts[1][:12])}"
    if verb in ("FCALL", "FCALL_RO") and len(parts) > 1:
        # Functions of the store's library are named mq_<digest>_<script>.
        return f"FCALL {re.sub(r'^mq_[0-9a-f]+_', '', parts[1])}"
    return " ".join(parts[:2])[:60]


def run_once(url: str, n: int, concurrency: int, timeout: float) -> RunResult:
    client = connect(url)
    tag = uuid.uuid4().hex[:10]
    main = RedisJobStore(client, prefix=f"flowbench-{tag}", store_key="main")
    child = RedisJobStore(client, prefix=f"flowbench-{tag}-children", store_key="children")
    registry = StoreRegistry()
    registry.register(main)
    registry.register(child)
    parent = Job("BenchDigest", store="main", registry=registry)
    leaf = Job("BenchLeaf", store="children", handler=lambda payload: None, registry=registry)
    flow = Flow("bench", parent=parent, children=[leaf])
    flow.fan_out(lambda payload: children(leaf, [(f"c{i:06d}", {"i": i}) for i in range(n)]))
    flow.collect(lambda payload, results: {"completed": results.counts.completed})
    marks = Marks()
    _instrument(main, child, marks)
    shas = _script_names()

    workers = [
        Worker(main, [parent], registry=registry),
        Worker(child, [leaf], registry=registry, concurrency=concurrency),
    ]
    threads = [threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}, daemon=True)
               for w in workers]  # fmt: skip
    client.config_set("slowlog-log-slower-than", SLOWLOG_US)
    client.config_set("slowlog-max-len", SLOWLOG_KEEP)
    client.slowlog_reset()
    for t in threads:
        t.start()
    try:
        time.sleep(0.2)  # takers parked
        started = time.perf_counter()
        pid = flow.enqueue({})
        deadline = started + timeout
        while True:
            record = main.get_job(pid)
            if record is not None and record.state in ("completed", "failed", "cancelled"):
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(
                    f"the flow did not finish within {timeout} s (state {record and record.state})"
                )
            time.sleep(0.005)
        finished = time.perf_counter()
        if record.state != "completed":
            raise RuntimeError(
                f"the parent ended {record.state}: {record.failed_reason or record.exit}"
            )
    finally:
        for w in workers:
            w.request_stop()
        for t in threads:
            t.join(30)
    count = client.slowlog_len()
    entries = client.slowlog_get(SLOWLOG_GET)
    if count > SLOWLOG_GET:
        entries = client.slowlog_get(count)
    slowlog = [(int(e["duration"]), _label(e.get("command", ""), shas)) for e in entries]
    at = marks.at
    seconds = {
        "fanout_ack": at["fanout_end"] - at["fanout_start"],
        "enqueue": at["enqueue_end"] - at["enqueue_start"],
        "processing": at["settled"] - at["enqueue_start"],
        "whole": finished - started,
    }
    result = RunResult(n, seconds, slowlog, count, record.flow)
    for store in (main, child):
        store.close()
    _delete_prefix(client, f"flowbench-{tag}")
    _delete_prefix(client, f"flowbench-{tag}-children")
    client.close()
    return result


def _delete_prefix(client: Any, prefix: str) -> None:
    batch: list[str] = []
    for key in client.scan_iter(match="{" + prefix + "}*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


# ---------------------------------------------------------------------- report


def _fmt_rate(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def report(results: list[RunResult], version: str, concurrency: int) -> bool:
    n = results[0].children
    print(f"### Flow bench: {n:,} children, {len(results)} run(s) "
          f"(redis-server {version}, private; child worker concurrency {concurrency})\n")  # fmt: skip
    print("| phase | children/s, median [min-max] | seconds, median |")
    print("|---|---:|---:|")
    for key, title in PHASES:
        rates = [r.rate(key) for r in results]
        secs = statistics.median(r.seconds[key] for r in results)
        print(f"| {title} | {_fmt_rate(rates)} | {secs:.3f} |")
    longest = max((r.longest() for r in results), key=lambda x: x[0])
    logged = max(r.slowlog_len for r in results)
    ok = longest[0] < TARGET_MS
    print(f"| longest single Redis call (SLOWLOG > {SLOWLOG_US // 1000} ms) | "
          f"{longest[0]:.2f} ms: `{longest[1]}` | target < {TARGET_MS:.0f} ms: "
          f"**{'PASS' if ok else 'FAIL'}** |")  # fmt: skip
    print()
    print(
        f"SLOWLOG entries over {SLOWLOG_US // 1000} ms per run: "
        + ", ".join(str(r.slowlog_len) for r in results)  # fmt: skip
        + (f" (more than {SLOWLOG_GET}: all were read)" if logged > SLOWLOG_GET else "")
    )
    by_command: dict[str, list[int]] = {}
    for r in results:
        for us, command in r.slowlog:
            by_command.setdefault(command, []).append(us)
    top = sorted(by_command.items(), key=lambda kv: -max(kv[1]))[:6]
    if top:
        print(
            "Slowest commands (all runs; count over 1 ms, max): "
            + "; ".join(f"`{c}` x{len(v)}, {max(v) / 1000:.1f} ms" for c, v in top)
        )
    flows = {str(r.flow) for r in results}
    print(f"Final parent counters: {', '.join(sorted(flows))}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--children", type=int, default=10_000, help="children per flow (default 10,000)"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="repetitions; medians reported (default 3)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="child worker takers (default 8)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per flow")
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    if args.children < 1 or args.runs < 1:
        parser.error("--children and --runs must be positive")
    if not args.redis_server:
        parser.error("no redis-server on PATH (pass --redis-server)")
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with private_redis(args.redis_server) as url:
        version = redis.Redis.from_url(url).info("server")["redis_version"]
        log(f"private redis-server {version} at {url}")
        results = []
        for run in range(1, args.runs + 1):
            log(f"run {run}/{args.runs}: {args.children:,} children ...")
            result = run_once(url, args.children, args.concurrency, args.timeout)
            log("  " + ", ".join(f"{title} {result.rate(key):,.0f}/s" for key, title in PHASES)
                + f"; longest call {result.longest()[0]:.2f} ms ({result.longest()[1]})")  # fmt: skip
            results.append(result)
    return 0 if report(results, version, args.concurrency) else 1


if __name__ == "__main__":
    sys.exit(main())
