"""Typed failures and defects of the store.

Typed failures (subclasses of :class:`StoreFailure`) are outcomes a caller is
expected to handle.  Defects (subclasses of :class:`StoreDefect`) mean the
caller or the configuration is wrong; they are never part of an operation's
declared error channel.  Each class carries a stable ``tag`` (the contract's
name) so errors can be classified without relying on class identity.

It also holds the mapping from redis-py's exceptions to the store's
(:func:`redis_errors`, :func:`store_error`, :func:`permission_problem`) and
:data:`UNAVAILABLE_ERRORS`, the exception types of a raw client that callers treat
as "this Redis is unavailable": code outside ``store`` never imports ``redis``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from store.records import ClaimResult


class StoreFailure(Exception):
    """Base of every typed failure an operation may raise."""

    tag = "StoreFailure"


class JobStoreError(StoreFailure):
    """Driver failure: connection trouble, serialisation, id exhaustion."""

    tag = "JobStoreError"

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


def human_size(n: int) -> str:
    """``n`` bytes in words: "812 bytes", "300 KiB", "3.1 MiB" (binary units)."""
    if n < 1024:
        return f"{n} bytes"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            text = f"{n / size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    raise AssertionError("unreachable")


class ValueTooLargeError(JobStoreError):
    """A payload, metadata, dedupe key, result or error over the store's ``max_value_bytes``.

    Raised before anything is written.  ``what`` names the value, ``size`` and ``limit``
    are in UTF-8 bytes.
    """

    tag = "ValueTooLargeError"

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} of {human_size(size)} ({size} bytes) exceeds max_value_bytes "
            f"{human_size(limit)} ({limit} bytes)"
        )
        self.what = what
        self.size = size
        self.limit = limit


class _JobFailure(StoreFailure):
    #: Set (only) on a failed ack of ``RedisJobStore.ack_and_claim``: the claim that
    #: took effect all the same.
    claimed: ClaimResult

    def __init__(self, job_id: str, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.message = message


class LockLostError(_JobFailure):
    """The presented lock token does not own the job (or it is not active)."""

    tag = "LockLostError"

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, f"lock lost for job {job_id!r}")


class JobNotFoundError(_JobFailure):
    tag = "JobNotFoundError"

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, f"job {job_id!r} not found")


class _JobStateFailure(_JobFailure):
    verb = ""

    def __init__(self, job_id: str, state: str) -> None:
        super().__init__(job_id, f"job {job_id!r} cannot be {self.verb}: it is {state}")
        self.state = state


class JobNotRetryableError(_JobStateFailure):
    """``retry`` on a job that is not ``failed``."""

    tag = "JobNotRetryableError"
    verb = "retried (only failed jobs can)"


class JobNotCancellableError(_JobStateFailure):
    """``cancel`` on a job that is already terminal."""

    tag = "JobNotCancellableError"
    verb = "cancelled (it already finished)"


class JobNotPromotableError(_JobStateFailure):
    """``promote`` on a job that is not ``delayed``."""

    tag = "JobNotPromotableError"
    verb = "promoted (only delayed jobs can)"


class StoreDefect(Exception):
    """Base of programming/configuration errors raised by the store."""

    tag = "StoreDefect"


class InvalidRequestError(StoreDefect, ValueError):
    """An argument was refused before anything was written."""

    tag = "InvalidRequestError"


class InvalidCursorError(InvalidRequestError):
    """A list cursor that this store did not issue for these options."""

    tag = "InvalidCursorError"


class ListOrderUnsupportedError(StoreDefect):
    """The (filters, order_by) combination cannot be served without a full scan."""

    tag = "ListOrderUnsupportedError"

    def __init__(self, order_by: str, message: str) -> None:
        super().__init__(message)
        self.order_by = order_by
        self.message = message


class ListIndexDisabledError(StoreDefect):
    """The query routes to a list index that this store's configuration disables."""

    tag = "ListIndexDisabledError"

    def __init__(self, index: str, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


class JobCancelledError(StoreDefect):
    """Raised by the producer's ``await_result`` when the awaited job was cancelled."""

    tag = "JobCancelledError"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} was cancelled")
        self.job_id = job_id


