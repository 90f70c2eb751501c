"""The Lua script registry.

Each atomic operation is one file in ``store/lua/``; the shared helpers in
``store/lua/lib/`` are stitched in front of every script body, in file-name
order.  Texts are read once per process; each client gets one registered
script object per operation (EVALSHA, with a reload on NOSCRIPT).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

LUA_DIR = Path(__file__).with_name("lua")


@functools.cache
def _preamble() -> str:
    parts = []
    for path in sorted((LUA_DIR / "lib").glob("*.lua")):
        parts.append(f"-- >>> lib/{path.name}\n{path.read_text(encoding='utf-8')}")
    return "\n".join(parts)


@functools.cache
def script_text(name: str) -> str:
    """The full text sent to Redis for operation ``name``: helpers, then the body."""
    body = (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")
    return f"{_preamble()}\n-- >>> {name}.lua\n{body}"


def script_names() -> list[str]:
    return sorted(p.stem for p in LUA_DIR.glob("*.lua"))


class ScriptRegistry:
    """Registered scripts of one client, called with the store's hash tag as KEYS[1]."""

    def __init__(self, client: Any, tag: str) -> None:
        self._client = client
        self._keys = [tag]
        self._scripts = {name: client.register_script(script_text(name)) for name in script_names()}

    def __call__(self, name: str, *args: Any) -> Any:
        return self._scripts[name](keys=self._keys, args=args)
