"""Encoding requests for the Lua scripts and decoding rows back into records.

Payloads, exits and policies are stored as the JSON text produced here and are
never re-encoded by Redis, so values round-trip exactly (Python's ``json``
writes the shortest repr of floats and arbitrary-size integers).
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Mapping
from typing import Any

from store.clock import system_clock
from store.errors import InvalidRequestError, JobStoreError
from store.records import (
    MAX_RUN_AT_MS,
    MAX_RUN_AT_TEXT,
    MISSING,
    AttemptRecord,
    BackoffPolicy,
    EnqueueRequest,
    FlowState,
    JobRecord,
    KeepPolicy,
    ParentEnvelope,
    TraceContext,
)


def _unserialisable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _json_encoder(ascii_only: bool) -> Any:
    """A compact, NaN-refusing JSON encoder: value -> str.

    Built once (``JSONEncoder.encode`` builds its C encoder on every call) and
    without circular-reference markers, so it keeps no state between calls and
    any thread may use it; a circular value ends in RecursionError instead.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (another interpreter)
        return json.JSONEncoder(
            ensure_ascii=ascii_only, allow_nan=False, check_circular=False, separators=(",", ":")
        ).encode
    escape = json.encoder.encode_basestring_ascii if ascii_only else json.encoder.encode_basestring
    chunks = make(None, _unserialisable, escape, None, ":", ",", False, False, False)
    join = "".join
    return lambda value: join(chunks(value, 0))


_dumps = _json_encoder(ascii_only=False)
_dumps_ascii = _json_encoder(ascii_only=True)
_loads = json.loads


_CONTAINERS = (dict, list, tuple)


def _check_keys(value: Any, what: str) -> None:
    """JSON object keys are strings; Python's encoder would silently stringify others.

    Runs after a successful encode, so ``value`` is known to be finite (not circular).
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if key.__class__ is not str and not isinstance(key, str):
                    raise JobStoreError(
                        f"{what} is not JSON-serialisable: object key {key!r} is not a string"
                    )
                if isinstance(child, _CONTAINERS):
                    stack.append(child)
        elif isinstance(item, _CONTAINERS):
            stack.extend(child for child in item if isinstance(child, _CONTAINERS))


def dumps(value: Any, what: str = "value") -> str:
    """JSON text for ``value``; refuses NaN/Infinity, non-string keys, circular values
    and anything JSON cannot hold."""
    try:
        text = _dumps(value)
    except RecursionError as exc:
        raise JobStoreError(
            f"{what} is not JSON-serialisable: it refers to itself or is nested too deeply", exc
        ) from exc
    except (TypeError, ValueError) as exc:
        raise JobStoreError(f"{what} is not JSON-serialisable: {exc}", exc) from exc
    if isinstance(value, _CONTAINERS):
        _check_keys(value, what)
    if not text.isascii():
        # Lone surrogates cannot be sent as UTF-8; the escaped form round-trips.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _dumps_ascii(value)
    return text


def loads(text: str) -> Any:
    return _loads(text)


def encode_exit(value: Any) -> str:
    """'' for MISSING (no exit), else JSON (``None`` is a real ``null``)."""
    if value is MISSING:
        return ""
    return dumps(value, "exit")


def decode_exit(text: str | None) -> Any:
    return MISSING if text is None or text == "" else _loads(text)


def _int_str(value: Any, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        raise InvalidRequestError(f"{field} must be an integer, got {value!r}")
    return str(value)


def _number_str(value: Any, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequestError(f"{field} must be a finite number, got {value!r}")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def check_text(value: str, field: str) -> str:
    """Refuse strings Redis cannot store as UTF-8 (lone surrogates)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequestError(
                f"{field} is not valid Unicode (it holds a lone surrogate)"
            ) from None
    return value


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or value == "":
        raise InvalidRequestError(f"{field} must be a non-empty string, got {value!r}")
    if "\0" in value:
        raise InvalidRequestError(f"{field} must not contain NUL characters")
    return check_text(value, field)


def latest_delay_ms(now: int | None) -> int:
    """The longest delay from ``now`` (default: the wall clock) that stays within MAX_RUN_AT_MS."""
    return MAX_RUN_AT_MS - (system_clock() if now is None else int(now))


