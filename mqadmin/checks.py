"""System checks of the store settings (run by `manage.py check` and on start-up)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from mqadmin.config import validate_stores


def check_store_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """MQ_STORES must map store names to {"prefix": ..., "url": ...}."""
    problems = validate_stores(getattr(settings, "MQ_STORES", None))
    return [
        Error(
            f"MQ_STORES: {problem}",
            hint='Example: {"default": {"prefix": "mq"}, "billing": {"prefix": "billing"}}',
            id="mqadmin.E001",
        )
        for problem in problems
    ]
