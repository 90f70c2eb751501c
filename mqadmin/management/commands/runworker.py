"""``manage.py runworker``: run the handlers of the project's jobs.

Job definitions are discovered from every installed app's ``jobs.py`` and
``MQ_JOB_MODULES``; Django tasks enqueued through ``mqadmin.tasks.StoreBackend`` on
the served store run too, with no registration (their module paths are imported
on first use).  Stops cleanly on SIGTERM/SIGINT: in-flight jobs are
interrupted and released to waiting without using an attempt.  With
``--processes N`` it supervises N worker processes (restarting any that die).

``--metrics-port P`` serves the worker's Prometheus metrics (job durations,
attempts, lost locks, recovered stalls, jobs in flight) at
``http://<--metrics-addr>:P/metrics``; with ``--processes N`` the supervisor
serves the sum over its children (prometheus-client's multiprocess mode, in a
fresh ``PROMETHEUS_MULTIPROC_DIR``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime
from mqadmin.management.options import add_metrics_arguments

logger = logging.getLogger("mqadmin.runworker")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _prefetch(text: str) -> int | str:
    """--prefetch: 'auto' or a whole number >= 1."""
    return "auto" if text == "auto" else _positive(text)


class Command(BaseCommand):
    help = "Run a worker for the project's jobs (or supervise several with --processes)."

    def add_arguments(self, parser: CommandParser) -> None:
        from store.worker import AUTO_PREFETCH_MAX, PREFETCH_WAIT_MS

        parser.add_argument(
            "--store", default="default", help="configured store to serve (MQ_STORES name)"
        )
        parser.add_argument(
            "--queues", default="", help="comma-separated queues to serve (default: all)"
        )
        parser.add_argument(
            "--concurrency", type=int, default=None, help="takers per queue (default 1)"
        )
        parser.add_argument(
            "--processes", type=int, default=1, help="supervise this many worker processes"
        )
        parser.add_argument(
            "--prefetch",
            type=_prefetch,
            default="auto",
            help="jobs each taker claims at once (a batch's acks ride with the next claim): "
            f"'auto' (default) grows the batch up to {AUTO_PREFETCH_MAX} while the queue is "
            "deep and the jobs short, one at a time for long jobs; or exactly N",
        )
        parser.add_argument(
            "--prefetch-wait-ms",
            type=_positive,
            default=PREFETCH_WAIT_MS,
            help="with --prefetch auto: the longest a prefetched job waits in this worker "
            f"before it is handed back for another worker (default {PREFETCH_WAIT_MS})",
        )
        parser.add_argument("--burst", action="store_true", help="exit when the queues are empty")
        parser.add_argument(
            "--run-sync-in",
            choices=["thread", "process"],
            default="thread",
            help="run plain (sync) handlers in threads or in a killable child process per job",
        )
        parser.add_argument(
            "--job-logs",
            action="store_true",
            help="copy the logging records a running job makes into that job's own log",
        )
        parser.add_argument("--lock-duration-ms", type=int, default=30_000)
        parser.add_argument("--poll-interval-ms", type=int, default=5_000)
        parser.add_argument("--stalled-interval-ms", type=int, default=30_000)
        parser.add_argument("--max-stalled-count", type=int, default=1)
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="do not run stall recovery, schedules and sweeps here (use runsweepers)",
        )
        add_metrics_arguments(parser)
        # Set by the --processes supervisor on its children: record metrics into
        # PROMETHEUS_MULTIPROC_DIR, serve nothing (the supervisor serves the sum).
        parser.add_argument("--metrics-child", action="store_true", help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["processes"] > 1:
            self._supervise(options)
            return
        from store.errors import StoreFailure
        from store.worker import Worker

        runtime.install_registry()
        if options["job_logs"]:
            from store.jobs import JobLogHandler

            logging.getLogger().addHandler(JobLogHandler())
        names = runtime.discover_jobs()
        queues = [q for q in options["queues"].split(",") if q]
        try:
            job_store = runtime.build_store(options["store"])
        except StoreFailure as exc:
            raise CommandError(f"cannot reach the store {options['store']!r}: {exc}") from exc
        metrics, server = self._metrics(options)
        worker = Worker(
            job_store,
            concurrency=options["concurrency"] or 1,
            lock_duration_ms=options["lock_duration_ms"],
            poll_interval_ms=options["poll_interval_ms"],
            stalled_interval_ms=options["stalled_interval_ms"],
            max_stalled_count=options["max_stalled_count"],
            maintenance=not options["no_maintenance"],
            run_sync_in=options["run_sync_in"],
            burst=options["burst"],
            job_hooks=runtime.django_job_hooks(),
            prefetch=options["prefetch"],
            prefetch_wait_ms=options["prefetch_wait_ms"],
            resolver=runtime.tasks_resolver(job_store, queues),
            metrics=metrics,
        )
        registered = worker.register_all(queues=queues or None)
        if worker.resolver is not None:
            self.stdout.write(
                f"Django tasks: serving queues {', '.join(worker.resolver.queues()) or 'none yet'}"
            )
        elif not registered and not options["burst"]:
            self.stderr.write(
                f"no job handlers found for store {options['store']!r}"
                + (f" and queues {queues}" if queues else "")
                + f" (known jobs: {', '.join(names) or 'none'}); serving maintenance only"
            )
        self.stdout.write(
            f"worker {worker.worker_id} (pid {os.getpid()}) store={options['store']} prefix={job_store.prefix} "
            f"queues={worker.queues or '{}'} maintenance={'off' if options['no_maintenance'] else 'on'}"
        )
        self.stdout.flush()
        try:
            worker.run(install_signal_handlers=True)
        finally:
            if server is not None:
                server.shutdown()
        self.stdout.write(f"worker {worker.worker_id} stopped: {worker.stats}")

    def _metrics(self, options: dict[str, Any]) -> tuple[Any, Any]:
        """The worker's instruments and, unless a supervisor serves them, its HTTP server."""
        if options["metrics_port"] is None and not options["metrics_child"]:
            return None, None
        from store.worker_metrics import WorkerMetrics

        metrics = WorkerMetrics()
        if options["metrics_child"]:
            return metrics, None
        return metrics, self._serve_metrics(options, None)

    def _serve_metrics(self, options: dict[str, Any], registry: Any) -> Any:
        from prometheus_client import REGISTRY, start_http_server

        try:
            server, _thread = start_http_server(
                options["metrics_port"],
                addr=options["metrics_addr"],
                registry=REGISTRY if registry is None else registry,
            )
        except OSError as exc:
            raise CommandError(
                f"cannot serve metrics on {options['metrics_addr']}:{options['metrics_port']}: {exc}"
            ) from exc
        # A TCP server's address (typeshed's type also covers other socket families).
        host, port = cast("tuple[str, int]", server.server_address[:2])
        self.stdout.write(f"metrics at http://{host}:{port}/metrics")
        self.stdout.flush()
        return server

    def _supervise(self, options: dict[str, Any]) -> None:
        """Run N child workers; forward SIGTERM/SIGINT; restart children that die unexpectedly."""
        count = options["processes"]
        argv = [sys.executable, sys.argv[0], "runworker", "--processes", "1"]
        for flag in (
            "store",
            "queues",
            "concurrency",
            "prefetch",
            "prefetch_wait_ms",
            "run_sync_in",
            "lock_duration_ms",
            "poll_interval_ms",
            "stalled_interval_ms",
            "max_stalled_count",
        ):
            value = options[flag]
            if value not in (None, ""):
                argv += [f"--{flag.replace('_', '-')}", str(value)]
        for flag in ("burst", "no_maintenance", "job_logs"):
            if options[flag]:
                argv.append(f"--{flag.replace('_', '-')}")
        env = dict(os.environ)
        metrics_dir: Path | None = None
        created_dir = False
        server = None
        if options["metrics_port"] is not None:
            from prometheus_client import CollectorRegistry
            from prometheus_client.multiprocess import MultiProcessCollector

            given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
            if given:
                metrics_dir = Path(given)
                metrics_dir.mkdir(parents=True, exist_ok=True)
                # Files of an earlier run would be summed in: start from nothing.
                for stale in metrics_dir.glob("*.db"):
                    stale.unlink()
            else:
                metrics_dir = Path(tempfile.mkdtemp(prefix="mq-worker-metrics-"))
                created_dir = True
            env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
            argv.append("--metrics-child")
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(metrics_dir))
            server = self._serve_metrics(options, registry)
        stopping = False

        def stop(signum: int, _frame: Any) -> None:
            nonlocal stopping
            stopping = True
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)

        children: list[subprocess.Popen[bytes]] = []
        dead: set[int] = set()
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        for _ in range(count):
            children.append(subprocess.Popen(argv, env=env))
        self.stdout.write(f"supervising {count} worker processes: {[c.pid for c in children]}")
        while True:
            alive = False
            for i, child in enumerate(children):
                code = child.poll()
                if code is None:
                    alive = True
                else:
                    if metrics_dir is not None and child.pid not in dead:
                        from prometheus_client import multiprocess

                        # Its counters stay in the sum; its in-flight gauge goes.
                        multiprocess.mark_process_dead(child.pid, str(metrics_dir))
                        dead.add(child.pid)
                    if not stopping and not options["burst"]:
                        self.stderr.write(
                            f"worker pid {child.pid} exited with {code}; restarting it"
                        )
                        children[i] = subprocess.Popen(argv, env=env)
                        alive = True
            if not alive:
                break
            time.sleep(0.2)
        if server is not None:
            server.shutdown()
        if created_dir and metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        self.stdout.write("all worker processes stopped")
