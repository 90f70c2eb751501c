"""Routing of ``list`` queries to sorted structures, and the cursor format.

The store serves a query from the narrowest sorted set whose score *is* the
requested order value (store contract §7.2) and applies the other filters
("residuals") row by row inside the list script:

==============  ==========================================  ======================
order_by        source                                      residual filters
==============  ==========================================  ======================
finished_at     ``terminal:<state>:<name>`` per state with   queue, metadata
                a name, else ``finished:<state>`` per state
run_at          ``delayed:<queue>``                          name, metadata
enqueued_at     ``byname:<name>`` / ``byqueue:<queue>`` /    the rest of queue,
                ``all``                                      states, metadata
==============  ==========================================  ======================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.codec import check_text, validate_metadata
from store.errors import (
    InvalidCursorError,
    InvalidRequestError,
    ListIndexDisabledError,
    ListOrderUnsupportedError,
)
from store.keys import WAITING_SEQ_WIDTH, StoreKeys
from store.records import ALL_STATES, TERMINAL_STATES

#: Rows one list call may examine before it returns a truncated page.
DEFAULT_SCAN_BUDGET = 2000

ORDER_FIELDS = ("enqueued_at", "run_at", "finished_at")
_CURSOR = re.compile(r"^(-?\d{1,17}):(.+)$", re.DOTALL)


@dataclass(frozen=True)
class ListPlan:
    """Where a query is served from and what is left to filter per row."""

    sources: list[str]
    order: str
    route: str
    queue: str = ""
    name: str = ""
    states: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    residual: tuple[str, ...] = ()
    empty: bool = False
    #: The sources are chunked sets (store/chunks.py): the all-jobs set and the indexes.
    chunked: bool = False


def parse_cursor(cursor: str | None) -> tuple[str, str] | None:
    """``"<order value>:<id>"`` -> (value, id); split at the first colon (ids may hold colons)."""
    if cursor is None or cursor == "":
        return None
    if not isinstance(cursor, str):
        raise InvalidCursorError(f"cursor must be a string, got {type(cursor).__name__}")
    check_text(cursor, "cursor")
    match = _CURSOR.match(cursor)
    if not match:
        raise InvalidCursorError(
            f"malformed cursor {cursor[:80]!r}: expected '<order value>:<job id>' as returned by a previous page"
        )
    return match.group(1), match.group(2)


#: Payload predicates one list call checks at most, and their bounds.
PAYLOAD_FILTERS_MAX = 8
PAYLOAD_PATH_MAX = 200
PAYLOAD_PATH_DEPTH = 8
PAYLOAD_VALUE_MAX = 1000
ID_PREFIX_MAX = 512


def validate_payload_filters(payload: Any) -> dict[str, str]:
    """``{path: value}`` payload predicates, checked (``InvalidRequestError`` otherwise).

    A path is dot-separated object keys and 0-based array indexes (``order.lines.0.sku``);
    a row matches when the JSON value there, as text, equals ``value`` (strings as they
    are, integers without a fraction, ``true``/``false``/``null``), or, for an array,
    when one of its items does.
    """
    if payload is None:
        return {}
    if not isinstance(payload, Mapping):
        raise InvalidRequestError(
            f"payload filters must be a mapping of path to value, got {type(payload).__name__}"
        )
    if len(payload) > PAYLOAD_FILTERS_MAX:
        raise InvalidRequestError(
            f"at most {PAYLOAD_FILTERS_MAX} payload filters, got {len(payload)}"
        )
    out: dict[str, str] = {}
    for path, value in payload.items():
        if not isinstance(path, str) or not isinstance(value, str):
            raise InvalidRequestError(
                f"payload filter paths and values must be strings, got {path!r}: {value!r}"
            )
        segments = path.split(".")
        if not path or len(path) > PAYLOAD_PATH_MAX or any(not seg for seg in segments):
            raise InvalidRequestError(
                f"payload path {path[:60]!r} is not a dotted path of keys (1-{PAYLOAD_PATH_MAX}"
                " characters, no empty segment)"
            )
        if len(segments) > PAYLOAD_PATH_DEPTH:
            raise InvalidRequestError(
                f"payload path {path[:60]!r} is deeper than {PAYLOAD_PATH_DEPTH} levels"
            )
        if len(value) > PAYLOAD_VALUE_MAX:
            raise InvalidRequestError(
                f"payload filter value is longer than {PAYLOAD_VALUE_MAX} characters"
            )
        out[check_text(path, "payload path")] = check_text(value, "payload value")
    return out


def validate_id_prefix(id_prefix: Any) -> str:
    if id_prefix is None:
        return ""
    if not isinstance(id_prefix, str) or len(id_prefix) > ID_PREFIX_MAX:
        raise InvalidRequestError(
            f"an id prefix must be a string of at most {ID_PREFIX_MAX} characters"
        )
    return check_text(id_prefix, "id prefix")


def list_script_args(
    *,
    order: str,
    limit: int,
    scan_budget: int,
    cursor: str | None,
    queue: str,
    name: str,
    states: str,
    sources: Sequence[str],
    metadata: Mapping[str, str],
    strip: int = 0,
    chunked: bool = False,
    id_prefix: str | None = None,
    payload: Mapping[str, str] | None = None,
) -> list[object]:
    """ARGV of ``list.lua`` (its header documents them), from a planned query.

    The scan budget cuts residual scans; it never shrinks a page the caller asked for.
    """
    position = parse_cursor(cursor)
    limit = max(1, int(limit))
    args: list[object] = [
        order,
        limit,
        max(int(scan_budget), limit + 1),
        "1" if position else "0",
        position[0] if position else "",
        position[1] if position else "",
        queue,
        name,
        states,
        len(sources),
        *sources,
        len(metadata),
    ]
    for key, value in metadata.items():
        args.extend((key, value))
    args.extend((strip, "1" if chunked else "0"))
    predicates = validate_payload_filters(payload)
    args.extend((validate_id_prefix(id_prefix), len(predicates)))
    for path, value in predicates.items():
        args.extend((path, value))
    return args


@dataclass(frozen=True)
class ListReply:
    """A decoded ``list.lua`` reply: the page's raw rows and where the next page starts."""

    more: bool
    truncated: bool
    scanned: int
    #: (job id, flat HGETALL pairs) per row, in page order.
    rows: list[tuple[str, list[str]]]
    next_cursor: str | None


