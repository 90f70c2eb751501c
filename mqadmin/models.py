"""The dashboard's own data: the audit log of every action taken through it.

The job data lives in Redis; the database only holds Django's users, sessions and
this log.  The model also carries the dashboard's per-action permissions
(``Meta.permissions``, from :data:`mqadmin.actions.GRANTS`), so they are granted like any Django permission
("mqadmin | audit entry | Can retry failed jobs" in the admin).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from mqadmin import actions


class AuditEntry(models.Model):
    """One action taken through the dashboard: who, what, on which store and target, and how it went."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="mq_audit_entries",
    )
    # Kept beside the foreign key: the log must still say who it was after the user
    # account is deleted.
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=40, db_index=True)
    store = models.CharField(max_length=200, blank=True)
    # A job id, a queue, a schedule key or a filter description (job ids may be long).
    target = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    result = models.TextField(blank=True)
    ok = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ("-id",)
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
        # Declared with the verbs that need them; a new grant needs a migration.
        permissions = actions.model_permissions()

    def __str__(self) -> str:
        outcome = "ok" if self.ok else "failed"
        return f"{self.username} {self.action} {self.store}:{self.target} ({outcome})"

    @property
    def links_to_job(self) -> bool:
        """The target is a job that may still exist (a job verb that does not remove it)."""
        return bool(self.store) and actions.links_to_target(self.action, self.ok)

    @classmethod
    def record(
        cls,
        user: Any,
        action: str,
        *,
        store: str = "",
        target: str = "",
        params: dict[str, Any] | None = None,
        result: str = "",
        ok: bool = True,
    ) -> AuditEntry:
        """Write one entry for ``user`` (an authenticated user, or anonymous for commands)."""
        authenticated = bool(getattr(user, "is_authenticated", False))
        return cls.objects.create(
            user=user if authenticated else None,
            # A custom user model's name (an e-mail, say) may be longer than the column.
            username=user.get_username()[: cls.username.field.max_length] if authenticated else "",
            action=action,
            store=store,
            target=target,
            params=params or {},
            result=result,
            ok=ok,
        )
