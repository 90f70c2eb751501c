"""Read models for operators: throughput per minute, known queues and job names,
the oldest waiting job of a queue, and the worker processes serving a store.

Every call is bounded: per-minute counters are read by their exact fields,
names come from a small set written at insert, and the oldest waiting job is
found among the heads of the queue's per-name waiting sets.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store import codec
from store.errors import InvalidRequestError, JobStoreError
from store.keys import WAITING_SEQ_WIDTH
from store.listing import (
    DEFAULT_SCAN_BUDGET,
    StatePlan,
    list_script_args,
    parse_cursor,
    plan_state_query,
    read_list_reply,
    validate_id_prefix,
    validate_payload_filters,
)
from store.records import JobRecord, ListResult

if TYPE_CHECKING:
    from store.keys import StoreKeys

MINUTE_MS = 60_000
#: How long per-minute counters are kept.
STATS_RETENTION_MS = 48 * 3_600_000
#: At most this many minute fields are deleted per call when pruning.
STATS_PRUNE_BATCH = 500
THROUGHPUT_STATES = ("completed", "failed", "cancelled")


#: Jobs in flight one presence record lists (their total count is kept as well).
PRESENCE_MAX_IN_FLIGHT = 50
#: Presence records one read examines (HSCAN pages of PRESENCE_PAGE).
PRESENCE_MAX_WORKERS = 1000
PRESENCE_PAGE = 200
#: What an operator may tell a worker (``control_worker``).
WORKER_COMMANDS = ("quiet", "stop")


@dataclass(frozen=True)
class InFlightJob:
    """A job a worker is running (or holds prefetched), as its presence record lists it."""

    id: str
    queue: str
    name: str
    started_at: int


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as it last announced itself to the store."""

    worker_id: str
    host: str
    pid: int
    queues: dict[str, list[str]]
    routes: list[str]
    started_at: int
    last_seen: int
    #: Handler slots per queue.
    concurrency: dict[str, int] = field(default_factory=dict)
    #: Up to PRESENCE_MAX_IN_FLIGHT running jobs; ``in_flight_count`` is the full number.
    in_flight: list[InFlightJob] = field(default_factory=list)
    in_flight_count: int = 0
    #: Outcomes since the worker started (completed, failed, retried, cancelled, ...).
    totals: dict[str, int] = field(default_factory=dict)
    #: When the record stops counting as live (last heartbeat + its validity).
    expires_at: int = 0
    #: "running", "quiet" (claims nothing new, finishes what it holds) or "stopping".
    state: str = "running"
    #: Runs stall recovery, schedules, sweeps and the outbox relay (None: not announced).
    maintenance: bool | None = None

    @property
    def nonzero_totals(self) -> dict[str, int]:
        """The outcomes this worker has counted at least once (empty: nothing done yet)."""
        return {outcome: n for outcome, n in self.totals.items() if n}

    @property
    def maintenance_only(self) -> bool:
        """Serves no queue: only the maintenance loops (or nothing, with maintenance off)."""
        return not self.queues

    @property
    def total_concurrency(self) -> int:
        return sum(self.concurrency.values())


#: Bounds of ``oldest_runnable`` per queue: job names, priority levels per name, jobs per level.
OLDEST_MAX_NAMES = 50
OLDEST_LEVELS = 16
OLDEST_PER_LEVEL = 4


