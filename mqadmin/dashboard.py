"""The job verbs' rules, waiting for the verb registry.

What is left here is what the job verbs share: which verbs a job's state allows
(:func:`actions_for_state`), why a state refuses one (:data:`STATE_RULES`) and
running one verb on one job (:func:`run_job_action`).  They move to the verb
registry (``mqadmin/actions.py``).  The pages' queries live in :mod:`mqadmin.queries`,
one module per page; opening stores and turning their failures into the
dashboard's errors is :mod:`mqadmin.services`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqadmin.queries.common import TERMINAL
from mqadmin.services import open_store, reaching

# ``open_store`` and ``reaching`` live in :mod:`mqadmin.services`; ``views/actions.py``
# reaches them through this module until the verb registry replaces it.
__all__ = [
    "STATE_RULES",
    "ActionResult",
    "actions_for_state",
    "open_store",
    "reaching",
    "run_job_action",
]


def actions_for_state(state: str) -> dict[str, bool]:
    """Which verbs the store accepts for a job in ``state`` (store contract §4.12–4.16)."""
    return {
        "retry": state == "failed",
        "cancel": state not in TERMINAL,
        "promote": state == "delayed",
        "remove": state not in ("active", "waiting-children"),
    }


@dataclass(frozen=True)
class ActionResult:
    ok: bool
    message: str


STATE_RULES = {
    "retry": "only failed jobs can be retried",
    "cancel": "finished jobs cannot be cancelled",
    "promote": "only delayed jobs can be promoted",
    "remove": "active jobs and flow parents waiting for children cannot be removed",
}


def run_job_action(job_store: Any, verb: str, job_id: str) -> ActionResult:
    """One verb on one job, with a message that says why when the state forbids it."""
    from store.errors import (
        JobNotCancellableError,
        JobNotFoundError,
        JobNotPromotableError,
        JobNotRetryableError,
    )

    try:
        if verb == "retry":
            job_store.retry(job_id)
            return ActionResult(True, f"Retried {job_id}: it is waiting again.")
        if verb == "cancel":
            before = job_store.get_job(job_id)
            job_store.cancel(job_id)
            if before is not None and before.state == "active":
                return ActionResult(
                    True,
                    f"Cancel requested for {job_id}: it is running, so its worker stops it at "
                    "the next heartbeat.",
                )
            return ActionResult(True, f"Cancelled {job_id}.")
        if verb == "promote":
            job_store.promote(job_id)
            return ActionResult(True, f"Promoted {job_id}: it is waiting now.")
        if verb == "remove":
            if job_store.remove(job_id):
                return ActionResult(True, f"Removed {job_id}.")
            current = job_store.get_job(job_id)
            if current is None:
                return ActionResult(False, f"Cannot remove {job_id}: no such job.")
            return ActionResult(
                False,
                f"Cannot remove {job_id}: the job is {current.state} — {STATE_RULES['remove']}.",
            )
    except JobNotFoundError:
        return ActionResult(False, f"Cannot {verb} {job_id}: no such job.")
    except (JobNotRetryableError, JobNotCancellableError, JobNotPromotableError) as exc:
        return ActionResult(
            False, f"Cannot {verb} {job_id}: the job is {exc.state} — {STATE_RULES[verb]}."
        )
    raise ValueError(f"unknown job action {verb!r}")
