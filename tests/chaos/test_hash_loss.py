"""Damaged state under load: 4 worker processes drain 20k jobs while another process deletes
about 1% of the job hashes (only the hash, as eviction or a hand-made DEL would).

The full description and every check are in bench/hash_loss.py (same code, same size:
``python -m bench.hash_loss``).  One worker is SIGKILLed half-way, so stalled recovery must
keep working after orphaned ids sat in the active set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.hash_loss import LossConfig, run_hash_loss


@pytest.mark.timeout(300)
def test_workers_survive_deleted_hashes_and_mqcheck_repairs_the_rest(
    private_redis: Any, tmp_path: Path
) -> None:
    server = private_redis()
    cfg = LossConfig(jobs=20_000, workers=4, loss=0.01, seed=20261203, timeout_s=240.0)
    report = run_hash_loss(server.url, "hash-loss-ci", cfg, tmp_path, log=print)
    print(report.table("hash loss (CI)"))
    assert not report.problems, "\n".join(report.problems[:40])
    figures = report.figures
    assert figures["job hashes deleted"] >= 150
    assert figures["surviving jobs completed"] == 20_000 - figures["job hashes deleted"]
    assert figures["jobs with a stall in their ledger"] >= 1, "the SIGKILL stalled no job"
    assert figures["jobs with other than one terminal ledger entry"] == 0
    assert figures["mqcheck --repair exit"] in (0, 1)
    assert figures["mqcheck after repair exit"] == 0