#: Error groups one ``error_groups`` call returns at most.
ERROR_GROUPS_MAX_PAGE = 200
_GROUP_ID = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class ErrorGroup:
    """Failures of one error type and normalised message, aggregated at fail time."""

    id: str
    type: str
    module: str
    #: The first message seen (messages with the same ``pattern`` share a group).
    message: str
    count: int
    first_seen: int
    last_seen: int
    last_job: str
    last_queue: str
    last_name: str
    #: Failed-job ids the group keeps (the newest 10,000), for listing and bulk retry.
    jobs_kept: int = 0
    #: The normalised message the group is keyed by ("" for groups recorded before
    #: messages were normalised: those folded digits only, to "#").
    pattern: str = ""
    #: Failures per queue and per job name, for at most ERROR_GROUP_MAX_PLACES of each;
    #: ``*_overflow`` counts failures in queues (names) beyond those.
    queues: dict[str, int] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)
    queues_overflow: int = 0
    names_overflow: int = 0

    @property
    def queue_counts(self) -> list[tuple[str, int]]:
        """(queue, failures) pairs, most failures first."""
        return sorted(self.queues.items(), key=lambda item: (-item[1], item[0]))

    @property
    def name_counts(self) -> list[tuple[str, int]]:
        """(job name, failures) pairs, most failures first."""
        return sorted(self.names.items(), key=lambda item: (-item[1], item[0]))

    @property
    def tracks_places(self) -> bool:
        """Whether the group counts its queues and names (older groups know only the last)."""
        return bool(self.queues or self.names or self.queues_overflow or self.names_overflow)

    def may_have_failed_in(self, queue: str | None = None, name: str | None = None) -> bool:
        """Whether a failure of this group was in ``queue`` and of job ``name`` (each
        optional).  True when the queue (name) is counted, or when the group has seen more
        places than it counts; groups recorded before places were counted compare with
        ``last_queue`` / ``last_name`` only."""
        if not self.tracks_places:
            return (queue is None or queue == self.last_queue) and (
                name is None or name == self.last_name
            )
        in_queue = queue is None or queue in self.queues or self.queues_overflow > 0
        of_name = name is None or name in self.names or self.names_overflow > 0
        return in_queue and of_name

    @property
    def qualified_type(self) -> str:
        if self.module and self.module not in ("builtins", "__main__"):
            return f"{self.module}.{self.type}"
        return self.type


#: Bytes of a message that are grouped (``ERROR_MESSAGE_MAX`` in ``lua/lib/errors.lua``).
ERROR_MESSAGE_MAX = 300
#: Queues (and job names) a group counts its failures in (``ERROR_GROUPING.MAX_PLACES``).
ERROR_GROUP_MAX_PLACES = 20

# The rules of ``ERROR_GROUPING.normalise`` (lua/lib/errors.lua), as byte regexes: Lua's
# frontier %f[S] is (?<![S])(?=[S]) and %f[^S] is (?<=[S])(?![S]); gsub and re.sub both
# take leftmost, non-overlapping matches, and greedy repeats backtrack in the same order.
_A = rb"A-Za-z0-9"
_H = rb"[0-9a-fA-F]"
_WORD_START = rb"(?<![" + _A + rb"])(?=[" + _A + rb"])"
_WORD_END = rb"(?<=[" + _A + rb"])(?![" + _A + rb"])"
_QUOTED = {
    q: re.compile(rb"([^" + _A + rb"])" + q + rb"([^" + q + rb"]*)" + q) for q in (b"'", b'"')
}
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_UUID = re.compile(_WORD_START + rb"-".join(_H * n for n in (8, 4, 4, 4, 12)) + _WORD_END)
_EMAIL = re.compile(rb"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]+")
_HOST_PORT = re.compile(rb"(?<![A-Za-z0-9_])(?=[A-Za-z0-9_])([A-Za-z0-9_.\-]+):[0-9]+")
_HOST_TOKEN = re.compile(rb"(?<![A-Za-z0-9_])(?=[A-Za-z0-9_])([A-Za-z0-9_.\-]+)")
_TRAILING = re.compile(rb"(.*?)([.\-]*)", re.DOTALL)
_IPV4 = re.compile(rb"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")
_HOSTNAME = re.compile(rb"[A-Za-z0-9][A-Za-z0-9.\-]*\.[A-Za-z]+")
_HEX_PREFIXED = re.compile(_WORD_START + rb"0[xX]" + _H + rb"+" + _WORD_END)
_HEX_RUN = re.compile(_WORD_START + rb"(" + _H + rb"+)" + _WORD_END)
_HEX_LETTER = re.compile(rb"[a-fA-F]")
_NUMBER = re.compile(rb"[0-9]+")