def check_run_at(run_at: int, what: str) -> None:
    """Refuse a run time later than MAX_RUN_AT_MS (9999-12-31T23:59:59.999Z)."""
    if run_at > MAX_RUN_AT_MS:
        raise InvalidRequestError(
            f"{what} puts the run time past {MAX_RUN_AT_TEXT} (the latest the store accepts)"
        )


def check_delay(delay: int, what: str, now: int | None) -> None:
    if delay > 0 and delay > latest_delay_ms(now):
        raise InvalidRequestError(
            f"{what} {delay} puts the run time past {MAX_RUN_AT_TEXT} "
            "(the latest the store accepts; was it given in microseconds?)"
        )


def largest_backoff_ms(policy: BackoffPolicy, attempts_max: int) -> float:
    """The longest delay ``policy`` asks for over the retries of ``attempts_max`` runs.

    Retries follow runs 1 .. attempts_max - 1; an exponential delay is monotonic in
    the run number, so the first and the last retry bound it (``inf`` on overflow).
    """
    if attempts_max < 2:
        return 0.0
    base = float(policy.delay_ms)
    if policy.kind == "fixed" or base == 0:
        return base
    factor = 2.0 if policy.factor is None else float(policy.factor)
    try:
        last = base * factor ** (attempts_max - 2)
    except OverflowError:
        return math.inf
    return max(base, last)


def check_backoff(policy: BackoffPolicy, attempts_max: int, now: int | None) -> None:
    """Refuse a backoff policy that is malformed, negative, or reaches past MAX_RUN_AT_MS."""
    if policy.kind not in ("fixed", "exponential"):
        raise InvalidRequestError(
            f"backoff kind must be 'fixed' or 'exponential', got {policy.kind!r}"
        )
    if int(_int_str(policy.delay_ms, "backoff.delay_ms")) < 0:
        raise InvalidRequestError(f"backoff.delay_ms must not be negative, got {policy.delay_ms!r}")
    factor = policy.factor
    if factor is not None and (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not math.isfinite(factor)
        or factor < 0
    ):
        raise InvalidRequestError(
            f"backoff.factor must be a finite number, not negative, got {factor!r}"
        )
    largest = largest_backoff_ms(policy, attempts_max)
    if largest > 0 and largest > latest_delay_ms(now):
        raise InvalidRequestError(
            f"backoff {policy.to_json()} over {attempts_max} attempts asks for a delay "
            f"that puts a retry past {MAX_RUN_AT_TEXT} (the latest run time the store accepts)"
        )


def validate_metadata(metadata: Any) -> Mapping[str, str]:
    if not isinstance(metadata, Mapping):
        raise InvalidRequestError(
            f"metadata must be a mapping of strings, got {type(metadata).__name__}"
        )
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidRequestError(
                f"metadata keys and values must be strings, got {key!r}: {value!r}"
            )
        check_text(key, "metadata key")
        check_text(value, "metadata value")
    return metadata