def read_list_reply(reply: list) -> ListReply:
    """Decode ``list.lua``'s reply (header: more, truncated, scanned, last and resume keys)."""
    more, truncated = reply[0] == "1", reply[1] == "1"
    next_cursor = None
    if truncated and reply[6]:
        next_cursor = f"{int(float(reply[5]))}:{reply[6]}"
    elif more:
        next_cursor = f"{int(float(reply[3]))}:{reply[4]}"
    rows = [(reply[k], reply[k + 1]) for k in range(7, len(reply), 2)]
    return ListReply(more, truncated, int(reply[2]), rows, next_cursor)


def plan_list_query(
    keys: StoreKeys,
    indexes: Mapping[str, bool],
    queue: str | None,
    name: str | None,
    states: Iterable[str] | None,
    metadata: Mapping[str, str] | None,
    order_by: str,
    order: str,
) -> ListPlan:
    """Route a query (raises the contract's defects for unsupported combinations)."""
    order_by = {"enqueuedAt": "enqueued_at", "runAt": "run_at", "finishedAt": "finished_at"}.get(
        order_by, order_by
    )
    if order_by not in ORDER_FIELDS:
        raise InvalidRequestError(
            f"order_by must be one of {', '.join(ORDER_FIELDS)}, got {order_by!r}"
        )
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}")
    state_list: list[str] | None = None
    if states is not None:
        if isinstance(states, str):
            raise InvalidRequestError("states must be a list of states, not a string")
        state_list = list(dict.fromkeys(states))
        unknown = [s for s in state_list if s not in ALL_STATES]
        if unknown:
            raise InvalidRequestError(f"unknown states {unknown}; valid: {', '.join(ALL_STATES)}")
    meta = dict(validate_metadata(metadata or {}))
    for label, value in (("queue", queue), ("name", name)):
        if value is not None and (not isinstance(value, str) or value == ""):
            raise InvalidRequestError(f"{label} filter must be a non-empty string, got {value!r}")
        if value is not None:
            check_text(value, f"{label} filter")

    if order_by == "finished_at":
        if state_list is None or any(s not in TERMINAL_STATES for s in state_list):
            raise ListOrderUnsupportedError(
                "finished_at",
                "order_by='finished_at' needs states made only of completed, failed and cancelled",
            )
        if name is not None:
            sources = [keys.terminal(name, s) for s in state_list]
            route = f"terminal:<state>:{name}"
        else:
            sources = [keys.finished(s) for s in state_list]
            route = "finished:<state>"
        return ListPlan(
            sources,
            order,
            route,
            queue=queue or "",
            metadata=meta,
            residual=_residual(queue=queue, metadata=meta),
            empty=not state_list,
        )
    if order_by == "run_at":
        if queue is None or not state_list or any(s != "delayed" for s in state_list):
            raise ListOrderUnsupportedError(
                "run_at", "order_by='run_at' needs a queue and states=['delayed']"
            )
        return ListPlan(
            [keys.delayed(queue)],
            order,
            f"delayed:{queue}",
            name=name or "",
            metadata=meta,
            residual=_residual(name=name, metadata=meta),
        )
    states_csv = "" if state_list is None else ",".join(state_list)
    empty = state_list == []
    if name is not None:
        if not indexes.get("name", True):
            raise ListIndexDisabledError(
                "name", "listing by name needs the name index, which indexes.name=False disables"
            )
        return ListPlan(
            [keys.byname(name)],
            order,
            f"byname:{name}",
            queue=queue or "",
            states=states_csv,
            metadata=meta,
            residual=_residual(queue=queue, states=state_list, metadata=meta),
            empty=empty,
            chunked=True,
        )
    if queue is not None:
        if not indexes.get("queue", True):
            raise ListIndexDisabledError(
                "queue",
                "listing by queue needs the queue index, which indexes.queue=False disables",
            )
        return ListPlan(
            [keys.byqueue(queue)],
            order,
            f"byqueue:{queue}",
            states=states_csv,
            metadata=meta,
            residual=_residual(states=state_list, metadata=meta),
            empty=empty,
            chunked=True,
        )
    return ListPlan(
        [keys.all],
        order,
        "all",
        states=states_csv,
        metadata=meta,
        residual=_residual(states=state_list, metadata=meta),
        empty=empty,
        chunked=True,
    )