_CUT_CHARACTER = re.compile(rb"[\xc0-\xff]?[\x80-\xbf]*\Z")


def _cut(raw: bytes) -> bytes:
    """The first ERROR_MESSAGE_MAX bytes, without a character the cut split (``ERROR_GROUPING.cut``)."""
    cut = raw[:ERROR_MESSAGE_MAX]
    if len(raw) > ERROR_MESSAGE_MAX and 0x80 <= raw[ERROR_MESSAGE_MAX] <= 0xBF:
        cut = _CUT_CHARACTER.sub(b"", cut, count=1)
    return cut


def _is_host(name: bytes, with_port: bool) -> bool:
    if _IPV4.fullmatch(name):
        return True
    if with_port and name == b"localhost":
        return True
    if not _HOSTNAME.fullmatch(name) or b".." in name:
        return False
    return name.count(b".") >= (1 if with_port else 2)


def _normalise_bytes(raw: bytes) -> bytes:
    text = b" " + raw
    for q in (b"'", b'"'):

        def fold(m: re.Match[bytes], q: bytes = q) -> bytes:
            if _IDENTIFIER.fullmatch(m.group(2)):
                return m.group(0)
            return m.group(1) + q + "…".encode() + q

        text = _QUOTED[q].sub(fold, text)
    text = _UUID.sub(b"<uuid>", text)
    text = _EMAIL.sub(b"<email>", text)
    text = _HOST_PORT.sub(lambda m: b"<host>" if _is_host(m.group(1), True) else m.group(0), text)

    def host_token(m: re.Match[bytes]) -> bytes:
        split = _TRAILING.fullmatch(m.group(1))
        assert split is not None  # (.*?)([.-]*) matches any token
        name, rest = split.group(1), split.group(2)
        return b"<host>" + rest if _is_host(name, False) else m.group(0)

    text = _HOST_TOKEN.sub(host_token, text)
    text = _HEX_PREFIXED.sub(b"<hex>", text)
    text = _HEX_RUN.sub(
        lambda m: (
            b"<hex>" if len(m.group(1)) >= 8 and _HEX_LETTER.search(m.group(1)) else m.group(0)
        ),
        text,
    )
    text = _NUMBER.sub(b"<n>", text)
    return text[1:]


def normalise_error_message(message: str) -> str:
    """The pattern an error message is grouped by (mirrors ``ERROR_GROUPING.normalise``).

    The first ERROR_MESSAGE_MAX bytes, with quoted values, uuids, e-mail addresses,
    hosts, hex ids and numbers replaced by placeholders (see docs/monitoring.md).
    """
    return _normalise_bytes(_cut(message.encode("utf-8"))).decode("utf-8", errors="replace")


def _places(fields: Mapping[str, str], prefix: str) -> dict[str, int]:
    """The ``q:<queue>`` (``n:<name>``) counters of a group hash, by queue (name)."""
    return {
        key[len(prefix) :]: int(value or 0)
        for key, value in fields.items()
        if key.startswith(prefix)
    }


def error_group_id(error_type: str, module: str, message: str) -> str:
    """The group id the fail path gives an error (mirrors ``lua/lib/errors.lua``)."""
    import hashlib

    pattern = _normalise_bytes(_cut(message.encode("utf-8")))
    digest = hashlib.sha1(  # noqa: S324 - a grouping key, not a security measure
        module.encode("utf-8") + b"\0" + error_type.encode("utf-8") + b"\0" + pattern
    )
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class OldestRunnable:
    """The longest-runnable waiting job of a queue (None: nothing waits)."""

    record: JobRecord | None
    #: Waiting jobs read to find it.
    examined: int
    #: False when a bound (names, priority levels) left some candidates unread.
    complete: bool