def encode_request(
    req: EnqueueRequest, mode: str, job_id: str, now: int | None = None
) -> list[str]:
    """The 14 ARGV strings of one request (see ``read_request`` in lua/lib/rows.lua).

    Everything is validated here, before any script runs, so a refused request
    writes nothing.  ``now`` (default: the wall clock) bounds the delay and the
    backoff: no run may land past MAX_RUN_AT_MS.
    """
    if not isinstance(req, EnqueueRequest):
        raise InvalidRequestError(f"expected an EnqueueRequest, got {type(req).__name__}")
    name, queue = req.name, req.queue
    # The common shapes (plain ASCII names, default numbers) are checked inline;
    # anything else goes through the full validators and their messages.
    if not (name.__class__ is str and name.isascii() and name and "\0" not in name):
        _name(name, "job name")
    if not (queue.__class__ is str and queue.isascii() and queue and "\0" not in queue):
        _name(queue, "queue name")
    if req.id is not None:
        _name(req.id, "job id")
    if req.attempts_max == 1 and req.attempts_max.__class__ is int:
        attempts = "1"
    else:
        attempts = _int_str(req.attempts_max, "attempts_max")
        if int(attempts) < 1:
            raise InvalidRequestError(f"attempts_max must be at least 1, got {req.attempts_max!r}")
    timeout = ""
    if req.timeout_ms is not None:
        timeout = _int_str(req.timeout_ms, "timeout_ms")
        if int(timeout) <= 0:
            raise InvalidRequestError(f"timeout_ms must be positive, got {req.timeout_ms!r}")
    delay_ms = req.delay_ms
    if not delay_ms and delay_ms.__class__ is int or delay_ms is None:
        delay = "0"
    else:
        delay = _int_str(delay_ms, "delay_ms")
        check_delay(int(delay), "delay_ms", now)
    backoff = ""
    if req.backoff is not None:
        check_backoff(req.backoff, int(attempts), now)
        backoff = dumps(req.backoff.to_json(), "backoff")
    keep = ""
    if req.keep is not None:
        for state in ("completed", "failed", "cancelled"):
            rule = req.keep.for_state(state)
            if rule is None:
                continue
            for field, value in (("count", rule.count), ("age_ms", rule.age_ms)):
                if value is not None and (_int_str(value, f"keep.{state}.{field}").startswith("-")):
                    raise InvalidRequestError(f"keep.{state}.{field} must not be negative")
        keep_json = req.keep.to_json()
        keep = dumps(keep_json, "keep") if keep_json else ""
    metadata = req.metadata
    if metadata.__class__ is not dict or metadata:
        metadata = validate_metadata(metadata)
    priority = req.priority
    return [
        mode,
        job_id,
        name,
        queue,
        dumps(req.payload, "payload"),
        dumps(dict(metadata), "metadata") if metadata else "{}",
        "0" if priority == 0 and priority.__class__ is int else _number_str(priority, "priority"),
        attempts,
        backoff,
        keep,
        timeout,
        dumps(req.trace.to_json(), "trace") if req.trace is not None else "",
        dumps(req.parent.to_json(), "parent") if req.parent is not None else "",
        delay,
        "" if req.group is None else check_group(req.group),
    ]


#: The 10 option fields of an encoded request (metadata .. group) all at their defaults.
_DEFAULT_OPTIONS = ["{}", "0", "1", "", "", "", "", "", "0", ""]

#: The longest job group name (bytes of UTF-8); up to 63 keeps the job hash compact.
MAX_GROUP_BYTES = 255


def check_group(group: Any) -> str:
    """A job group name, refused when empty, not a string, with NUL or too long."""
    _name(group, "job group")
    if len(group) > MAX_GROUP_BYTES // 4 and len(group.encode("utf-8")) > MAX_GROUP_BYTES:
        raise InvalidRequestError(f"job group must be at most {MAX_GROUP_BYTES} bytes (UTF-8)")
    return str(group)


def wire_request(fields: list[str]) -> list[str]:
    """The 6 ARGV strings of an encoded request (``read_request`` in lua/lib/rows.lua).

    mode, id, name, queue, payload, then the 10 option fields as one string:
    '' when all are at their defaults, else joined by NUL (which none of them
    can contain: JSON escapes it and numbers have none).
    """
    options = fields[5:]
    return [*fields[:5], "" if options == _DEFAULT_OPTIONS else "\0".join(options)]


def encode_wire(req: EnqueueRequest, mode: str, job_id: str, now: int | None = None) -> list[str]:
    """``encode_request`` in the form the scripts read."""
    return wire_request(encode_request(req, mode, job_id, now))


def encode_dedupe(req: EnqueueRequest) -> list[str]:
    """ARGV for the dedupe policy: key, ttl, extend, replace ('' key = none)."""
    d = req.dedupe
    if d is None:
        return ["", "", "0", "0"]
    if not isinstance(d.key, str) or d.key == "":
        raise InvalidRequestError("dedupe key must be a non-empty string")
    if "\0" in d.key:
        raise InvalidRequestError("dedupe key must not contain NUL characters")
    check_text(d.key, "dedupe key")
    ttl = ""
    if d.ttl_ms is not None:
        ttl = _int_str(d.ttl_ms, "dedupe.ttl_ms")
        if int(ttl) <= 0:
            raise InvalidRequestError(f"dedupe.ttl_ms must be positive, got {d.ttl_ms!r}")
    if d.extend and not ttl:
        raise InvalidRequestError("dedupe extend=True needs ttl_ms (it extends a throttle window)")
    return [d.key, ttl, "1" if d.extend else "0", "1" if d.replace else "0"]