def _residual(**filters: object) -> tuple[str, ...]:
    return tuple(k for k, v in filters.items() if v)


# ---------------------------------------------------------------- exact state listings

#: Sorted sets one state listing may merge (each a head in the list script).
MAX_STATE_SOURCES = 128
#: Length of the sequence prefix of a waiting-set member (zero-padded digits).
WAITING_MEMBER_PREFIX = WAITING_SEQ_WIDTH

#: The order each state's own structure keeps.
STATE_ORDERS = {
    "completed": "finished_at",
    "failed": "finished_at",
    "cancelled": "finished_at",
    "delayed": "run_at",
    "waiting": "position",
    "active": "lock_expires_at",
    "waiting-children": "processed_at",
}


@dataclass(frozen=True)
class StatePlan(ListPlan):
    """A state listing: the state's own sorted sets, so every row read is (nearly) a match."""

    order_field: str = ""
    strip: int = 0


def state_order(states: Iterable[str]) -> str | None:
    """The order the store keeps ``states`` in, when one structure family holds them all."""
    orders = {STATE_ORDERS.get(s) for s in states}
    if len(orders) != 1 or None in orders:
        return None
    return orders.pop()


def plan_state_query(
    keys: StoreKeys,
    states: Iterable[str],
    queue: str | None,
    name: str | None,
    metadata: Mapping[str, str] | None,
    order: str,
    pairs: Iterable[tuple[str, str]],
) -> StatePlan:
    """Route a listing of ``states`` to the structures that hold exactly those states.

    ``pairs`` are the store's known (queue, job name) pairs: they name the per-name
    finished sets of a queue and the waiting sets.  Terminal states are read from
    ``terminal:<state>:<name>`` (the queue's names, or the given name) in finished
    time; delayed from ``delayed:<queue>`` (every queue when none is given) in run
    time; waiting from the ``waiting:<queue>/<name>`` sets in claim order (priority,
    then arrival); active from the active set in lock-expiry order; flow parents in
    waiting-children from ``parked:<queue>`` by the start of their fan-out run.  More than
    MAX_STATE_SOURCES sets raise ``ListOrderUnsupportedError``.
    """
    if isinstance(states, str):
        raise InvalidRequestError("states must be a list of states, not a string")
    state_list = list(dict.fromkeys(states))
    unknown = [s for s in state_list if s not in ALL_STATES]
    if unknown:
        raise InvalidRequestError(f"unknown states {unknown}; valid: {', '.join(ALL_STATES)}")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"order must be 'asc' or 'desc', got {order!r}")
    meta = dict(validate_metadata(metadata or {}))
    for label, value in (("queue", queue), ("name", name)):
        if value is not None and (not isinstance(value, str) or value == ""):
            raise InvalidRequestError(f"{label} filter must be a non-empty string, got {value!r}")
        if value is not None:
            check_text(value, f"{label} filter")
    field_name = state_order(state_list) if state_list else None
    if field_name is None:
        raise ListOrderUnsupportedError(
            "state",
            "a state listing needs states kept in one order: terminal states (finished time), "
            "delayed (run time), waiting (claim order) or active (lock expiry)",
        )
    known = sorted(set(pairs))
    strip = 0
    if field_name == "finished_at":
        if name is not None:
            names = [name]
        elif queue is not None:
            names = sorted({n for q, n in known if q == queue})
        else:
            names = []
        if names:
            sources = [keys.terminal(n, s) for s in state_list for n in names]
            route = f"terminal:<state>:{name}" if name else f"terminal:<state>:<names of {queue}>"
        else:
            sources = [keys.finished(s) for s in state_list]
            route = "finished:<state>"
        residual = _residual(queue=queue, metadata=meta)
    elif field_name == "run_at":
        queues = [queue] if queue is not None else sorted({q for q, _ in known})
        sources = [keys.delayed(q) for q in queues]
        route = f"delayed:{queue}" if queue else "delayed:<every queue>"
        residual = _residual(name=name, metadata=meta)
    elif field_name == "position":
        # Grouped waiting jobs are in their own per-(queue, name) set beside the waiting set.
        chosen = [
            (q, n)
            for q, n in known
            if (queue is None or q == queue) and (name is None or n == name)
        ]
        if name is not None and queue is not None and not chosen:
            chosen = [(queue, name)]
        sources = [key for q, n in chosen for key in (keys.waiting(q, n), keys.group_waiting(q, n))]
        route = "waiting:" + (queue or "<every queue>") + "/" + (name or "<every name>")
        residual = _residual(metadata=meta)
        strip = WAITING_MEMBER_PREFIX
    elif field_name == "processed_at":
        queues = [queue] if queue is not None else sorted({q for q, _ in known})
        sources = [keys.parked(q) for q in queues]
        route = f"parked:{queue}" if queue else "parked:<every queue>"
        residual = _residual(name=name, metadata=meta)
    else:
        sources = [keys.active]
        route = "active"
        residual = _residual(queue=queue, name=name, metadata=meta)
    if len(sources) > MAX_STATE_SOURCES:
        raise ListOrderUnsupportedError(
            "state",
            f"listing these states reads {len(sources)} sorted sets (more than "
            f"{MAX_STATE_SOURCES}): give a queue or a job name",
        )
    return StatePlan(
        sources,
        order,
        route,
        queue=queue or "",
        name=name or "",
        # The sources hold only these states; the row check guards against a race.
        states=",".join(state_list),
        metadata=meta,
        residual=residual,
        empty=not sources,
        order_field=field_name,
        strip=strip,
    )
