"""The Lua script registry.

Each atomic operation is one file in ``store/lua/``; the shared helpers in
``store/lua/lib/`` are stitched in front of it, in file-name order.  On a
standalone Redis 7+ the whole set is loaded once as a Redis Function library
(helpers are then built once per server, not on every call); on Redis 6.2 and
on Redis Cluster each operation runs as a script via EVALSHA (reloaded on
NOSCRIPT).  Either way a call passes the store's hash tag as its only key.

Calls go over a per-thread connection of the client's pool settings, which
avoids the pool checkout and health probes redis-py performs per command;
Cluster clients use redis-py's own routing.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

LUA_DIR = Path(__file__).with_name("lua")

#: Operations that read or only free memory: they must keep working on a full server
#: (maxmemory with noeviction), so an operator can list jobs and remove them.
OOM_SAFE = frozenset({"list", "remove", "sweep_history", "sweep_dedupes", "prune_keep"})

try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pure-Python fallback
    _hiredis_pack = None


@functools.cache
def _preamble() -> str:
    parts = []
    for path in sorted((LUA_DIR / "lib").glob("*.lua")):
        parts.append(f"-- >>> lib/{path.name}\n{path.read_text(encoding='utf-8')}")
    return "\n".join(parts)


def script_names() -> list[str]:
    return sorted(p.stem for p in LUA_DIR.glob("*.lua"))


@functools.cache
def _body(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


@functools.cache
def script_text(name: str) -> str:
    """The text EVAL runs for operation ``name``: helpers, per-call set-up, the body."""
    return f"{_preamble()}\nbegin_call(KEYS[1])\n-- >>> {name}.lua\n{_body(name)}"


@functools.cache
def library() -> tuple[str, str]:
    """(library name, code) of the Redis Function library holding every operation."""
    bodies = "\n".join(f"S[{name!r}] = function()\n{_body(name)}\nend" for name in script_names())
    core = f"local KEYS, ARGV\n{_preamble()}\nlocal S = {{}}\n{bodies}\n"
    lib = "mq_" + hashlib.sha1(core.encode()).hexdigest()[:16]
    # Registrations are spelled out: the load step may not call most globals.
    registrations = "".join(
        f"redis.register_function{{function_name='{lib}_{name}', callback=function(keys, args)\n"
        "  KEYS, ARGV = keys, args\n"
        "  begin_call(keys[1])\n"
        f"  return S[{name!r}]()\n"
        f"end{', flags={' + repr('allow-oom') + '}' if name in OOM_SAFE else ''}}}\n"
        for name in script_names()
    )
    return lib, f"#!lua name={lib}\n{core}{registrations}"


def _pack(conn: Any, command: tuple[Any, ...]) -> list[bytes]:
    """RESP-encode a command: in C with hiredis, else redis-py's packer.

    Our arguments are str and int; hiredis packs those as they are.  Anything
    else it refuses (bool, say) is sent as ``str(value)``, as before.
    """
    if _hiredis_pack is not None:
        try:
            return [_hiredis_pack(command)]
        except TypeError:
            return [_hiredis_pack(tuple(a if isinstance(a, str) else str(a) for a in command))]
    packed: list[bytes] = conn.pack_command(*command)
    return packed


def _with_shebang(name: str, text: str, strict: bool) -> str:
    if not strict or text.startswith("#!"):
        return text
    return ("#!lua flags=allow-oom\n" if name in OOM_SAFE else "#!lua\n") + text


def _server_major(client: Any) -> int:
    """The lowest major version among the server(s) behind ``client`` (0 if unknown)."""
    try:
        info = client.info("server")
    except redis.RedisError:
        return 0
    # A cluster client answers per node: {node: {field: value}}.
    nodes = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
    try:
        return min(int(str(n["redis_version"]).split(".")[0]) for n in nodes)
    except (KeyError, ValueError):
        return 0


class ScriptRegistry:
    """Runs the store's operations on one client, passing the hash tag as KEYS[1]."""

    def __init__(self, client: Any, tag: str) -> None:
        self._client = client
        self._tag = tag
        self._keys = [tag]
        self._direct = isinstance(client, redis.Redis)
        self._local = threading.local()
        # Weak: a connection dies with its thread's local storage (short-lived
        # request threads must not pin sockets); close() disconnects the rest.
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._functions = self._direct and _server_major(client) >= 7
        # Per operation, the command words in front of its arguments.
        self._heads: dict[str, tuple[Any, ...]] = {}
        if self._functions:
            self._lib, self._lib_code = library()
            self._load_library()
        else:
            # On Redis 7 a script with a shebang may not touch a second slot: on a
            # cluster that turns the one-store-one-slot rule into an enforced error.
            strict = not self._direct and _server_major(client) >= 7
            self._texts = {
                name: _with_shebang(name, script_text(name), strict) for name in script_names()
            }
            self._shas = {
                name: hashlib.sha1(t.encode()).hexdigest() for name, t in self._texts.items()
            }
            self._scripts = {name: client.register_script(t) for name, t in self._texts.items()}

    @property
    def mode(self) -> str:
        return "functions" if self._functions else "scripts"

    def _load_library(self) -> None:
        try:
            self._client.function_load(self._lib_code)
        except ResponseError as exc:
            if "already exists" not in str(exc):
                raise

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # Built from the pool's settings but outside it: the pool's own
            # connections (and its max_connections budget) stay for other commands.
            pool = self._client.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            self._local.conn = conn
            with self._lock:
                self._connections.add(conn)
        return conn

    def __call__(self, name: str, *args: Any) -> Any:
        if not self._direct:
            return self._scripts[name](keys=self._keys, args=args)
        head = self._heads.get(name)
        if head is None:
            if self._functions:
                head = ("FCALL", f"{self._lib}_{name}", 1, self._tag)
            else:
                head = ("EVALSHA", self._shas[name], 1, self._tag)
            self._heads[name] = head
        conn = getattr(self._local, "conn", None) or self._connection()
        packed = _pack(conn, head + args)
        for attempt in range(3):
            try:
                conn.send_packed_command(packed)
                return conn.read_response()
            except NoScriptError:
                conn.send_command("SCRIPT", "LOAD", self._texts[name])
                conn.read_response()
            except ResponseError as exc:
                if "Function not found" not in str(exc) or attempt == 2:
                    raise
                self._load_library()  # someone ran FUNCTION FLUSH
            except RedisTimeoutError:
                # The call may still run once the server answers: never send it twice.
                conn.disconnect()
                raise
            except (RedisConnectionError, OSError):
                conn.disconnect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections)
            self._connections = weakref.WeakSet()
        for conn in connections:
            conn.disconnect()
