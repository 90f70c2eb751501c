"""No-op job functions referenced by import path (rq stores the function's dotted name)."""

from __future__ import annotations

from typing import Any


def noop(payload: dict[str, Any]) -> None:
    """Ignore the payload: the benchmark measures the queue, not the job."""
    return None
