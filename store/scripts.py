"""The Lua script registry.

Each atomic operation is one file in ``store/lua/``; the shared helpers in
``store/lua/lib/`` are stitched in front of it, in the order ``HELPERS`` lists.  On a
standalone Redis 7+ the whole set is loaded once as a Redis Function library
(helpers are then built once per server, not on every call); on Redis 6.2, on
Redis Cluster, and for a Redis user that may not run FUNCTION LOAD or FCALL
(ACL), each operation runs as a script via EVALSHA (reloaded on NOSCRIPT).
Either way a call passes the store's hash tag as its only key.

Calls go over a per-thread connection of the client's pool settings, which
avoids the pool checkout and health probes redis-py performs per command;
Cluster clients use redis-py's own routing.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from store.errors import permission_problem, store_error
from store.keys import StoreKeys
from store.steps import Steps, cmd, on_client

LUA_DIR = Path(__file__).with_name("lua")

#: Clients the registry calls over its own connections (a Cluster client routes itself).
DIRECT_CLIENTS: tuple[type, ...] = (redis.Redis, redis.asyncio.Redis)

#: Operations that read or only free memory: they must keep working on a full server
#: (maxmemory with noeviction), so an operator can list jobs and remove them.
OOM_SAFE = frozenset({"list", "remove", "sweep_history", "sweep_dedupes", "prune_keep"})

#: The probe: ``oldest_runnable`` of the queue "" (no queue has that name) for the name "".
PROBE = ("oldest_runnable", "", 1, 1, "")

# hiredis's own stub types the command as a one-item tuple; it takes any length.
_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pure-Python fallback
    _hiredis_pack = None


#: The helper files of ``store/lua/lib/``, in the order they are joined.  Each file's
#: ``local`` names exist only after it, so a file comes after every file it uses:
HELPERS = (
    "calls",  # call_runs: commands over argument arrays of any length
    "keys",  # bind(tag), the K_* keys, every k_* key builder and member builder
    "tally",  # TALLY: counter increments summed over a call, written once at its end
    "events",  # the store's event stream: EVENTS.emit
    "limits",  # flow control: queue limits checked inside the claim
    "owed",  # owe / with_owed: work a script leaves to bounded follow-up calls
    "chunks",  # the chunked sorted sets (all-jobs set, list indexes) and their head
    "rows",  # job rows: fmt, long values, waiting members, requests, insert
    "ledger",  # the attempts ledger and the flow outbox
    "dedupe",  # the dedupe registry
    "flows",  # flow dependency rows
    "errors",  # per-error aggregates
    "parked",  # flow parents parked in waiting-children
    "retention",  # deleting rows, keep policies
    "transitions",  # snapshot, finish, make_waiting, cancel
    "claim_ack",  # claim_next, ack_job, the claim scripts' arguments
    "begin_call",  # per-call set-up (bind, owed work, head folded)
)


def helper_paths(lua_dir: Path = LUA_DIR) -> list[Path]:
    """The helper files of ``lua_dir/lib`` in load order; every file there must be listed."""
    listed = [lua_dir / "lib" / f"{name}.lua" for name in HELPERS]
    present = set((lua_dir / "lib").glob("*.lua"))
    if present != set(listed):
        missing = sorted(p.name for p in set(listed) - present)
        unlisted = sorted(p.name for p in present - set(listed))
        raise RuntimeError(
            f"store/lua/lib does not match scripts.HELPERS: missing {missing}, unlisted {unlisted}"
        )
    return listed


@functools.cache
def _preamble() -> str:
    parts = []
    for path in helper_paths():
        parts.append(f"-- >>> lib/{path.name}\n{path.read_text(encoding='utf-8')}")
    return "\n".join(parts)


def script_names() -> list[str]:
    return sorted(p.stem for p in LUA_DIR.glob("*.lua"))


@functools.cache
def _body(name: str) -> str:
    return (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


@functools.cache
def script_text(name: str) -> str:
    """The text EVAL runs for operation ``name``: helpers, per-call set-up, the body (run as
    a function, as in the Function library), then the call's events appended."""
    return (
        f"{_preamble()}\nbegin_call(KEYS[1])\n-- >>> {name}.lua\n"
        f"local op_reply = (function()\n{_body(name)}\nend)()\nTALLY.flush()\nEVENTS.flush()\nreturn op_reply"
    )


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
        f"  local reply = S[{name!r}]()\n"
        "  TALLY.flush()\n"
        "  EVENTS.flush(true)\n"
        "  return reply\n"
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


