"""Who may do what in the dashboard.

Every page needs a logged-in user; every action needs its own Django permission
(declared in :mod:`mqadmin.actions`, made by :class:`mqadmin.models.AuditEntry`'s
migration) and is refused for everyone while
``settings.MQ_DASHBOARD_READ_ONLY`` is on.  The same checks decide which buttons a
page shows (:func:`allowed_actions`) and whether a POST is served
(:func:`action_denial`), so a hidden button never hides an open endpoint.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mqadmin import actions

APP = "mqadmin"

#: Needed to see payloads, exits and metadata values.
VIEW_PAYLOAD = f"{APP}.{actions.VIEW_PAYLOAD.codename}"
#: Needed to see the audit log (Django's default view permission of the model).
VIEW_AUDIT = f"{APP}.view_auditentry"

#: Shown in place of a value the user may not see.
HIDDEN_VALUE = "hidden: needs the view payload permission"


def read_only() -> bool:
    return bool(getattr(settings, "MQ_DASHBOARD_READ_ONLY", False))


def action_permissions() -> dict[str, str]:
    """Action name -> the permission codename it needs (bulk runs need ``bulk_action`` too).

    Action names are the registry's verb keys (a verb checked as another one has no
    entry) and the operations checked by name: bulk runs, queue drains and cleans.
    """
    names = {verb.key: verb.grant.codename for verb in actions.VERBS if verb.checked_as is None}
    operations = {name: grant.codename for name, (grant, _) in actions.OPERATIONS.items()}
    return {**names, **operations}


def permission_for(action: str) -> str:
    """``app_label.codename`` of the permission ``action`` needs."""
    return f"{APP}.{action_permissions()[action]}"


def action_denial(user: Any, action: str) -> str | None:
    """Why ``user`` may not run ``action`` now, or None when allowed."""
    if read_only():
        return "The dashboard is read-only (MQ_DASHBOARD_READ_ONLY): actions are disabled."
    if not user.has_perm(permission_for(action)):
        return (
            f"You need the “{action_permissions()[action]}” permission to {describe(action)}. "
            "Ask an administrator to grant it."
        )
    return None


def verb_denial(user: Any, verb: actions.Verb) -> str | None:
    """Why ``user`` may not run ``verb`` now (as the verb it is checked as), or None."""
    return action_denial(user, verb.permission_key)


def bulk_denial(user: Any, verb: str) -> str | None:
    """Why ``user`` may not run ``verb`` in bulk: bulk runs need both permissions."""
    return action_denial(user, actions.BULK) or action_denial(user, verb)


def allowed_actions(user: Any) -> dict[str, bool]:
    """Action name -> whether its button is shown to ``user`` (False for all when read-only).

    Every verb key is present, a verb checked as another one with that one's answer.
    """
    allowed = {action: action_denial(user, action) is None for action in action_permissions()}
    for verb in actions.VERBS:
        allowed[verb.key] = allowed[verb.permission_key]
    return allowed


def can_view_payload(user: Any) -> bool:
    return bool(user.has_perm(VIEW_PAYLOAD))


def can_view_audit(user: Any) -> bool:
    return bool(user.has_perm(VIEW_AUDIT))


def describe(action: str) -> str:
    """The action in words, for messages ("retry jobs")."""
    if action in actions.OPERATIONS:
        return actions.OPERATIONS[action][1]
    return actions.by_key()[action].doing