#: The exceptions a redis-py client (as :func:`store.connect` returns it) raises when its
#: Redis is unreachable, refuses a command or answers with an error: a caller holding
#: such a client catches these (with :class:`StoreFailure`) to report the Redis as
#: unavailable.  ``RedisClusterException`` is not a ``RedisError`` in redis-py.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)


#: What says a Redis cannot be reached (:func:`is_unreachable`); RedisClusterException, not a
#: RedisError in redis-py, is no node of a cluster answering.
UNREACHABLE_ERRORS: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    RedisClusterException,
    OSError,
)


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the Redis cannot be reached:
    a refused, dropped or timed-out connection, no cluster node answering, and what
    redis-py files under connection errors (a wrong password, a server still loading) --
    not a server that answered with an error, nor a failure of the store's own (a value
    too large, an ACL refusal)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UNREACHABLE_ERRORS):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_permission_error(exc: BaseException) -> bool:
    """Whether Redis refused a command (or a command inside a script) by the user's ACL."""
    if isinstance(exc, NoPermissionError):
        return True
    # A command a script runs is refused with a plain ERR reply that says why.
    return isinstance(exc, ResponseError) and "The user executing the script can't" in str(exc)


#: The ACL category a refused command belongs to (docs/guarantees.md lists the whole ACL).
_CATEGORY = {
    "evalsha": "@scripting",
    "eval": "@scripting",
    "script|load": "@scripting",
    "fcall": "@scripting",
    "publish": "@pubsub",
    "subscribe": "@pubsub",
    "ping": "@connection",
}
_REFUSED_COMMAND = re.compile(r"permissions to run the '([^']+)' command")


def permission_problem(exc: BaseException, tag: str = "") -> str | None:
    """For an ACL refusal, a sentence naming what the Redis user lacks; None otherwise."""
    if not is_permission_error(exc):
        return None
    text = str(exc)
    keys = f"~{tag}*" if tag else "the store's key pattern"
    match = _REFUSED_COMMAND.search(text)
    if match:
        command = match.group(1).lower()
        category = _CATEGORY.get(command.split("|")[0], "@read or @write")
        return (
            f"the Redis user may not run {command.upper().replace('|', ' ')} (ACL command "
            f"'{command}', category {category}); grant it with ACL SETUSER <user> +{command} "
            "(docs/guarantees.md: Restricted Redis users)"
        )
    if "channel" in text:
        return (
            "the Redis user may not use the store's wake channel (ACL channels); grant it with "
            f"ACL SETUSER <user> &{tag}:wake (docs/guarantees.md: Restricted Redis users)"
        )
    if "key" in text:
        return (
            f"the Redis user may not access the store's keys (ACL keys); grant them with "
            f"ACL SETUSER <user> {keys} (docs/guarantees.md: Restricted Redis users)"
        )
    return (
        "the Redis user may not run a command of the store's scripts (ACL; ACL LOG names it); "
        "the scripts need +@read +@write +publish (docs/guarantees.md: Restricted Redis users)"
    )


def store_error(operation: str, exc: RedisError, tag: str = "") -> JobStoreError:
    """The JobStoreError for a redis-py error; an ACL refusal names what the user lacks."""
    problem = permission_problem(exc, tag)
    if problem is not None:
        return JobStoreError(f"{operation} failed: {problem} (Redis said: {exc})", exc)
    return JobStoreError(f"{operation} failed: {exc}", exc)


@contextlib.contextmanager
def redis_errors(operation: str) -> Iterator[None]:
    """Connection and server errors reach callers as JobStoreError with the cause chained."""
    try:
        yield
    except RedisError as exc:
        raise store_error(operation, exc) from exc
    except UnicodeDecodeError as exc:
        # Data written by a foreign client that is not UTF-8: refuse it clearly.
        raise JobStoreError(
            f"{operation} failed: Redis returned data that is not UTF-8 ({exc})", exc
        ) from exc