@dataclass(frozen=True)
class StateListResult(ListResult):
    """A state listing's page: which structure served it, and each row's own cursor."""

    #: ``"<order value>:<member>"`` of every item (the "previous page" links start there).
    item_cursors: tuple[str, ...] = ()
    route: str = ""
    order_field: str = ""
    residual: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockInfo:
    """Who holds an active job's lock and until when (both None when the job is not active)."""

    token: str | None
    expires_at: int | None


@dataclass(frozen=True)
class DedupeOwner:
    """The dedupe registry entry of one (job name, dedupe key)."""

    job_id: str
    #: End of a throttle/debounce window; None for a pending-mode entry.
    expires_at: int | None


class InsightOperations:
    """Operator read models of ``RedisJobStore`` (mixed into the store class)."""

    # Provided by RedisJobStore.
    keys: StoreKeys
    client: Any
    _command: Callable[..., Any]
    _run: Callable[..., Any]
    now: Callable[[], int]
    get_job: Callable[[str], JobRecord | None]

    def throughput(self, minutes: int = 180) -> dict[str, list[tuple[int, int]]]:
        """Jobs finished per minute per terminal state for the last ``minutes`` minutes (oldest first)."""
        minutes = max(1, min(int(minutes), STATS_RETENTION_MS // MINUTE_MS))
        current = self.now() // MINUTE_MS
        fields = [str(m) for m in range(current - minutes + 1, current + 1)]
        out: dict[str, list[tuple[int, int]]] = {}
        for state in THROUGHPUT_STATES:
            values = self._command("throughput", "hmget", self.keys.stats(state), fields)
            out[state] = [
                (int(f) * MINUTE_MS, int(v or 0)) for f, v in zip(fields, values, strict=True)
            ]
        return out

    def prune_stats(self) -> int:
        """Drop per-minute counters older than the retention window (bounded per call)."""
        cutoff = (self.now() - STATS_RETENTION_MS) // MINUTE_MS
        marker = self._command("prune_stats", "get", self.keys.stats_pruned)
        start = int(marker) if marker else cutoff - 3 * 24 * 60
        if start >= cutoff:
            return 0
        end = min(cutoff, start + STATS_PRUNE_BATCH)
        fields = [str(m) for m in range(start, end)]
        deleted = 0
        for state in THROUGHPUT_STATES:
            deleted += int(self._command("prune_stats", "hdel", self.keys.stats(state), *fields))
        self._command("prune_stats", "set", self.keys.stats_pruned, str(end))
        return deleted

    def _queue_names(self) -> list[tuple[str, str]]:
        members = self._command("queue names", "smembers", self.keys.qnames)
        pairs = []
        for member in members:
            queue, _, name = member.partition("\0")
            pairs.append((queue, name))
        return sorted(pairs)

    def queue_name_pairs(self) -> list[tuple[str, str]]:
        """Every (queue, job name) pair that ever held a job, sorted."""
        return self._queue_names()

    def queue_names(self) -> list[str]:
        """Every queue that ever held a job."""
        queues = {q for q, _ in self._queue_names()}
        queues.update(
            f.rsplit("|", 1)[0] for f in self._command("queue names", "hkeys", self.keys.counts)
        )
        return sorted(queues)

    def job_names(self, queue: str | None = None) -> list[str]:
        """Job names seen in this store (optionally in one queue)."""
        return sorted({n for q, n in self._queue_names() if queue is None or q == queue})

    def oldest_runnable(self, queue: str) -> OldestRunnable:
        """The waiting job of ``queue`` runnable longest (smallest run_at), priorities included.

        Bounded: at most OLDEST_MAX_NAMES job names of the queue, OLDEST_LEVELS priority
        levels per name and OLDEST_PER_LEVEL jobs at the head of each level are read
        (``complete`` is False when a limit left candidates unread).
        """
        names = self.job_names(queue)
        complete = len(names) <= OLDEST_MAX_NAMES
        reply = self._run(
            "oldest_runnable", queue, OLDEST_LEVELS, OLDEST_PER_LEVEL, *names[:OLDEST_MAX_NAMES]
        )
        job_id, examined = reply[0], int(reply[2])
        complete = complete and reply[3] == "0"
        record = self.get_job(job_id) if job_id else None
        return OldestRunnable(record, examined, complete)

    def oldest_waiting(self, queue: str) -> JobRecord | None:
        """The waiting job of ``queue`` that has been runnable longest (see ``oldest_runnable``)."""
        return self.oldest_runnable(queue).record

    def plan_list_by_state(
        self,
        states: list[str],
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
    ) -> StatePlan:
        """How ``list_by_state`` with these filters would be served, without reading a row.

        The plan names the sets the page would be read from (``route``, ``sources``), the
        order they keep (``order_field``) and the filters left to check per row
        (``residual``).  Raises as ``list_by_state`` would: ``InvalidRequestError`` for a
        bad argument, ``ListOrderUnsupportedError`` for states kept in different orders
        (or too many sets).  Reads the store's known (queue, name) pairs: one command.
        """
        return plan_state_query(
            self.keys, states, queue, name, metadata, order, self._queue_names()
        )

    def list_by_state(
        self,
        states: list[str],
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = DEFAULT_SCAN_BUDGET,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> StateListResult:
        """One page of jobs in ``states``, read from the sets that hold exactly those states.

        The order is the one the state's structure keeps (see
        ``store.listing.plan_state_query``): finished time for terminal states, run
        time for delayed, claim order for waiting ("asc" = next to be claimed first),
        lock expiry for active.  Rows are checked against the filters as in ``list``
        (a row that changed state since it was read is skipped), so a page is exact.
        """
        plan = plan_state_query(
            self.keys, states, queue, name, metadata, order, self._queue_names()
        )
        parse_cursor(cursor)  # a malformed cursor is refused even when nothing can match
        payload = validate_payload_filters(payload)
        id_prefix = validate_id_prefix(id_prefix)
        if plan.empty:
            return StateListResult(
                [], None, route=plan.route, order_field=plan.order_field, residual=plan.residual
            )
        args = list_script_args(
            order=plan.order,
            limit=limit,
            scan_budget=scan_budget,
            cursor=cursor,
            queue=plan.queue,
            name=plan.name,
            states=plan.states,
            sources=plan.sources,
            metadata=plan.metadata,
            strip=plan.strip,
            id_prefix=id_prefix,
            payload=payload,
        )
        page = read_list_reply(self._run("list", *args))
        items: list[JobRecord] = []
        cursors: list[str] = []
        for job_id, flat in page.rows:
            fields = codec.pairs_to_dict(flat)
            record = codec.record_from_hash(job_id, fields)
            items.append(record)
            cursors.append(_state_cursor(plan.order_field, record, fields))
        return StateListResult(
            items,
            page.next_cursor,
            page.truncated,
            page.scanned,
            item_cursors=tuple(cursors),
            route=plan.route,
            order_field=plan.order_field,
            residual=plan.residual,
        )

    # -------------------------------------------------------- error aggregates

    def error_groups(self, limit: int = 50) -> list[ErrorGroup]:
        """The error groups seen most recently first (at most ERROR_GROUPS_MAX_PAGE)."""
        limit = max(1, min(int(limit), ERROR_GROUPS_MAX_PAGE))
        ids = self._command("error_groups", "zrevrange", self.keys.errors(), 0, limit - 1)
        return self._load_groups(list(ids))

    def due_count(self, queue: str) -> int:
        """Delayed jobs of ``queue`` whose run time has come (not yet promoted): one ZCOUNT."""
        return int(
            self._command("due_count", "zcount", self.keys.delayed(queue), "-inf", self.now())
        )

    def find_error_groups(
        self, text: str, *, messages: bool = True, limit: int = 50
    ) -> list[ErrorGroup]:
        """Error groups whose type (with its module) or, with ``messages``, example message
        contains ``text`` (case-insensitive), most recently seen first.

        Reads the kept groups (at most ERRORS_MAX_GROUPS, 1,000) in pages of 200 (ZREVRANGE,
        then one pipelined HMGET per group), never a job.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequestError("an error search needs some text")
        needle = text.strip().casefold()
        limit = max(1, min(int(limit), ERROR_GROUPS_MAX_PAGE))
        matched: list[str] = []
        start = 0
        while len(matched) < limit:
            ids = list(
                self._command("error_groups", "zrevrange", self.keys.errors(), start, start + 199)
            )
            if not ids:
                break
            start += len(ids)
            pipe = self.client.pipeline(transaction=False)
            for gid in ids:
                pipe.hmget(self.keys.error(gid), "type", "module", "message")
            try:
                rows = pipe.execute()
            except Exception as exc:
                raise JobStoreError(f"find_error_groups failed: {exc}", exc) from exc
            for gid, (etype, module, message) in zip(ids, rows, strict=True):
                haystack = f"{module or ''}.{etype or ''}"
                if messages:
                    haystack += "\0" + (message or "")
                if needle in haystack.casefold():
                    matched.append(gid)
                    if len(matched) >= limit:
                        break
            if len(ids) < 200:
                break
        return self._load_groups(matched)

    def error_group(self, group: str) -> ErrorGroup | None:
        if not isinstance(group, str) or not _GROUP_ID.match(group):
            raise InvalidRequestError(f"not an error group id: {str(group)[:40]!r}")
        found = self._load_groups([group])
        return found[0] if found else None

    def _load_groups(self, ids: list[str]) -> list[ErrorGroup]:
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for gid in ids:
            pipe.hgetall(self.keys.error(gid))
            pipe.zcard(self.keys.error_jobs(gid))
        try:
            replies = pipe.execute()
        except Exception as exc:
            raise JobStoreError(f"error_groups failed: {exc}", exc) from exc
        groups = []
        for k, gid in enumerate(ids):
            fields, kept = replies[2 * k], replies[2 * k + 1]
            if not fields:
                continue
            groups.append(
                ErrorGroup(
                    id=gid,
                    type=fields.get("type", ""),
                    module=fields.get("module", ""),
                    message=fields.get("message", ""),
                    count=int(fields.get("count") or 0),
                    first_seen=int(fields.get("first_seen") or 0),
                    last_seen=int(fields.get("last_seen") or 0),
                    last_job=fields.get("last_job", ""),
                    last_queue=fields.get("last_queue", ""),
                    last_name=fields.get("last_name", ""),
                    jobs_kept=int(kept or 0),
                    pattern=fields.get("pattern", ""),
                    queues=_places(fields, "q:"),
                    names=_places(fields, "n:"),
                    queues_overflow=int(fields.get("queues_overflow") or 0),
                    names_overflow=int(fields.get("names_overflow") or 0),
                )
            )
        return groups

    def list_by_error(
        self,
        group: str,
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = DEFAULT_SCAN_BUDGET,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> StateListResult:
        """Failed jobs of one error group, by the time of that failure (``finished_at``).

        Read from the group's job set: a job retried since (no longer failed) is
        skipped, a removed one healed away.
        """
        if not isinstance(group, str) or not _GROUP_ID.match(group):
            raise InvalidRequestError(f"not an error group id: {str(group)[:40]!r}")
        plan = plan_state_query(self.keys, ["failed"], queue, name, metadata, order, [])
        args = list_script_args(
            order=plan.order,
            limit=limit,
            scan_budget=scan_budget,
            cursor=cursor,
            queue=queue or "",
            name=name or "",
            states="failed",
            sources=[self.keys.error_jobs(group)],
            metadata=plan.metadata,
            id_prefix=id_prefix,
            payload=payload,
        )
        page = read_list_reply(self._run("list", *args))
        items = [
            codec.record_from_hash(job_id, codec.pairs_to_dict(flat)) for job_id, flat in page.rows
        ]
        cursors = [f"{int(r.finished_at or 0)}:{r.id}" for r in items]
        return StateListResult(
            items,
            page.next_cursor,
            page.truncated,
            page.scanned,
            item_cursors=tuple(cursors),
            route=f"error:{group}",
            order_field="finished_at",
            residual=tuple(r for r in ("queue", "name") if (queue, name)[r == "name"]),
        )

    def lock_info(self, job_id: str) -> LockInfo:
        """The lock token and expiry of a job (the hidden lock fields of its row)."""
        token, expires = self._command(
            "lock_info", "hmget", self.keys.job(job_id), ["lock_token", "lock_expires_at"]
        )
        return LockInfo(token or None, int(float(expires)) if expires else None)

    def dedupe_owner(self, name: str, key: str) -> DedupeOwner | None:
        """The job the (name, key) dedupe entry points at now, or None when the key is free."""
        job_id, expires = self._command(
            "dedupe_owner", "hmget", self.keys.dedupe(name, key), ["job_id", "expires_at"]
        )
        if not job_id:
            return None
        return DedupeOwner(job_id, int(float(expires)) if expires else None)

    # -------------------------------------------------------- worker presence

    def register_worker(
        self,
        worker_id: str,
        *,
        queues: Mapping[str, list[str]],
        routes: list[str],
        started_at: int,
        concurrency: Mapping[str, int] | None = None,
        in_flight: list[InFlightJob] | None = None,
        totals: Mapping[str, int] | None = None,
        ttl_ms: int = 60_000,
        state: str = "running",
        maintenance: bool | None = None,
    ) -> None:
        """Announce (or refresh) a worker process; readers drop it ``ttl_ms`` after this call.

        The record is one field of the store's workers hash, bounded in size (at most
        PRESENCE_MAX_IN_FLIGHT in-flight jobs are listed); expired fields are pruned by
        ``live_workers``.
        """
        now = self.now()
        running = list(in_flight or [])
        doc = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": dict(queues),
            "routes": sorted(routes),
            "started_at": started_at,
            "last_seen": now,
            "expires_at": now + int(ttl_ms),
            "concurrency": dict(concurrency or {}),
            "in_flight": [
                [job.id, job.queue, job.name, job.started_at]
                for job in running[:PRESENCE_MAX_IN_FLIGHT]
            ],
            "in_flight_count": len(running),
            "totals": dict(totals or {}),
            "state": state,
        }
        if maintenance is not None:
            doc["maintenance"] = bool(maintenance)
        self._command("register_worker", "hset", self.keys.workers, worker_id, codec.dumps(doc))

    def unregister_worker(self, worker_id: str) -> None:
        self._command("unregister_worker", "hdel", self.keys.workers, worker_id)
        self._command("unregister_worker", "hdel", self.keys.worker_control, worker_id)

    def control_worker(self, worker_id: str, command: str | None) -> None:
        """Ask worker ``worker_id`` to go ``"quiet"`` (claim nothing new, finish what it
        holds) or ``"stop"`` (shut down as on SIGTERM); None withdraws the command (a quiet
        worker resumes claiming).  The worker reads it within a second or two
        (``Worker``'s control loop); the command is dropped when the worker unregisters."""
        if command is None:
            self._command("control_worker", "hdel", self.keys.worker_control, worker_id)
            return
        if command not in WORKER_COMMANDS:
            raise InvalidRequestError(
                f"worker command must be one of {', '.join(WORKER_COMMANDS)}, not {command!r}"
            )
        self._command("control_worker", "hset", self.keys.worker_control, worker_id, command)

    def worker_control(self, worker_id: str) -> str | None:
        """The command waiting for worker ``worker_id`` ("quiet", "stop"), or None."""
        value = self._command("worker_control", "hget", self.keys.worker_control, worker_id)
        return str(value) if value else None

    def worker_controls(self) -> dict[str, str]:
        """Every waiting worker command, by worker id (a few fields: one per worker told)."""
        return {
            str(k): str(v)
            for k, v in (
                self._command("worker_controls", "hgetall", self.keys.worker_control) or {}
            ).items()
        }

    def live_workers(self, max_age_ms: int = 60_000) -> list[WorkerInfo]:
        """Workers seen within ``max_age_ms`` (and before their own expiry); older entries are removed.

        Reads at most PRESENCE_MAX_WORKERS records, HSCAN-paged.
        """
        now = self.now()
        live: list[WorkerInfo] = []
        stale: list[str] = []
        cursor = 0
        read = 0
        while True:
            cursor, chunk = self._command(
                "live_workers", "hscan", self.keys.workers, cursor, count=PRESENCE_PAGE
            )
            for worker_id, text in chunk.items():
                read += 1
                info = _worker_from(worker_id, text)
                if (
                    info is None
                    or now - info.last_seen > max_age_ms
                    or (info.expires_at and info.expires_at < now)
                ):
                    stale.append(worker_id)
                    continue
                live.append(info)
            if int(cursor) == 0 or read >= PRESENCE_MAX_WORKERS:
                break
        for start in range(0, min(len(stale), 500), 500):
            # Workers killed without a goodbye age out here (with any command left for them).
            self._command("live_workers", "hdel", self.keys.workers, *stale[start : start + 500])
            self._command(
                "live_workers", "hdel", self.keys.worker_control, *stale[start : start + 500]
            )
        return sorted(live, key=lambda w: w.worker_id)


def _worker_from(worker_id: str, text: str) -> WorkerInfo | None:
    """A presence record, or None when it cannot be read (such fields are pruned)."""
    try:
        doc = json.loads(text)
        return WorkerInfo(
            worker_id=worker_id,
            host=str(doc.get("host", "")),
            pid=int(doc.get("pid", 0)),
            queues={q: list(n) for q, n in doc.get("queues", {}).items()},
            routes=list(doc.get("routes", [])),
            started_at=int(doc.get("started_at", 0)),
            last_seen=int(doc.get("last_seen", 0)),
            concurrency={q: int(n) for q, n in (doc.get("concurrency") or {}).items()},
            in_flight=[
                InFlightJob(str(i), str(q), str(n), int(t))
                for i, q, n, t in doc.get("in_flight") or []
            ],
            in_flight_count=int(doc.get("in_flight_count") or 0),
            totals={k: int(v) for k, v in (doc.get("totals") or {}).items()},
            expires_at=int(doc.get("expires_at") or 0),
            state=str(doc.get("state") or "running"),
            maintenance=bool(doc["maintenance"]) if "maintenance" in doc else None,
        )
    except (ValueError, TypeError, AttributeError):
        return None


def _state_cursor(order_field: str, record: JobRecord, fields: Mapping[str, str]) -> str:
    """The list cursor naming ``record``'s place in its state structure."""
    if order_field == "position":
        seq = str(fields.get("seq") or "0")
        priority = int(float(fields.get("priority") or 0))
        return f"{-priority}:{seq.zfill(WAITING_SEQ_WIDTH)}{record.id}"
    if order_field == "processed_at":
        return f"{int(record.processed_at or 0)}:{record.id}"
    if order_field == "lock_expires_at":
        return f"{int(float(fields.get('lock_expires_at') or 0))}:{record.id}"
    value = getattr(record, order_field) or 0
    return f"{int(value)}:{record.id}"
