"""App configuration of mqadmin."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed

# Settings whose change invalidates the cached Redis clients and stores.
STORE_SETTINGS = frozenset({"MQ_STORES", "MQ_REDIS_URL", "MQ_PREFIX"})


class MqadminConfig(AppConfig):
    name = "mqadmin"
    verbose_name = "mqadmin"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mqadmin.checks import (
            check_eviction_policy,
            check_host_project,
            check_store_scripts,
            check_store_settings,
        )
        from mqadmin.runtime import install_registry

        checks.register(check_store_settings)
        checks.register(check_host_project)
        checks.register(check_eviction_policy)
        checks.register(check_store_scripts)
        install_registry()
        setting_changed.connect(_store_settings_changed, dispatch_uid="mqadmin-store-settings")


def _store_settings_changed(*, setting: str, **kwargs: Any) -> None:
    # override_settings in tests (and any runtime change) must not reuse a client or
    # store built for the previous configuration.
    if setting in STORE_SETTINGS:
        from mqadmin import services

        services.reset()
