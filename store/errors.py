"""Typed failures and defects of the store.

Typed failures (subclasses of :class:`StoreFailure`) are outcomes a caller is
expected to handle.  Defects (subclasses of :class:`StoreDefect`) mean the
caller or the configuration is wrong; they are never part of an operation's
declared error channel.  Each class carries a stable ``tag`` (the contract's
name) so errors can be classified without relying on class identity.
"""

from __future__ import annotations


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
