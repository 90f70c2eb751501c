"""Jobs used by the command tests (imported by worker processes via MQ_JOB_MODULES)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from store import Job, current_job

echo = Job("Echo", queue="default")
blocker = Job("Blocker", queue="slow")


@echo.handler
def run_echo(payload: dict) -> dict:
    return {"echo": payload, "attempt": current_job().attempt}


@blocker.handler
def run_blocker(payload: dict) -> None:
    # Tell the test we started, then block cooperatively until interrupted.
    Path(payload["marker"]).write_text(str(os.getpid()))
    while True:
        current_job().check_interrupted()
        time.sleep(0.01)