def server_major_steps() -> Steps[int]:
    """The lowest major version among the server(s) behind the client (0 if unknown)."""
    try:
        info = yield cmd(None, "info", "server")
    except NoPermissionError:
        # INFO is in @dangerous; HELLO (any user may run it) says the version too.
        return (yield from _hello_major_steps())
    except redis.RedisError:
        return 0
    # A cluster client answers per node: {node: {field: value}}.
    nodes = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
    try:
        return min(int(str(n["redis_version"]).split(".")[0]) for n in nodes)
    except (KeyError, ValueError):
        return 0


def _hello_major_steps() -> Steps[int]:
    try:
        reply = yield cmd(None, "execute_command", "HELLO")
    except redis.RedisError:
        return 0
    if isinstance(reply, list):  # RESP2: [field, value, field, value, ...]
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    if not isinstance(reply, dict):
        return 0
    version = reply.get("version", reply.get(b"version", ""))
    if isinstance(version, bytes):
        version = version.decode()
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def load_library_steps() -> Steps[bool]:
    """Make sure the Function library is loaded; False when this user may not (ACL)."""
    lib, code = library()
    try:
        if (yield cmd(None, "function_list", library=lib)):
            return True
    except NoPermissionError:
        pass  # a user may run FUNCTION LOAD without FUNCTION LIST: try it
    try:
        yield cmd(None, "function_load", code)
    except NoPermissionError:
        return False
    except ResponseError as exc:
        if "already exists" not in str(exc):
            raise
    return True


def select_mode_steps(direct: bool) -> Steps[tuple[int, bool]]:
    """(server major version, use Functions): Functions on a standalone Redis 7+ whose
    user may load and call them, scripts (EVALSHA) everywhere else."""
    major = yield from server_major_steps()
    functions = direct and major >= 7
    if functions:
        functions = yield from load_library_steps()
    return major, functions


def call_failure(exc: Exception, fcall: bool, attempt: int) -> str:
    """What a script call does about ``exc`` on its ``attempt`` (0, 1, 2):

    ``load`` (NOSCRIPT: SCRIPT LOAD the text, call again), ``fallback`` (FCALL refused by
    the user's ACL: switch to scripts for good, call again), ``reload`` (the Function is
    gone, someone ran FUNCTION FLUSH: load the library again, call again), ``reconnect``
    (the connection dropped: call again on a new one), ``drop`` (timed out: the call may
    still run once the server answers, so drop the connection and never send it twice),
    ``raise``.
    """
    last = attempt == 2
    if isinstance(exc, NoScriptError):
        return "load"
    if isinstance(exc, NoPermissionError):
        # Only FCALL itself refused switches modes (not a key the user may not touch).
        return "fallback" if fcall and "'fcall'" in str(exc).lower() and not last else "raise"
    if isinstance(exc, ResponseError):
        return "reload" if "Function not found" in str(exc) and not last else "raise"
    if isinstance(exc, RedisTimeoutError):
        return "drop"
    if isinstance(exc, RedisConnectionError | OSError):
        return "raise" if last else "reconnect"
    return "raise"


class ScriptModes:
    """How operations are called (Functions or EVALSHA scripts), shared by the sync
    registry and the asyncio one (store/aio.py); no I/O here."""

    def _setup(self, client: Any, tag: str, major: int, functions: bool) -> None:
        self._client = client
        self._tag = tag
        self._keys = [tag]
        self._direct = isinstance(client, DIRECT_CLIENTS)
        self._lock = threading.Lock()
        self._major = major
        self._functions = functions
        # Per operation, the command words in front of its arguments.
        self._heads: dict[str, tuple[Any, ...]] = {}
        self._lib = library()[0]
        if not functions:
            self._use_scripts()

    def _use_scripts(self) -> None:
        """Run each operation as a script (EVALSHA; SCRIPT LOAD on NOSCRIPT)."""
        # On Redis 7 a script carries a shebang, so it behaves as the function would:
        # refused whole on a full server unless the operation is OOM_SAFE, and on a
        # cluster it may not touch a second slot (the one-store-one-slot rule enforced).
        strict = self._major >= 7
        texts = {name: _with_shebang(name, script_text(name), strict) for name in script_names()}
        self._texts = texts
        self._shas = {name: hashlib.sha1(t.encode()).hexdigest() for name, t in texts.items()}
        self._scripts = {name: self._client.register_script(t) for name, t in texts.items()}

    @property
    def mode(self) -> str:
        return "functions" if self._functions else "scripts"

    def _head(self, name: str) -> tuple[Any, ...]:
        head = self._heads.get(name)
        if head is None:
            if self._functions:
                head = ("FCALL", f"{self._lib}_{name}", 1, self._tag)
            else:
                head = ("EVALSHA", self._shas[name], 1, self._tag)
            self._heads[name] = head
        return head

    def _fall_back_to_scripts(self) -> None:
        """FCALL (or the reload) was refused by the user's ACL: switch to scripts for good."""
        with self._lock:
            if self._functions:
                self._use_scripts()
                self._heads = {}
                self._functions = False


