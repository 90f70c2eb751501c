"""``manage.py runsweepers``: maintenance apart from the workers.

For every configured store (or ``--store``): stalled recovery, schedule
ticks, history and dedupe sweeps, the outbox relay and the flow sweeper.
Each is safe to run in many processes at once.  Stops cleanly on
SIGTERM/SIGINT.  ``--metrics-port P`` serves the sweepers' Prometheus metrics
(``mq_stalled_recovered_total`` above all: with workers started
``--no-maintenance`` stall recovery happens only here).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime, services
from mqadmin.management.options import add_metrics_arguments


class Command(BaseCommand):
    help = "Run stall recovery, schedule ticks, sweeps, the outbox relay and the flow sweeper."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", action="append", default=[], help="store name (repeatable; default: all)"
        )
        parser.add_argument("--stalled-interval-ms", type=int, default=30_000)
        parser.add_argument("--max-stalled-count", type=int, default=1)
        parser.add_argument("--schedule-interval-ms", type=int, default=15_000)
        parser.add_argument("--history-interval-ms", type=int, default=60_000)
        parser.add_argument("--flow-interval-ms", type=int, default=30_000)
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from store.errors import StoreFailure
        from store.worker import Worker

        runtime.install_registry()
        runtime.discover_jobs()
        names = options["store"] or list(services.configured_stores())
        metrics, server = self._metrics(options)
        workers = []
        for name in names:
            try:
                job_store = runtime.build_store(name)
            except StoreFailure as exc:
                raise CommandError(f"cannot reach the store {name!r}: {exc}") from exc
            workers.append(
                Worker(
                    job_store,
                    stalled_interval_ms=options["stalled_interval_ms"],
                    max_stalled_count=options["max_stalled_count"],
                    schedule_sweep_interval_ms=options["schedule_interval_ms"],
                    history_sweep_interval_ms=options["history_interval_ms"],
                    flow_sweep_interval_ms=options["flow_interval_ms"],
                    flow_sweeper=True,
                    worker_id=f"sweeper-{name}",
                    metrics=metrics,
                )
            )
            self.stdout.write(f"sweeping store {name} (prefix {job_store.prefix})")
        self.stdout.flush()
        try:
            asyncio.run(self._serve(workers))
        finally:
            if server is not None:
                server.shutdown()
        self.stdout.write("sweepers stopped")

    def _metrics(self, options: dict[str, Any]) -> tuple[Any, Any]:
        if options["metrics_port"] is None:
            return None, None
        from prometheus_client import start_http_server

        from store.worker_metrics import WorkerMetrics

        metrics = WorkerMetrics()
        try:
            server, _thread = start_http_server(
                options["metrics_port"], addr=options["metrics_addr"]
            )
        except OSError as exc:
            raise CommandError(
                f"cannot serve metrics on {options['metrics_addr']}:{options['metrics_port']}: {exc}"
            ) from exc
        # A TCP server's address (typeshed's type also covers other socket families).
        host, port = cast("tuple[str, int]", server.server_address[:2])
        self.stdout.write(f"metrics at http://{host}:{port}/metrics")
        return metrics, server

    async def _serve(self, workers: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, lambda: [w.request_stop() for w in workers])
        await asyncio.gather(*(w.serve() for w in workers))
