"""Concurrency torture, CI size: 8 processes claim from one queue at once (5,000 jobs).

Half use ``claim`` + ``ack``, half ``ack_and_claim_many`` with a prefetch of 4, while the test
keeps enqueueing; locks outlive the run, so every job must be claimed exactly once under one
token and complete exactly once.  The full run: ``python -m bench.chaos --torture --jobs 50000
--procs 8``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.chaos import TortureConfig, run_torture


@pytest.mark.timeout(240)
def test_eight_processes_never_share_a_job_and_each_completes_once(
    private_redis: Any, tmp_path: Path
) -> None:
    server = private_redis()
    cfg = TortureConfig(jobs=5000, procs=8, prefetch=4, timeout_s=180.0)
    report = run_torture(server.url, "torture-ci", cfg, tmp_path, log=print)
    print(report.table("concurrency torture (CI size)"))
    assert not report.problems, "\n".join(report.problems[:40])
    assert report.figures["claims recorded"] == 5000
    assert report.figures["jobs claimed twice"] == 0
