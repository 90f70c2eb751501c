"""Drain speed as users run the worker: the prefetch defaults, and ``runworker --processes``.

    .venv/bin/python -m bench.drain_bench                          # N = 20,000, 3 runs
    .venv/bin/python -m bench.drain_bench --n 5000 --runs 1 --only prefetch

Everything runs on a private redis-server (FLUSHALLed before every run, a fresh key prefix per
run), by default with no CPU pinning (``--cpu-pin none``): ``--processes 2`` needs both cores.

**prefetch**: N no-op jobs drained by one ``store.Worker(concurrency=C)`` process in burst mode
(bench/limits_bench.py's drain: the workers start, wait for a common signal, drain; timed from
the signal to the last worker's return) with prefetch 1 (the default before "auto"), ``auto``
(the default) and fixed batches; *best tuned* is the fastest fixed one.  Target: auto >= 0.8x
the best tuned.

**processes**: the same N jobs drained by ``manage.py runworker --processes P`` (the project's
defaults, ``--concurrency``), P = 1 and 2.  The queue is paused while the workers start
(Django's start-up is not timed), then resumed; timed from the resume to the moment the store
counts N completed (polled every 20 ms).  Target: 2 processes >= 1.6x one, on 2 cores.

Per run: jobs/s, the Redis time per job (every command's ``usec`` in INFO commandstats), the
server's own CPU per job (``used_cpu_sys + used_cpu_user`` of INFO cpu over the run) and, for
runworker, the worker processes' CPU (``/proc/<pid>/stat``), each also as a share of one core
over the run: which of client and server CPU bounds the drain.  Medians of ``--runs``, each run
measuring every variant in an order rotated from run to run.  Markdown on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    fmt_per_s,
    med,
    quiet_logging,
    rotated,
    server_cpu_s,  # noqa: E402
    spread,
    tree_commit,
)
from bench.limits_bench import (  # noqa: E402
    QUEUE,
    DrainRun,
    drain_run,
    enqueue_noops,
)
from bench.throughput import (  # noqa: E402
    CPU_PIN_MODES,
    CpuPlan,
    private_bench,
)
from store import RedisJobStore, connect  # noqa: E402

PREFETCH_TARGET = 0.8
PROCESSES_TARGET = 1.6
OLD_DEFAULT = "1"
AUTO = "auto"
#: Commands of the probe itself, left out of the Redis time.
PROBE_COMMANDS = ("cmdstat_config|resetstat", "cmdstat_info")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcessesRun:
    """One ``runworker --processes P`` drain."""

    drain: DrainRun
    client_cpu_s: float


def _redis_us(stats: dict[str, Any]) -> int:
    return sum(
        int(v.get("usec", 0))
        for k, v in stats.items()
        if isinstance(v, dict) and k not in PROBE_COMMANDS
    )


def _proc_cpu_seconds(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def runworker_drain(
    url: str, prefix: str, processes: int, args: argparse.Namespace, cpu: CpuPlan
) -> ProcessesRun:
    jobs = RedisJobStore(connect(url), prefix=prefix)
    raw = redis.Redis.from_url(url)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        "MQ_REDIS_URL": url,
        "MQ_STORES": json.dumps({"default": {"prefix": prefix}}),
        "MQ_JOB_MODULES": "bench.drain_jobs",
    }
    command = [
        sys.executable, str(ROOT / "manage.py"), "runworker", "--queues", QUEUE,
        "--processes", str(processes), "--concurrency", str(args.concurrency),
        "--prefetch", args.runworker_prefetch,
    ]  # fmt: skip
    proc: subprocess.Popen[str] | None = None
    try:
        jobs.pause(QUEUE)
        enqueue_noops(jobs, args.n)
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=env,
            preexec_fn=cpu.client_preexec(),
        )
        pids: list[int] = []
        assert proc.stdout is not None
        while len(pids) < processes:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("runworker exited before its workers started")
            if line.startswith("worker ") and "(pid " in line:
                pids.append(int(line.split("(pid ", 1)[1].split(")", 1)[0]))
        time.sleep(1.0)  # every taker has claimed once and waits for a wake
        raw.config_resetstat()
        cpu_before, client_before = server_cpu_s(raw), _proc_cpu_seconds(pids)
        started = time.monotonic()
        jobs.resume(QUEUE)
        deadline = started + 600
        while jobs.counts(QUEUE)["completed"] < args.n:
            if time.monotonic() > deadline:
                raise RuntimeError("the drain did not finish in 10 minutes")
            time.sleep(0.02)
        seconds = time.monotonic() - started
        cpu_after, client_after = server_cpu_s(raw), _proc_cpu_seconds(pids)
        stats = raw.info("commandstats")
        return ProcessesRun(
            DrainRun(
                n=args.n,
                seconds=seconds,
                calls=int(stats.get("cmdstat_fcall", {}).get("calls", 0)),
                throttled=0,
                limited=0,
                script_us=0,
                commands=0,
                redis_us=_redis_us(stats),
                server_cpu_s=cpu_after - cpu_before,
            ),
            client_cpu_s=client_after - client_before,
        )
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        raw.close()
        jobs.close()


def _us_per_job(values: Sequence[float]) -> str:
    return f"{med(values):.1f}"


def render_prefetch(runs: dict[str, list[DrainRun]], args: argparse.Namespace) -> list[str]:
    fixed = [v for v in runs if v not in (AUTO, OLD_DEFAULT)]
    best = max(fixed, key=lambda v: med([r.rate for r in runs[v]]))
    best_rate = med([r.rate for r in runs[best]])
    auto_ratio = med([r.rate for r in runs[AUTO]]) / best_rate
    out = [
        f"### Prefetch: {args.n:,} no-op jobs, one `Worker(concurrency={args.concurrency})` "
        "process, burst",
        "",
        "jobs/s median [min–max]; *÷ best tuned*: the median's ratio to the fastest fixed "
        f"prefetch (here {best}); *Redis µs/job*: every command's time (INFO commandstats); "
        "*server CPU µs/job*: `used_cpu_sys + used_cpu_user` over the drain; *server CPU*: "
        "the same as a share of one core over the drain; *claims/job*: the worker's "
        "`ack_and_claim_many` calls; *handed back*: prefetched jobs the wait bound returned "
        "to the queue (auto only).",
        "",
        "| prefetch | jobs/s | ÷ best tuned | Redis µs/job | server CPU µs/job | server CPU "
        "| claims/job | handed back |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, rs in runs.items():
        label = {OLD_DEFAULT: "1 (the default before)", AUTO: "**auto (the default)**"}.get(
            variant, variant
        )
        out.append(
            f"| {label} | {spread([r.rate for r in rs], fmt_per_s)} "
            f"| {med([r.rate for r in rs]) / best_rate:.2f}× "
            f"| {_us_per_job([r.redis_us / r.n for r in rs])} "
            f"| {_us_per_job([r.server_cpu_s * 1e6 / r.n for r in rs])} "
            f"| {med([r.server_cpu_s / r.seconds for r in rs]):.0%} "
            f"| {med([r.calls / r.n for r in rs]):.3f} "
            f"| {med([float(r.released) for r in rs]):,.0f} |"
        )
    verdict = "PASS" if auto_ratio >= PREFETCH_TARGET else "FAIL"
    out += [
        "",
        f"auto ÷ best tuned ({best}): **{auto_ratio:.2f}×** (target ≥ {PREFETCH_TARGET}×: "
        f"**{verdict}**); auto ÷ prefetch 1: "
        f"{med([r.rate for r in runs[AUTO]]) / med([r.rate for r in runs[OLD_DEFAULT]]):.2f}×",
        "",
    ]
    return out


def render_processes(runs: dict[int, list[ProcessesRun]], args: argparse.Namespace) -> list[str]:
    base = med([r.drain.rate for r in runs[1]])
    out = [
        f"### `runworker --processes P --concurrency {args.concurrency} --prefetch "
        f"{args.runworker_prefetch}`: {args.n:,} no-op jobs",
        "",
        "jobs/s from the queue's resume to N completed, median [min–max]; *server CPU* and "
        "*workers' CPU*: each as a share of one core over the drain (the machine has "
        f"{os.cpu_count()}); µs per job as above.",
        "",
        "| processes | jobs/s | ÷ 1 process | Redis µs/job | server CPU µs/job | server CPU "
        "| workers' CPU µs/job | workers' CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for processes, rs in sorted(runs.items()):
        out.append(
            f"| {processes} | {spread([r.drain.rate for r in rs], fmt_per_s)} "
            f"| {med([r.drain.rate for r in rs]) / base:.2f}× "
            f"| {_us_per_job([r.drain.redis_us / r.drain.n for r in rs])} "
            f"| {_us_per_job([r.drain.server_cpu_s * 1e6 / r.drain.n for r in rs])} "
            f"| {med([r.drain.server_cpu_s / r.drain.seconds for r in rs]):.0%} "
            f"| {_us_per_job([r.client_cpu_s * 1e6 / r.drain.n for r in rs])} "
            f"| {med([r.client_cpu_s / r.drain.seconds for r in rs]):.0%} |"
        )
    if 2 in runs:
        ratio = med([r.drain.rate for r in runs[2]]) / base
        verdict = "PASS" if ratio >= PROCESSES_TARGET else "FAIL"
        out += [
            "",
            f"2 processes ÷ 1: **{ratio:.2f}×** (target ≥ {PROCESSES_TARGET}×: **{verdict}**)",
        ]
    return [*out, ""]


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--runs", type=int, default=3, help="repetitions, medians shown")
    parser.add_argument("--only", default="prefetch,processes", help="prefetch, processes or both")
    parser.add_argument("--concurrency", type=int, default=8, help="takers per worker process")
    parser.add_argument(
        "--prefetch",
        default="1,auto,8,32,64",
        help="the prefetch variants (1 and auto are always measured)",
    )
    parser.add_argument(
        "--runworker-prefetch", default=AUTO, help="runworker's --prefetch (default auto)"
    )
    parser.add_argument("--cpu-pin", choices=CPU_PIN_MODES, default="none")
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if not args.parts or set(args.parts) - {"prefetch", "processes"}:
        parser.error("--only takes prefetch, processes or prefetch,processes")
    variants = [v.strip() for v in args.prefetch.split(",") if v.strip()]
    args.variants = list(dict.fromkeys([OLD_DEFAULT, AUTO, *variants]))
    for v in args.variants:
        if v != AUTO and not (v.isdigit() and int(v) >= 1):
            parser.error(f"--prefetch takes auto or whole numbers >= 1, not {v!r}")
    if len(args.variants) < 3:
        parser.error("--prefetch needs at least one fixed batch besides 1")
    if min(args.n, args.runs, args.concurrency) < 1:
        parser.error("--n, --runs and --concurrency must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    quiet_logging()
    prefetch_runs: dict[str, list[DrainRun]] = {}
    process_runs: dict[int, list[ProcessesRun]] = {}
    token = uuid.uuid4().hex[:8]
    with private_bench("drain_bench", args.redis_server, args.cpu_pin) as bench:
        cpu, url = bench.cpu, bench.server.url
        try:
            for r in range(args.runs):
                if "prefetch" in args.parts:
                    for variant in rotated(args.variants, r):
                        bench.control.flushall()
                        settings = argparse.Namespace(
                            n=args.n, procs=1, worker_concurrency=args.concurrency, prefetch=variant
                        )
                        got = drain_run(url, f"dp{token}{r}", None, settings, cpu)
                        prefetch_runs.setdefault(variant, []).append(got)
                        print(
                            f"run {r + 1} prefetch {variant}: {got.rate:,.0f} jobs/s, "
                            f"{got.redis_us / got.n:.1f} Redis µs/job, "
                            f"{got.server_cpu_s * 1e6 / got.n:.1f} server CPU µs/job",
                            file=sys.stderr,
                        )
                if "processes" in args.parts:
                    for processes in map(int, rotated(["1", "2"], r)):
                        bench.control.flushall()
                        run = runworker_drain(url, f"dw{token}{r}", processes, args, cpu)
                        process_runs.setdefault(processes, []).append(run)
                        print(
                            f"run {r + 1} runworker --processes {processes}: "
                            f"{run.drain.rate:,.0f} jobs/s, server CPU "
                            f"{run.drain.server_cpu_s / run.drain.seconds:.0%}, workers' CPU "
                            f"{run.client_cpu_s / run.drain.seconds:.0%}",
                            file=sys.stderr,
                        )
        except KeyboardInterrupt:
            print("drain_bench: interrupted", file=sys.stderr)
            return 130
        machine = bench.lines()
    lines = [
        f"## Drain: prefetch defaults and worker processes (`bench/drain_bench.py`, tree "
        f"{tree_commit(ROOT)})",
        "",
        *machine,
        f"- N = {args.n:,} per drain, {args.runs} runs (medians), the variants' order rotated "
        "from run to run",
        "",
    ]
    if prefetch_runs:
        lines += render_prefetch({v: prefetch_runs[v] for v in args.variants}, args)
    if process_runs:
        lines += render_processes(process_runs, args)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
