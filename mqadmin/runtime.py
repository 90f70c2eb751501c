"""Running the job runtime inside the Django project.

* Stores come from ``settings.MQ_STORES`` (name -> {"prefix", "url", "indexes",
  "history_ttl"}); a store's name is its store key, the string flows use to
  route child reports, so every process of the project resolves the same
  names to the same stores.  ``store.default_registry`` is wired to build them
  on first use (:func:`install_registry`, called from ``AppConfig.ready``).
* Job definitions are discovered like Django apps expect: a ``jobs`` module in
  any installed app, plus the dotted modules listed in ``MQ_JOB_MODULES``.
* Around every synchronous job the worker closes stale database connections,
  as Django does around a request.
* Django tasks (``settings.TASKS`` backends of ``mqadmin.tasks.StoreBackend``) need no
  registration: :func:`tasks_resolver` gives the worker a resolver that claims the
  module paths those backends enqueued and imports them on first use.
* ``store.Job.enqueue(..., on_commit=True)`` waits for the surrounding transaction
  (Django's ``transaction.on_commit``), hooked in by :func:`install_registry`.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import close_old_connections
from django.utils.module_loading import autodiscover_modules

from mqadmin import services

if TYPE_CHECKING:
    from mqadmin.tasks import TaskResolver
    from store.protocol import JobStore

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_installed = False


def store_entry(name: str) -> dict[str, Any]:
    stores = services.configured_stores()
    if name not in stores:
        from store.errors import InvalidRequestError

        raise InvalidRequestError(
            f"no store named {name!r} in MQ_STORES (known: {', '.join(sorted(stores))})"
        )
    return stores[name]


def build_store(name: str) -> Any:
    """A RedisJobStore for the configured store ``name`` (its name is its store key)."""
    return services.get_named_store(name)


def install_registry() -> None:
    """Make ``store.default_registry`` build stores from MQ_STORES (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        from store.registry import default_registry

        default_registry.set_factory(build_store, keys=lambda: list(services.configured_stores()))
        install_commit_hook()
        _installed = True


def install_commit_hook() -> None:
    """``Job.enqueue(..., on_commit=True)`` defers to ``transaction.on_commit`` inside a transaction."""
    from django.db import transaction

    from store.jobs import set_commit_hook

    def hook(callback: Any) -> bool:
        if not transaction.get_connection().in_atomic_block:
            return False
        transaction.on_commit(callback)
        return True

    set_commit_hook(hook)


def tasks_resolver(job_store: JobStore, queues: list[str] | None = None) -> TaskResolver | None:
    """The worker's resolver for the Django tasks of ``job_store``, or None.

    None when no Django Tasks package is installed or no ``TASKS`` backend is a
    ``mqadmin.tasks.StoreBackend`` on this store.  ``queues`` limits the queues served.
    """
    try:
        from mqadmin.tasks import TaskResolver, backends_for
    except ImportError:
        return None
    backends = backends_for(job_store.store_key)
    if not backends:
        return None
    allowed: set[str] = set()
    for backend in backends:
        allowed |= set(backend.queues)
    return TaskResolver(
        job_store,
        queues=allowed,
        only=queues or None,
        backend_alias=backends[0].alias,
        any_queue=any(not backend.queues for backend in backends),
    )


def discover_jobs() -> list[str]:
    """Import every app's ``jobs`` module and the modules in MQ_JOB_MODULES; returns job names."""
    autodiscover_modules("jobs")
    for module in getattr(settings, "MQ_JOB_MODULES", []) or []:
        importlib.import_module(module)
    from store.jobs import JOBS

    return sorted(j.name for j in JOBS.all())


def django_job_hooks() -> list[tuple[Any, Any]]:
    """Close stale DB connections before and after each synchronous job (Django's request rhythm)."""
    return [(close_old_connections, close_old_connections)]
