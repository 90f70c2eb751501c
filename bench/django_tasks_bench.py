"""Django Tasks throughput: mqadmin.tasks.StoreBackend next to django-tasks-rq and django-tasks-redis.

    bash bench/setup_peers.sh                          # once: bench/.venv-dtasks
    .venv/bin/python bench/django_tasks_bench.py       # defaults: ~2 minutes on 2 cores
    .venv/bin/python bench/django_tasks_bench.py --runs 5 --n 10000 > /tmp/table.md
    .venv/bin/python bench/django_tasks_bench.py --django 6.1   # bench/.venv-dtasks-6.1

``--django 5.2`` (default): ours from the project's venv (Django 5.2 + the django-tasks
backport), the peers from bench/.venv-dtasks.  ``--django 6.1``: every backend from
bench/.venv-dtasks-6.1 (Python 3.12/3.13, Django 6.1, the project installed editable), ours and
django-tasks-redis on Django's own ``django.tasks``; django-tasks-rq 0.12 has no native
Django 6 support, so it runs there through the backport it depends on (as its users would).

Two figures per backend, each through the Django Tasks API on the same private Redis:

* **enqueue**: ``noop.enqueue(payload)`` N times, sequentially, in one process.
* **drain**: N such tasks waiting (enqueued untimed), then the backend's own worker in that
  process, from its start until the queue is empty: ours ``runworker``'s Worker with the Django
  task resolver (burst), django-tasks-rq rq's ``SimpleWorker.work(burst=True)`` with the
  backend's job class, django-tasks-redis ``manage.py run_redis_tasks`` (one-shot).

Each (backend, mode) runs ``--runs`` times, each a fresh process (ours from the project's
venv, the peers from bench/.venv-dtasks), repetitions as the outer loop; the table shows the
median [min-max] and our median divided by each peer's.  The private redis-server is
FLUSHALLed before every run and, with ``--cpu-pin same`` (default), it and every client run on
one CPU (see bench/README.md for why).  django-tasks-rq's worker does ~100 tasks/s, so its drain
N is capped (``--rq-drain-n``).  Exit status 0 when every run worked, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_DIR))

from bench.throughput import (  # noqa: E402
    PrivateRedis,
    driver_env,
    find_redis_server,
    make_cpu_plan,
)

OURS_PYTHON = REPO_DIR / ".venv" / "bin" / "python"
PEERS_PYTHON = BENCH_DIR / ".venv-dtasks" / "bin" / "python"
#: --django 6.1: one venv for every backend (bench/setup_peers.sh creates it when a Python 3.12+
#: interpreter is found).
DJANGO61_PYTHON = BENCH_DIR / ".venv-dtasks-6.1" / "bin" / "python"
LIBS = ("ours", "redis", "rq")
TITLES = {
    "ours": "mqadmin.tasks.StoreBackend",
    "redis": "django-tasks-redis 0.4.0",
    "rq": "django-tasks-rq 0.12.0",
}
MODES = ("enqueue", "drain")
TARGET = 3.0


def parse_cli(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="tasks per run (default 5000)")
    parser.add_argument("--rq-drain-n", type=int, default=1000, help="django-tasks-rq drain N")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(LIBS), help="comma-separated: ours,redis,rq")
    parser.add_argument("--cpu-pin", choices=("same", "split", "none"), default="same")
    parser.add_argument("--prefetch", type=int, default=50, help="our worker's claim batch")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw runs here")
    parser.add_argument(
        "--django",
        choices=("5.2", "6.1"),
        default="5.2",
        help="5.2: .venv + bench/.venv-dtasks (default); 6.1: bench/.venv-dtasks-6.1 for all",
    )
    return parser.parse_args(argv)


def python_for(lib: str, django: str) -> Path:
    """The interpreter one backend runs from on the chosen Django release."""
    if django == "6.1":
        return DJANGO61_PYTHON
    return OURS_PYTHON if lib == "ours" else PEERS_PYTHON


def run_one(lib: str, mode: str, n: int, url: str, args: argparse.Namespace, cpu: Any) -> dict:
    python = python_for(lib, args.django)
    cmd = [
        str(python), "-m", "bench.peers.django_tasks_driver",
        "--lib", lib, "--mode", mode, "--redis-url", url, "--n", str(n),
        "--prefix", f"dtb-{lib}", "--prefetch", str(args.prefetch),
    ]  # fmt: skip
    timeout = 120 + n / 20
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
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr.strip().splitlines() or ["(no output)"])[-3:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    return dict(json.loads(lines[-1]))


def django_version(runs: dict[tuple[str, str], list[dict]]) -> str:
    """The Django release the drivers reported (one venv per release, so one value)."""
    found = sorted({r["django"] for rs in runs.values() for r in rs if r.get("django")})
    return ", ".join(found) or "?"


def fmt(rate: float | None) -> str:
    return "—" if rate is None else f"{rate:,.0f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_cli(argv)
    libs = [lib for lib in args.only.split(",") if lib]
    missing = [lib for lib in libs if not python_for(lib, args.django).exists()]
    if missing:
        where = python_for(missing[0], args.django).parent.parent
        sys.stderr.write(
            f"django_tasks_bench: {where} is missing: run `bash bench/setup_peers.sh`\n"
        )
        return 1
    binary = find_redis_server()
    if binary is None:
        sys.stderr.write("django_tasks_bench: no redis-server found\n")
        return 1
    cpu = make_cpu_plan(args.cpu_pin)
    server = PrivateRedis(binary, cpu)
    server.start()
    import redis

    runs: dict[tuple[str, str], list[dict]] = {(lib, m): [] for lib in libs for m in MODES}
    failed = False
    try:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        for rep in range(args.runs):
            for lib in libs:
                for mode in MODES:
                    n = args.rq_drain_n if (lib, mode) == ("rq", "drain") else args.n
                    redis.Redis.from_url(server.url).flushall()
                    started = time.monotonic()
                    outcome = run_one(lib, mode, n, server.url, args, cpu)
                    took = time.monotonic() - started
                    runs[(lib, mode)].append(outcome)
                    if "error" in outcome:
                        failed = True
                        sys.stderr.write(f"[{rep + 1}] {lib} {mode}: ERROR {outcome['error']}\n")
                    else:
                        sys.stderr.write(
                            f"[{rep + 1}] {lib} {mode}: {outcome['jobs_per_s']:,.0f}/s "
                            f"(n={n}, {took:.1f} s)\n"
                        )
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()

    def rates(lib: str, mode: str) -> list[float]:
        return [r["jobs_per_s"] for r in runs[(lib, mode)] if "jobs_per_s" in r]

    def median(lib: str, mode: str) -> float | None:
        values = rates(lib, mode)
        return statistics.median(values) if values else None

    out = sys.stdout
    out.write(
        f"Django Tasks throughput on Django {django_version(runs)}, tasks/s "
        f"(median of {args.runs} [min-max]); Redis {version}, "
        f"{cpu.describe()}; N={args.n} (django-tasks-rq drain N={args.rq_drain_n}).\n\n"
    )
    out.write("| backend | enqueue | drain | redis µs/task (enqueue, drain) | worker |\n")
    out.write("|---|---|---|---|---|\n")
    for lib in libs:
        cells = []
        for mode in MODES:
            values = rates(lib, mode)
            if not values:
                cells.append("failed")
                continue
            cells.append(
                f"{fmt(statistics.median(values))} [{fmt(min(values))}-{fmt(max(values))}]"
            )
        us = []
        for mode in MODES:
            got = [
                r.get("redis_us_per_job") for r in runs[(lib, mode)] if r.get("redis_us_per_job")
            ]
            us.append(f"{statistics.median(got):.0f}" if got else "—")
        variant = next((r["variant"] for r in runs[(lib, "drain")] if "variant" in r), "—")
        out.write(f"| {TITLES[lib]} | {cells[0]} | {cells[1]} | {', '.join(us)} | {variant} |\n")
    if "ours" in libs and len(libs) > 1:
        out.write("\n| figure | ours ÷ fastest peer | target |\n|---|---|---|\n")
        for mode in MODES:
            ours = median("ours", mode)
            peers = [m for lib in libs if lib != "ours" and (m := median(lib, mode))]
            if ours is None or not peers:
                out.write(f"| {mode} | — | ≥ {TARGET:.0f}× |\n")
                failed = True
                continue
            ratio = ours / max(peers)
            verdict = "met" if ratio >= TARGET else "NOT met"
            out.write(f"| {mode} | {ratio:.1f}× | ≥ {TARGET:.0f}× ({verdict}) |\n")
    if args.json is not None:
        with contextlib.suppress(OSError):
            args.json.write_text(
                json.dumps({f"{k[0]}/{k[1]}": v for k, v in runs.items()}, indent=2)
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
