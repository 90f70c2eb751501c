"""The demo app: it holds no models, only ``jobs.py`` (found by ``runworker``'s discovery)."""

from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "mqadmin.demo"
    label = "mqadmin_demo"
    verbose_name = "mqadmin demo jobs"
