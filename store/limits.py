"""The value size limit of a store: ``max_value_bytes``.

Payloads, metadata, dedupe keys, results and errors are each stored as one
value (JSON text, or the raw key), measured in UTF-8 bytes.  A value over the
store's limit is refused with :class:`~store.errors.ValueTooLargeError` before
any script runs, so nothing is written.  A result or error over the limit is
not refused at ack (the run happened; its attempt must count): the store acks
a failure whose exit says why (see ``RedisJobStore._ack_args``).
"""

from __future__ import annotations

from typing import Any

from store import codec
from store.errors import InvalidRequestError, ValueTooLargeError

#: The default limit: 4 MiB.  Redis itself takes values up to 512 MB, but a script
#: writes a value and every reader moves it whole while Redis serves nobody else
#: (a 20 MB payload held the server for about half a second).
DEFAULT_MAX_VALUE_BYTES = 4 * 1024 * 1024
#: The smallest limit a store accepts: room for the exit that reports a value over it.
MIN_MAX_VALUE_BYTES = 1024
#: The largest: Redis's own limit of one string.
MAX_MAX_VALUE_BYTES = 512 * 1024 * 1024

#: What an error exit over the limit keeps of the original: the start of its message, and the
#: start and end of its traceback (outer frames, and the frames nearest the failure).
KEPT_MESSAGE_CHARS = 1_000
KEPT_TRACEBACK_CHARS = 8_000


def normalize_max_value_bytes(value: Any) -> int:
    """The ``max_value_bytes`` setting as an int, refused outside its range."""
    if value is None:
        return DEFAULT_MAX_VALUE_BYTES
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"max_value_bytes must be an integer, got {value!r}")
    if not MIN_MAX_VALUE_BYTES <= value <= MAX_MAX_VALUE_BYTES:
        raise InvalidRequestError(
            f"max_value_bytes must be between {MIN_MAX_VALUE_BYTES} and "
            f"{MAX_MAX_VALUE_BYTES} (Redis's own limit), got {value}"
        )
    return value


def text_size(text: str) -> int:
    """The size of ``text`` in UTF-8 bytes (lone surrogates, which the encoder escapes, as 3)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def over_limit(text: str, limit: int) -> int:
    """The UTF-8 size of ``text`` when it exceeds ``limit``, else 0 (cheap for short texts)."""
    # A character takes at most 4 bytes: most values are decided without encoding.
    if len(text) * 4 <= limit:
        return 0
    size = text_size(text)
    return size if size > limit else 0


def check_value(what: str, text: str, limit: int) -> None:
    """Raise ValueTooLargeError when ``text`` (``what``: payload, metadata...) exceeds ``limit``."""
    size = over_limit(text, limit)
    if size:
        raise ValueTooLargeError(what, size, limit)


def check_wire_request(wire: list[str], dedupe_key: str, limit: int) -> None:
    """Check the values of one encoded request (``codec.encode_wire``) and its dedupe key."""
    check_value("payload", wire[4], limit)
    options = wire[5]
    if options:
        # The 9 option fields joined by NUL; metadata comes first (codec.wire_request).
        check_value("metadata", options.partition("\0")[0], limit)
    if dedupe_key:
        check_value("dedupe key", dedupe_key, limit)


def _too_large_exit(message: str) -> dict[str, Any]:
    return {
        "error": {
            "type": ValueTooLargeError.__name__,
            "module": ValueTooLargeError.__module__,
            "message": message,
            "kind": "error",
        }
    }


def result_too_large_exit(size: int, limit: int) -> str:
    """The exit (JSON) acked in place of a result of ``size`` bytes over ``limit``."""
    return codec.dumps(_too_large_exit(ValueTooLargeError("result", size, limit).message))


def cut_error_exit(exit_json: str, size: int, limit: int) -> str:
    """An exit of ``size`` bytes over ``limit``, cut to fit: an error exit keeps its type,
    module and kind, the start of its message and the end of its traceback, and says it was
    cut; any other exit (or one still too large) is replaced by a ValueTooLargeError exit."""
    reason = ValueTooLargeError("error", size, limit).message
    try:
        doc = codec.loads(exit_json)
    except ValueError:
        doc = None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        kept: dict[str, Any] = {
            key: error[key]
            for key in ("type", "module", "kind", "worker")
            if isinstance(error.get(key), str) and len(error[key]) <= 200
        }
        message = error.get("message")
        message = message if isinstance(message, str) else ""
        if len(message) > KEPT_MESSAGE_CHARS:
            message = message[:KEPT_MESSAGE_CHARS] + "…"
        kept["message"] = f"{message} [cut: {reason}]" if message else f"[cut: {reason}]"
        traceback = error.get("traceback")
        if isinstance(traceback, str) and traceback:
            if len(traceback) > KEPT_TRACEBACK_CHARS:
                half = KEPT_TRACEBACK_CHARS // 2
                traceback = traceback[:half] + "…" + traceback[-half:]
            kept["traceback"] = traceback
        kept["cut"] = reason
        text = codec.dumps({"error": kept})
        if not over_limit(text, limit):
            return text
    return codec.dumps(_too_large_exit(reason))