def pairs_to_dict(flat: list[str]) -> dict[str, str]:
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def _int_or_none(text: str | None) -> int | None:
    return None if text is None or text == "" else int(text)


def _number(text: str) -> float:
    value = float(text)
    return (
        int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value
    )


#: Job fields whose value may be longer than 63 bytes, each with its piece code: such a value
#: is stored in pieces of at most 63 bytes, the field holding the first, ``<code>2``,
#: ``<code>3``, ... the rest (``put_long`` in lua/lib/rows.lua), so the job hash stays a
#: listpack under the default ``hash-max-listpack-value`` (64).
PIECE_CODES = {
    "payload": "P",
    "metadata": "M",
    "exit": "E",
    "failed_reason": "R",
    "backoff": "B",
    "keep": "K",
    "trace": "T",
    "parent": "A",
    "dedupe_key": "D",
    "progress": "G",
}
LONG_FIELDS = tuple(PIECE_CODES)
_SECOND_PIECES = tuple((field, code, code + "2") for field, code in PIECE_CODES.items())


def join_pieces(h: Mapping[str, str]) -> Mapping[str, str]:
    """The job hash ``h`` with every long field joined back from its pieces (a copy when any
    field is in pieces; ``h`` itself otherwise)."""
    out: dict[str, str] | None = None
    for field, code, second in _SECOND_PIECES:
        if second not in h:
            continue
        if out is None:
            out = dict(h)
        parts = [out.get(field, "")]
        k = 2
        while (piece := out.pop(f"{code}{k}", None)) is not None:
            parts.append(piece)
            k += 1
        out[field] = "".join(parts)
    return h if out is None else out


def record_from_hash(job_id: str, h: Mapping[str, str]) -> JobRecord:
    """Build a JobRecord from a job hash (absent fields mean absent values).

    Never raises: a hash damaged behind the store's back (fields deleted or
    overwritten by hand) decodes field by field, each unreadable field at its
    default (see ``_tolerant_record``).
    """
    h = join_pieces(h)
    try:
        return _record(job_id, h)
    except (KeyError, ValueError, TypeError, AttributeError):
        return _tolerant_record(job_id, h)


def _record(job_id: str, h: Mapping[str, str]) -> JobRecord:
    flow = None
    if h.get("flow_pending"):
        flow = FlowState(
            fail_fast=h.get("flow_fail_fast") == "1",
            pending=int(h["flow_pending"]),
            completed=int(h.get("flow_completed") or 0),
            failed=int(h.get("flow_failed") or 0),
            cancelled=int(h.get("flow_cancelled") or 0),
        )
    backoff = h.get("backoff")
    keep = h.get("keep")
    trace = h.get("trace")
    parent = h.get("parent")
    metadata = h.get("metadata")
    return JobRecord(
        id=job_id,
        name=h["name"],
        queue=h["queue"],
        payload=_loads(h["payload"]) if "payload" in h else None,
        metadata=_loads(metadata) if metadata else {},
        state=h.get("state") or "waiting",
        priority=_number(h.get("priority") or "0"),
        attempts_max=int(h.get("attempts_max") or 1),
        attempts_made=int(h.get("am") or 0),
        stalled_count=int(h.get("stalled_count") or 0),
        backoff=BackoffPolicy.coerce(_loads(backoff)) if backoff else None,
        keep=KeepPolicy.coerce(_loads(keep)) if keep else None,
        timeout_ms=_int_or_none(h.get("timeout_ms")),
        cancel_requested=h.get("cancel_requested") == "1",
        dedupe_key=h.get("dedupe_key") or None,
        trace=TraceContext.coerce(_loads(trace)) if trace else None,
        parent=ParentEnvelope.coerce(_loads(parent)) if parent else None,
        flow=flow,
        run_at=int(h.get("run_at") or h.get("enqueued_at") or 0),
        enqueued_at=int(h.get("enqueued_at") or 0),
        processed_at=_int_or_none(h.get("pa")),
        finished_at=_int_or_none(h.get("fa")),
        exit=decode_exit(h.get("exit")),
        failed_reason=h.get("failed_reason") or None,
        group=h.get("group") or None,
        progress=_loads(h["progress"]) if "progress" in h else None,
    )


