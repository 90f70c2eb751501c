"""What several pages' queries share: the job states and the live-worker window."""

from __future__ import annotations

from mqadmin import services

#: The seven job states, in the order the dashboard shows them.
STATES = services.STATES
#: The states a job ends in.
TERMINAL = ("completed", "failed", "cancelled")
#: Workers count as live when seen this recently (they refresh every few seconds).
LIVE_WORKER_MS = 60_000
