"""The no-op job `manage.py runworker` runs in bench/drain_bench.py (found via MQ_JOB_MODULES)."""

from __future__ import annotations

from typing import Any

from bench.limits_bench import NAME, QUEUE
from store import Job

noop = Job(NAME, queue=QUEUE)


@noop.handler
def run_noop(payload: Any) -> None:
    return None