_DECODE_ERRORS = (KeyError, ValueError, TypeError, AttributeError)


def tolerant(convert: Any, value: Any, default: Any) -> Any:
    """``convert(value)``, or ``default`` when the value is absent, empty or unreadable."""
    if value is None or value == "":
        return default
    try:
        return convert(value)
    except _DECODE_ERRORS:
        return default


def _tolerant_record(job_id: str, h: Mapping[str, str]) -> JobRecord:
    """The slow path of ``record_from_hash``: every field on its own, defaults for the rest."""
    flow = None
    pending = tolerant(int, h.get("flow_pending"), None)
    if pending is not None:
        flow = FlowState(
            fail_fast=h.get("flow_fail_fast") == "1",
            pending=pending,
            completed=tolerant(int, h.get("flow_completed"), 0),
            failed=tolerant(int, h.get("flow_failed"), 0),
            cancelled=tolerant(int, h.get("flow_cancelled"), 0),
        )
    metadata = tolerant(_loads, h.get("metadata"), {})
    if not isinstance(metadata, dict):
        metadata = {}
    state = h.get("state") or "waiting"
    return JobRecord(
        id=job_id,
        name=str(h.get("name") or ""),
        queue=str(h.get("queue") or ""),
        payload=tolerant(_loads, h.get("payload"), None),
        metadata=metadata,
        state=str(state),
        priority=tolerant(_number, h.get("priority"), 0),
        attempts_max=tolerant(int, h.get("attempts_max"), 1),
        attempts_made=tolerant(int, h.get("am"), 0),
        stalled_count=tolerant(int, h.get("stalled_count"), 0),
        backoff=tolerant(lambda t: BackoffPolicy.coerce(_loads(t)), h.get("backoff"), None),
        keep=tolerant(lambda t: KeepPolicy.coerce(_loads(t)), h.get("keep"), None),
        timeout_ms=tolerant(int, h.get("timeout_ms"), None),
        cancel_requested=h.get("cancel_requested") == "1",
        dedupe_key=h.get("dedupe_key") or None,
        trace=tolerant(lambda t: TraceContext.coerce(_loads(t)), h.get("trace"), None),
        parent=tolerant(lambda t: ParentEnvelope.coerce(_loads(t)), h.get("parent"), None),
        flow=flow,
        run_at=tolerant(int, h.get("run_at") or h.get("enqueued_at"), 0),
        enqueued_at=tolerant(int, h.get("enqueued_at"), 0),
        processed_at=tolerant(int, h.get("pa"), None),
        finished_at=tolerant(int, h.get("fa"), None),
        exit=tolerant(decode_exit, h.get("exit"), MISSING),
        failed_reason=h.get("failed_reason") or None,
        group=h.get("group") or None,
        progress=tolerant(_loads, h.get("progress"), None),
    )


def attempt_from_json(text: str) -> AttemptRecord:
    try:
        return _attempt(text)
    except (*_DECODE_ERRORS, RecursionError):
        # A ledger entry damaged by hand: shown as what can be read of it.
        return AttemptRecord(attempt=0, started_at=None, finished_at=0, outcome="unknown")


def _attempt(text: str) -> AttemptRecord:
    doc = _loads(text)
    return AttemptRecord(
        attempt=int(doc["attempt"]),
        started_at=doc.get("started_at"),
        finished_at=int(doc["finished_at"]),
        outcome=doc["outcome"],
        exit=doc.get("exit", MISSING),
    )


def folded_attempt(attempt: int, h: Mapping[str, str]) -> AttemptRecord:
    """The ledger entry a terminal job hash holds folded in (``lf`` = 1): its last run."""
    h = join_pieces(h)
    return AttemptRecord(
        attempt=attempt,
        started_at=tolerant(int, h.get("pa"), None),
        finished_at=tolerant(int, h.get("fa"), 0),
        outcome=str(h.get("state") or "unknown"),
        exit=tolerant(decode_exit, h.get("exit"), MISSING),
    )
