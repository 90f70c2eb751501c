"""A job that always fails, for the worker-metrics command tests (with sample_jobs)."""

from __future__ import annotations

from store import Job

always_fails = Job("AlwaysFails", queue="default")


@always_fails.handler
def run_always_fails(payload: dict) -> None:
    raise RuntimeError("this job always fails")
