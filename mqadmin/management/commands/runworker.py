"""``manage.py runworker``: run the handlers of the project's jobs.

Job definitions are discovered from every installed app's ``jobs.py`` and
``MQ_JOB_MODULES``; Django tasks enqueued through ``mqadmin.tasks.StoreBackend`` on
the served store run too, with no registration (their module paths are imported
on first use).  Stops cleanly on SIGTERM/SIGINT: in-flight jobs are
interrupted and released to waiting without using an attempt.  With
``--processes N`` it supervises N worker processes (restarting any that die).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime

logger = logging.getLogger("mqadmin.runworker")


class Command(BaseCommand):
    help = "Run a worker for the project's jobs (or supervise several with --processes)."

    def add_arguments(self, parser: CommandParser) -> None:
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
            type=int,
            default=1,
            help="jobs each taker claims at once (a batch's acks ride with the next claim)",
        )
        parser.add_argument("--burst", action="store_true", help="exit when the queues are empty")
        parser.add_argument(
            "--run-sync-in",
            choices=["thread", "process"],
            default="thread",
            help="run plain (sync) handlers in threads or in a killable child process per job",
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

    def handle(self, *args: Any, **options: Any) -> None:
        if options["processes"] > 1:
            self._supervise(options)
            return
        from store.errors import StoreFailure
        from store.worker import Worker

        runtime.install_registry()
        names = runtime.discover_jobs()
        queues = [q for q in options["queues"].split(",") if q]
        try:
            job_store = runtime.build_store(options["store"])
        except StoreFailure as exc:
            raise CommandError(f"cannot reach the store {options['store']!r}: {exc}") from exc
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
            resolver=runtime.tasks_resolver(job_store, queues),
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
        worker.run(install_signal_handlers=True)
        self.stdout.write(f"worker {worker.worker_id} stopped: {worker.stats}")

    def _supervise(self, options: dict[str, Any]) -> None:
        """Run N child workers; forward SIGTERM/SIGINT; restart children that die unexpectedly."""
        count = options["processes"]
        argv = [sys.executable, sys.argv[0], "runworker", "--processes", "1"]
        for flag in (
            "store",
            "queues",
            "concurrency",
            "prefetch",
            "run_sync_in",
            "lock_duration_ms",
            "poll_interval_ms",
            "stalled_interval_ms",
            "max_stalled_count",
        ):
            value = options[flag]
            if value not in (None, ""):
                argv += [f"--{flag.replace('_', '-')}", str(value)]
        for flag in ("burst", "no_maintenance"):
            if options[flag]:
                argv.append(f"--{flag.replace('_', '-')}")
        stopping = False

        def stop(signum: int, _frame: Any) -> None:
            nonlocal stopping
            stopping = True
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)

        children: list[subprocess.Popen[bytes]] = []
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        for _ in range(count):
            children.append(subprocess.Popen(argv))
        self.stdout.write(f"supervising {count} worker processes: {[c.pid for c in children]}")
        while True:
            alive = False
            for i, child in enumerate(children):
                code = child.poll()
                if code is None:
                    alive = True
                elif not stopping and not options["burst"]:
                    self.stderr.write(f"worker pid {child.pid} exited with {code}; restarting it")
                    children[i] = subprocess.Popen(argv)
                    alive = True
            if not alive:
                break
            time.sleep(0.2)
        self.stdout.write("all worker processes stopped")
