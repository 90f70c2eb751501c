"""The chaos soak, CI size: 3 worker processes, one SIGKILLed every ~2 s, 1,500 jobs + a flow.

The full run is ``python -m bench.chaos --jobs 20000 --workers 4`` (same code, bench/chaos.py).
Every check is listed in bench/chaos.py's docstring; the soak collects violations as
``problems`` instead of stopping at the first one, and the test fails on any.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.chaos import SoakConfig, run_soak


@pytest.mark.timeout(300)
def test_sigkilled_workers_lose_nothing_and_complete_nothing_twice(
    private_redis: Any, tmp_path: Path
) -> None:
    server = private_redis()
    cfg = SoakConfig(
        jobs=1500,
        workers=3,
        concurrency=2,
        kill_every_s=2.0,
        produce_s=12.0,
        flow_children=100,
        timeout_s=200.0,
        seed=20261202,
    )
    report = run_soak(server.url, "chaos-ci", cfg, tmp_path, log=print)
    print(report.table("chaos soak (CI size)"))
    assert not report.problems, "\n".join(report.problems[:40])
    figures = report.figures
    assert figures["SIGKILLs"] >= 3, "the driver did not get to kill workers mid-run"
    assert figures["final states"] == {"completed": 1601}
    assert figures["jobs completed twice"] == 0
