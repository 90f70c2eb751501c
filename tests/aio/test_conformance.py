"""The sync store's conformance tests for enqueue, enqueue_many, reads, list, counts, the
admin verbs, the event stream, job logs and the result wait, run against the async store (the facade of tests/aio/conftest.py).

The test functions are the very ones of tests/store/, collected again here where the
``store`` fixture is the async store's facade.  Left out, to keep the suite's run time:
the list tests over 1,260-row fixtures (``bulk``) and the 48-case route matrix
(``matrix``), which exercise the list script's paging and the query planner (code both
stores share as it is) rather than the store's call of them.
"""

from __future__ import annotations

import importlib
import inspect

#: Modules of tests/store/ whose tests run here too.
MODULES = (
    "test_enqueue",
    "test_enqueue_many",
    "test_admin",
    "test_counts",
    "test_list",
    "test_list_search",
    "test_events",
)
#: Fixtures those modules define for themselves (collected with their tests).
MODULE_FIXTURES: set[str] = {"seeded"}
#: Tests left out (see the module docstring).
LEFT_OUT_FIXTURES = {"bulk", "matrix"}


def _collect() -> dict[str, object]:
    found: dict[str, object] = {}
    for module_name in MODULES:
        module = importlib.import_module(f"tests.store.{module_name}")
        for name, value in vars(module).items():
            if name in MODULE_FIXTURES:
                found[name] = value
            elif name.startswith("test_") and callable(value):
                wanted = set(inspect.signature(value).parameters)
                if not wanted & LEFT_OUT_FIXTURES:
                    # Named after the module too: two modules may share a test name.
                    found[f"test_{module_name[5:]}__{name[5:]}"] = value
    return found


globals().update(_collect())


def test_the_facade_awaits_the_async_store_for_its_operations(store):
    from store.aio import AsyncRedisJobStore
    from tests.aio.conftest import ASYNC_OPERATIONS

    assert isinstance(store.astore, AsyncRedisJobStore)
    for name in ASYNC_OPERATIONS:
        assert inspect.iscoroutinefunction(getattr(AsyncRedisJobStore, name)), name
    store.pause("q")
    # Written by the async store: its client, its scripts' mode chosen at its start.
    assert store.astore._started and store.paused_queues() == ["q"]
