"""Shared plumbing for the benchmark drivers (ours, the peers, the EVALSHA ceiling).

Every driver runs in its own process (often its own venv), so this module must import with
nothing but the standard library and *some* redis-py (the arq venv has redis-py 5.x, the others
8.x). A driver parses the common command line, measures one mode once, and prints exactly one
JSON line on stdout (the last line); anything else it prints goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("enqueue-single", "enqueue-bulk", "process")
BULK_SIZE = 1000  # jobs per bulk call, as in peer-bench.md

# Exit codes a driver uses so the orchestrator can tell "cannot run" from "crashed".
EXIT_UNSUPPORTED = 2
EXIT_NOT_IMPORTABLE = 3


def payload(n: int) -> dict[str, Any]:
    """The small job argument every library gets (peer-bench.md's payload)."""
    return {"user_id": n, "action": "send_email", "to": f"user{n}@example.com", "attempt": 1}


def chunks(n: int, size: int = BULK_SIZE) -> Iterator[range]:
    """Job numbers 0..n-1 in consecutive ranges of at most `size`."""
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


def quiet_logging() -> None:
    """WARNING everywhere: rq and arq log every job at INFO by default, which would be measured."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger().setLevel(logging.WARNING)


def parse_args(
    lib: str,
    argv: list[str] | None = None,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
    modes: tuple[str, ...] = MODES,
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=f"{lib} throughput driver (prints one JSON line)")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--n", type=int, required=True, help="jobs to enqueue or process")
    parser.add_argument("--mode", choices=modes, required=True)
    parser.add_argument(
        "--prefix",
        default="bench",
        help="key prefix / namespace for the library's keys (used on shared servers)",
    )
    parser.add_argument(
        "--stats",
        choices=("reset", "diff", "off"),
        default="reset",
        help="reset: CONFIG RESETSTAT before the timed section (private server); "
        "diff: INFO commandstats before/after, no reset (shared server); off: none",
    )
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.n <= 0:
        parser.error("--n must be positive")
    return args


def read_commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """``INFO commandstats`` as {command: (calls, usec)} (``cmdstat_`` taken off the names)."""
    info = client.info("commandstats")
    stats: dict[str, tuple[int, int]] = {}
    for key, value in info.items():
        name = key[len("cmdstat_") :] if key.startswith("cmdstat_") else key
        if isinstance(value, dict):
            stats[name] = (int(value.get("calls", 0)), int(value.get("usec", 0)))
    return stats


def server_cpu_s(client: Any) -> float:
    """The server's CPU seconds so far (user + system, all its threads)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class CommandStats:
    """Redis-side work of the timed section, from `INFO commandstats`.

    Commands run inside Lua scripts are counted (as is the EVALSHA itself); MULTI/EXEC count.
    The probe's own commands are taken out: CONFIG RESETSTAT (reset mode) or the first INFO
    (diff mode; the closing INFO is not yet counted when it answers).

    So ``redis_us_per_job`` counts a script's commands twice: once in the script's own time
    (EVALSHA / FCALL last as long as everything they run) and once on their own.  The server's
    CPU over the section (``used_cpu_sys + used_cpu_user`` of INFO cpu, ``server_cpu_us_per_job``)
    has no such overlap and also carries what commandstats leaves out (reading requests,
    writing replies); on a shared server it also carries everyone else's work.
    """

    redis_url: str
    how: str
    _client: Any = None
    _before: dict[str, tuple[int, int]] = field(default_factory=dict)
    _cpu_before: float = 0.0
    result: dict[str, tuple[int, int]] = field(default_factory=dict)
    cpu_s: float | None = None

    def start(self) -> None:
        if self.how == "off":
            return
        import redis  # any redis-py version is fine here

        self._client = redis.Redis.from_url(self.redis_url)
        if self.how == "reset":
            self._client.config_resetstat()
        else:
            self._before = read_commandstats(self._client)
        self._cpu_before = server_cpu_s(self._client)

    def stop(self) -> None:
        if self.how == "off" or self._client is None:
            return
        after = read_commandstats(self._client)
        self.cpu_s = server_cpu_s(self._client) - self._cpu_before
        self._client.close()
        result: dict[str, tuple[int, int]] = {}
        for name, (calls, usec) in after.items():
            b_calls, b_usec = self._before.get(name, (0, 0))
            if self.how == "reset" and name == "config|resetstat":
                continue
            if self.how == "diff" and name == "info":
                b_calls += 1
            if calls - b_calls > 0:
                result[name] = (calls - b_calls, usec - b_usec)
        self.result = result

    def summary(self, n: int) -> dict[str, Any]:
        if self.how == "off" or not self.result:
            return {
                "cmds_per_job": None,
                "redis_us_per_job": None,
                "server_cpu_us_per_job": None,
                "top_cmds": {},
            }
        calls = sum(c for c, _ in self.result.values())
        usec = sum(u for _, u in self.result.values())
        top = sorted(self.result.items(), key=lambda kv: (-kv[1][0], kv[0]))[:8]
        return {
            "cmds_per_job": calls / n,
            "redis_us_per_job": usec / n,
            "server_cpu_us_per_job": None if self.cpu_s is None else self.cpu_s * 1e6 / n,
            # Commands issued less than once per 200 jobs (connection set-up, script loads) are
            # noise in a per-job view; the totals above still include them.
            "top_cmds": {name: round(c / n, 2) for name, (c, _) in top if c / n >= 0.005},
        }


class Timer:
    """perf_counter start/stop with the commandstats probe wrapped tightly around it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.stats = CommandStats(args.redis_url, args.stats)
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        self.stats.start()
        self.started = time.perf_counter()

    def stop(self) -> float:
        self.seconds = time.perf_counter() - self.started
        self.stats.stop()
        return self.seconds


def emit(
    lib: str,
    args: argparse.Namespace,
    timer: Timer,
    *,
    variant: str,
    api: str,
    version: str,
    **extra: Any,
) -> None:
    """Print the driver's one-line JSON result on stdout."""
    record: dict[str, Any] = {
        "lib": lib,
        "mode": args.mode,
        "n": args.n,
        "seconds": timer.seconds,
        "jobs_per_s": args.n / timer.seconds if timer.seconds > 0 else None,
        "variant": variant,
        "api": api,
        "version": version,
        "stats": args.stats,
    }
    record.update(timer.stats.summary(args.n))
    record.update(extra)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> None:
    """Stop a driver with a one-line reason on stderr (the orchestrator shows it)."""
    sys.stderr.write(message.rstrip() + "\n")
    sys.exit(code)


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C (KeyboardInterrupt): a bench stops its children and its
    private server on the way out."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def unsupported(lib: str, mode: str, why: str) -> None:
    fail(f"{lib}: mode {mode!r} is not supported: {why}", EXIT_UNSUPPORTED)


# --------------------------------------------------------------------------------------------
# Report helpers of the benches that run many variants (limits_bench, live_bench)


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile (``pct`` 0-100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil(n * pct / 100), at least 1
    return ordered[int(rank) - 1]


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """ "median [min–max]" of ``values``, each formatted by ``fmt``."""
    return f"{fmt(med(values))} [{fmt(min(values))}–{fmt(max(values))}]"


def fmt_us(value: float) -> str:
    return f"{value:.1f}"


def fmt_per_s(value: float) -> str:
    return f"{value:,.0f}"


def rotated(items: Sequence[str], r: int) -> list[str]:
    """``items`` rotated by ``r``: run r of a bench measures its variants in this order."""
    k = r % len(items)
    return [*items[k:], *items[:k]]


def tree_commit(root: Path) -> str:
    """The short commit of the git tree at ``root`` ("+ changes" when it is dirty)."""

    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *argv], capture_output=True, text=True
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{git('rev-parse', '--short', 'HEAD') or '?'}{' + changes' if dirty else ''}"
