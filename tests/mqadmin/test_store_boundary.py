"""``mqadmin`` uses only the store's public API (issue 25: a closed store boundary).

An AST scan of every module of the app: no ``redis`` import (store failures arrive as
the store's typed errors, raw-client failures are ``store.UNAVAILABLE_ERRORS``), no
import of the store's key layout or internals, no ``.client``, no ``.keys`` of a store,
and no private attribute of anything but ``self``/``cls``.  What the app needs from
the store is a public method (``store.JobStore`` lists them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import mqadmin

APP_DIR = Path(mqadmin.__file__).parent
ROOT = APP_DIR.parent

#: Store modules that are the store's internals: the key layout, the chunked sets'
#: representation, the Lua registry, and the module behind ``store.RedisJobStore``.
INTERNAL_MODULES = frozenset({"store.keys", "store.chunks", "store.scripts", "store.redis_store"})
#: Store functions the app may import from an internal module: its public entry points.
PUBLIC_FROM_INTERNAL = {"store.scripts": frozenset({"probe_scripts"})}

#: Private names of other libraries that are their documented API.
FOREIGN_PRIVATE = frozenset({"_meta", "_default_manager", "_replace", "_asdict", "_fields"})

#: Files allowed a reach-in, with the reach-ins they may keep.  None is left: nothing may be
#: added here.
ALLOWED: dict[str, frozenset[str]] = {}


def _is_store_like(node: ast.expr) -> bool:
    """``store``, ``job_store``, ``child_store``, ``self.store``... (how the app names stores)."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "store" or name.endswith("_store")


def violations(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "redis" or alias.name.startswith("redis."):
                    found.add(f"imports redis ({alias.name})")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if module == "redis" or module.startswith("redis."):
                found.add(f"imports redis ({module})")
            elif module == "store" or module.startswith("store."):
                names = {alias.name for alias in node.names}
                for name in sorted(n for n in names if n.startswith("_")):
                    found.add(f"private store name {module}.{name}")
                if module in INTERNAL_MODULES and not names <= PUBLIC_FROM_INTERNAL.get(
                    module, frozenset()
                ):
                    found.add(f"internal store module {module}")
        elif isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            if node.attr == "client":
                found.add(f"store client: {owner}.client")
            elif node.attr == "keys":
                parent = parents.get(id(node))
                called = isinstance(parent, ast.Call) and parent.func is node
                # A store's keys, or anyone's key builder (``x.keys.index_ready``); a
                # result's ``keys`` field (ReclaimResult.keys, a count) is not one.
                if not called and (_is_store_like(node.value) or isinstance(parent, ast.Attribute)):
                    found.add(f"store keys: {owner}.keys")
            elif (
                node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in FOREIGN_PRIVATE
                and owner not in ("self", "cls")
            ):
                found.add(f"private attribute: {owner}.{node.attr}")
    return found


def app_modules() -> list[Path]:
    return sorted(p for p in APP_DIR.rglob("*.py") if "migrations" not in p.parts)


def test_mqadmin_uses_only_the_public_store_api() -> None:
    problems: dict[str, set[str]] = {}
    for path in app_modules():
        name = path.relative_to(ROOT).as_posix()
        found = violations(path) - ALLOWED.get(name, frozenset())
        if found:
            problems[name] = found
    assert problems == {}, (
        "mqadmin reaches past the store's public API; add a public store method "
        f"(and to store.JobStore) instead: {problems}"
    )


def test_the_scan_finds_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import redis\n"
        "from redis.exceptions import RedisError\n"
        "from store.keys import StoreKeys\n"
        "from store.redis_store import redis_errors\n"
        "from store.scripts import probe_scripts\n"
        "from store import _private\n"
        "def f(job_store, store, report, other):\n"
        "    job_store.client.get('x')\n"
        "    store.keys.resolvable\n"
        "    plan(job_store.keys)\n"
        "    other.keys.index_ready('name')\n"
        "    store._command('sadd')\n"
        "    print(report.keys, other.keys(), self._ok, cls._meta, parts._replace())\n",
        encoding="utf-8",
    )
    assert violations(sample) == {
        "imports redis (redis)",
        "imports redis (redis.exceptions)",
        "internal store module store.keys",
        "internal store module store.redis_store",
        "private store name store._private",
        "store client: job_store.client",
        "store keys: store.keys",
        "store keys: job_store.keys",
        "store keys: other.keys",
        "private attribute: store._command",
    }


def test_the_allow_list_only_shrinks() -> None:
    for name, allowed in ALLOWED.items():
        path = ROOT / name
        if path.exists():
            assert violations(path) <= allowed, name