class ScriptRegistry(ScriptModes):
    """Runs the store's operations on one client, passing the hash tag as KEYS[1]."""

    def __init__(self, client: Any, tag: str) -> None:
        major, functions = on_client(client, select_mode_steps(isinstance(client, redis.Redis)))
        self._setup(client, tag, major, functions)
        self._local = threading.local()
        # Weak: a connection dies with its thread's local storage (short-lived
        # request threads must not pin sockets); close() disconnects the rest.
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    def probe(self) -> None:
        """Run one cheap read-only operation (an empty sorted set read).

        Raises the redis-py error when this Redis user may not run the store's scripts
        (EVALSHA or SCRIPT LOAD refused, or the store's keys out of its ACL key pattern).
        """
        self(*PROBE)

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
        head = self._heads.get(name) or self._head(name)
        conn = getattr(self._local, "conn", None) or self._connection()
        packed = _pack(conn, head + args)
        for attempt in range(3):
            try:
                conn.send_packed_command(packed)
                return conn.read_response()
            except (RedisError, OSError) as exc:
                action = call_failure(exc, head[0] == "FCALL", attempt)
                if action == "load":
                    conn.send_command("SCRIPT", "LOAD", self._texts[name])
                    conn.read_response()
                    continue
                if action == "reload" and on_client(self._client, load_library_steps()):
                    continue
                if action in ("fallback", "reload"):
                    self._fall_back_to_scripts()
                    head = self._head(name)
                    packed = _pack(conn, head + args)
                    continue
                if action in ("drop", "reconnect"):
                    conn.disconnect()
                if action != "reconnect":
                    raise
        raise AssertionError("unreachable")

    def after_fork(self) -> None:
        """In a forked child: forget the parent's connections without touching them (closing
        one would shut the socket the parent still uses); the next call opens its own."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._connections = weakref.WeakSet()

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections)
            self._connections = weakref.WeakSet()
        for conn in connections:
            conn.disconnect()


@dataclass(frozen=True)
class ScriptsCheck:
    """What :func:`probe_scripts` found for one store prefix."""

    #: The store's hash tag, ``{prefix}``: its Redis user needs the keys ``~{tag}*``.
    tag: str
    #: The probe script ran.
    ok: bool
    #: When the Redis user's ACL refused it: the store's message naming what the user
    #: lacks; None when it ran, or failed for another reason (unreachable, busy).
    refusal: str | None = None


def probe_scripts(client: Any, prefix: str) -> ScriptsCheck:
    """Run the store ``prefix``'s cheap read-only probe script with ``client``, as the store would.

    Loads the scripts as a store does (a Redis Function on Redis 7 when the user may
    load one, else EVALSHA) without building a store (no boot reconcile), so a
    deployment check can tell an ACL that refuses the scripts from an unreachable
    Redis.  The client belongs to the caller.

    Raises:
        ValueError: ``prefix`` cannot name a store.
    """
    tag = StoreKeys(prefix).tag
    registry = None
    try:
        registry = ScriptRegistry(client, tag)
        registry.probe()
    except RedisError as exc:
        refusal = None
        if permission_problem(exc) is not None:
            refusal = store_error("the script probe", exc, tag).message
        return ScriptsCheck(tag, ok=False, refusal=refusal)
    finally:
        if registry is not None:
            registry.close()
    return ScriptsCheck(tag, ok=True)
