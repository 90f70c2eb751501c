"""Who may do what in the dashboard.

Every page needs a logged-in user; every action needs its own Django permission
(declared on :class:`mqadmin.models.AuditEntry`) and is refused for everyone while
``settings.MQ_DASHBOARD_READ_ONLY`` is on.  The same checks decide which buttons a
page shows (:func:`allowed_actions`) and whether a POST is served
(:func:`action_denial`), so a hidden button never hides an open endpoint.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

APP = "mqadmin"

#: Action name -> the permission codename it needs (bulk runs need ``bulk_action`` too).
ACTION_PERMISSIONS: dict[str, str] = {
    "retry": "retry_job",
    "cancel": "cancel_job",
    "promote": "promote_job",
    "remove": "remove_job",
    "pause": "pause_queue",
    "resume": "pause_queue",
    "bulk": "bulk_action",
    "trigger_schedule": "trigger_schedule",
    "remove_schedule": "remove_schedule",
}

#: The job verbs, in the order buttons show them.
JOB_ACTIONS: tuple[str, ...] = ("retry", "cancel", "promote", "remove")

#: Needed to see payloads, exits and metadata values.
VIEW_PAYLOAD = f"{APP}.view_payload"
#: Needed to see the audit log (Django's default view permission of the model).
VIEW_AUDIT = f"{APP}.view_auditentry"

#: Shown in place of a value the user may not see.
HIDDEN_VALUE = "hidden: needs the view payload permission"


def read_only() -> bool:
    return bool(getattr(settings, "MQ_DASHBOARD_READ_ONLY", False))


def permission_for(action: str) -> str:
    """``app_label.codename`` of the permission ``action`` needs."""
    return f"{APP}.{ACTION_PERMISSIONS[action]}"


def action_denial(user: Any, action: str) -> str | None:
    """Why ``user`` may not run ``action`` now, or None when allowed."""
    if read_only():
        return "The dashboard is read-only (MQ_DASHBOARD_READ_ONLY): actions are disabled."
    if not user.has_perm(permission_for(action)):
        return (
            f"You need the “{ACTION_PERMISSIONS[action]}” permission to {describe(action)}. "
            "Ask an administrator to grant it."
        )
    return None


def bulk_denial(user: Any, verb: str) -> str | None:
    """Why ``user`` may not run ``verb`` in bulk: bulk runs need both permissions."""
    return action_denial(user, "bulk") or action_denial(user, verb)


def allowed_actions(user: Any) -> dict[str, bool]:
    """Action name -> whether its button is shown to ``user`` (False for all when read-only)."""
    return {action: action_denial(user, action) is None for action in ACTION_PERMISSIONS}


def can_view_payload(user: Any) -> bool:
    return bool(user.has_perm(VIEW_PAYLOAD))


def can_view_audit(user: Any) -> bool:
    return bool(user.has_perm(VIEW_AUDIT))


def describe(action: str) -> str:
    """The action in words, for messages ("retry jobs")."""
    return {
        "retry": "retry jobs",
        "cancel": "cancel jobs",
        "promote": "promote jobs",
        "remove": "remove jobs",
        "pause": "pause queues",
        "resume": "resume queues",
        "bulk": "run bulk actions",
        "trigger_schedule": "trigger schedules",
        "remove_schedule": "remove schedules",
    }[action]
