"""What the sync store and the asyncio store share: settings and the operations as steps.

``StoreCore`` holds a store's configuration (prefix and keys, indexes, id generator,
clock, history TTLs, value limit) and writes each operation once, as a generator of
steps (store/steps.py): ``RedisJobStore`` drives them with blocking calls and
``store.aio.AsyncRedisJobStore`` awaits them.  Nothing here does I/O.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from store import codec, limits
from store.clock import system_clock
from store.errors import (
    InvalidRequestError,
    JobNotCancellableError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRetryableError,
    JobStoreError,
    store_error,
)
from store.events import EventSteps
from store.indexes import normalize_indexes
from store.keys import NUL, StoreKeys
from store.listing import (
    ListPlan,
    list_script_args,
    parse_cursor,
    plan_list_query,
    read_list_reply,
    validate_id_prefix,
    validate_payload_filters,
)
from store.records import (
    ALL_STATES,
    TERMINAL_STATES,
    AttemptRecord,
    EnqueueRequest,
    EnqueueResult,
    JobRecord,
    ListResult,
)
from store.steps import Steps, cmd, pipe, run, wake

logger = logging.getLogger(__name__)

#: The largest number of items one script call handles.
BATCH = 500
#: How many times a store-assigned id may be drawn before the enqueue fails.
ID_DRAWS = 5

IdGenerator = Callable[[EnqueueRequest], str]
HistoryTtl = int | Mapping[str, int] | None


def normalize_history_ttl(value: Any) -> dict[str, int]:
    """``history_ttl`` per terminal state, in ms; refuses shapes that would wipe history."""
    if value is None:
        return {}
    if hasattr(value, "total_seconds"):
        value = int(value.total_seconds() * 1000)
    if isinstance(value, Mapping):
        unknown = set(value) - TERMINAL_STATES
        if unknown:
            raise InvalidRequestError(f"history_ttl has unknown states: {sorted(unknown)}")
        if not value:
            raise InvalidRequestError(
                "history_ttl={} names no state; give a duration in ms or "
                "{'completed': ms, 'failed': ms, 'cancelled': ms}"
            )
        out = {}
        for state, ttl in value.items():
            if ttl is None:
                continue
            out[state] = _positive_ms(ttl, f"history_ttl[{state!r}]")
        return out
    ttl = _positive_ms(value, "history_ttl")
    return dict.fromkeys(("completed", "failed", "cancelled"), ttl)


def _positive_ms(value: Any, what: str) -> int:
    if hasattr(value, "total_seconds"):
        value = int(value.total_seconds() * 1000)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidRequestError(
            f"{what} must be a positive number of milliseconds, got {value!r}"
        )
    return int(value)


def script_failure(script: str, exc: Exception, tag: str) -> JobStoreError:
    """The JobStoreError a failed script call reaches its caller as (cause: ``exc``)."""
    if isinstance(exc, UnicodeDecodeError):
        return JobStoreError(f"{script} failed: Redis returned data that is not UTF-8 ({exc})", exc)
    return store_error(script, exc, tag)  # type: ignore[arg-type]


def owed_work(reply: Any) -> builtins.list[str] | None:
    """The work a script owes (its reply's last item ``["!owed", ...]``, taken off the
    reply), or None."""
    if (
        reply.__class__ is list
        and reply
        and reply[-1].__class__ is list
        and reply[-1][:1] == ["!owed"]
    ):
        owed: builtins.list[str] = reply.pop()[1:]
        return owed
    return None


def check_state_reply(reply: builtins.list[Any], job_id: str, state_error: type[Exception]) -> None:
    """Raise what an admin verb's ``notfound`` / ``state`` reply means."""
    code = reply[0]
    if code == "notfound":
        raise JobNotFoundError(job_id)
    if code == "state":
        raise state_error(job_id, reply[1])


class StoreCore(EventSteps):
    """A store's configuration and its operations as steps (see the module docstring)."""

    keys: StoreKeys
    prefix: str
    store_key: str
    indexes: Mapping[str, bool]
    history_ttl: dict[str, int]
    max_value_bytes: int

    def _configure(
        self,
        client: Any,
        prefix: str,
        indexes: Any,
        id_generator: IdGenerator | None,
        clock: Callable[[], int] | None,
        history_ttl: HistoryTtl,
        store_key: str,
        max_value_bytes: int | None,
    ) -> None:
        """Check and keep the constructor's options (no I/O)."""
        try:
            self.keys = StoreKeys(prefix)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        encoder = getattr(client, "get_encoder", None)
        if encoder is not None and not getattr(encoder(), "decode_responses", True):
            raise InvalidRequestError(
                f"{type(self).__name__} needs a client created with decode_responses=True "
                "(store.connect and store.aio.connect do this)"
            )
        self.client = client
        self.prefix = prefix
        self.store_key = store_key
        self.indexes = normalize_indexes(indexes)
        self.history_ttl = normalize_history_ttl(history_ttl)
        #: The largest payload, metadata, dedupe key, result or error, in UTF-8 bytes
        #: (store/limits.py; None = ``limits.DEFAULT_MAX_VALUE_BYTES``).
        self.max_value_bytes = limits.normalize_max_value_bytes(max_value_bytes)
        self._id_generator = id_generator
        self._clock = clock or system_clock
        self._idx = ("1" if self.indexes["name"] else "0") + ("1" if self.indexes["queue"] else "0")

    def settings(self) -> dict[str, Any]:
        """The constructor options this store was built with (to build its twin)."""
        return {
            "prefix": self.prefix,
            "indexes": dict(self.indexes),
            "id_generator": self._id_generator,
            "clock": self._clock,
            "history_ttl": dict(self.history_ttl) or None,
            "store_key": self.store_key,
            "max_value_bytes": self.max_value_bytes,
        }

    def now(self) -> int:
        return int(self._clock())

    # ------------------------------------------------------------------ owed work

    def _finish_owed_steps(self, owed: builtins.list[str]) -> Steps[None]:
        """Finish work a script could not complete within its own bounded call.

        ``keep``: pruning of a (name, state) group beyond one call's budget;
        ``rows``: flipping the pending rows of a settled flow with many children;
        ``promote``: promoting a queue's due delayed jobs beyond one claim's
        budget (the claim picked nothing and answers ``again``).
        """
        for k in range(0, len(owed), 4):
            kind, a, b, c = owed[k : k + 4]
            if kind == "keep":
                while (yield run("prune_keep", self.now(), a, b, c)):
                    pass
            elif kind == "rows":
                last = b
                while last:
                    last = yield run("flip_flow_rows", self.now(), a, last)
            elif kind == "promote":
                while (yield run("promote_due", self.now(), a, BATCH)):
                    pass

    # ------------------------------------------------------------------ enqueue

    def _enqueue_steps(self, request: EnqueueRequest) -> Steps[EnqueueResult]:
        """Insert one job (explicit-id check, dedupe tree, id resolution, insert, wake)."""
        dedupe = codec.encode_dedupe(request)
        if request.id is not None:
            mode, job_id = "user", request.id
        elif self._id_generator is not None:
            mode, job_id = "generated", ""
        else:
            mode, job_id = "auto", ""
        now = self.now()
        args = codec.encode_wire(request, mode, job_id, now)
        limits.check_wire_request(args, dedupe[0], self.max_value_bytes)
        draws = 0
        while True:
            if mode == "generated" and (job_id or not request.dedupe):
                if draws >= ID_DRAWS:
                    break
                job_id = self._draw_id(request)
                draws += 1
                args[1] = job_id
            reply = yield run("enqueue", now, self._idx, *args, *dedupe)
            code = reply[0]
            if code == "new":
                yield wake(request.queue)
                return EnqueueResult(reply[1], False)
            if code == "dup":
                return EnqueueResult(reply[1], True)
            if code == "replaced":
                yield wake(reply[2])
                return EnqueueResult(reply[1], True)
            if code == "needid":
                # The dedupe tree let the request through: now draw an id.
                job_id = "pending"
                continue
            if code != "collision":
                raise JobStoreError(f"enqueue: unexpected reply {reply!r}")
        raise JobStoreError("enqueue failed: could not generate a unique job id")

    def validate_request(self, request: EnqueueRequest) -> None:
        """Refuse ``request`` now as ``enqueue`` would (InvalidRequestError, JobStoreError,
        ValueTooLargeError), without writing anything."""
        dedupe = codec.encode_dedupe(request)
        wire = codec.encode_wire(request, "user", request.id or "", self.now())
        limits.check_wire_request(wire, dedupe[0], self.max_value_bytes)

    def _draw_id(self, request: EnqueueRequest) -> str:
        assert self._id_generator is not None
        job_id = self._id_generator(request)
        if not isinstance(job_id, str) or not job_id or "\0" in job_id:
            raise JobStoreError(f"the id generator returned an invalid job id: {job_id!r}")
        return job_id

    def _enqueue_many_steps(
        self, requests: Sequence[EnqueueRequest]
    ) -> Steps[builtins.list[EnqueueResult]]:
        """Insert many jobs with single-enqueue semantics per item, positional results.

        Items with a dedupe policy go through ``enqueue`` in order; runs of plain
        items between them are inserted in chunks of 500 per script call.  Not
        one transaction: on a failure the items already inserted stay (their
        queues are woken) and the call raises ``JobStoreError``.
        """
        requests = builtins.list(requests)
        now = self.now()
        # Validate everything first: one bad item refuses the whole batch.
        encoded: builtins.list[builtins.list[str] | None] = []
        for req in requests:
            if isinstance(req, EnqueueRequest) and req.dedupe is not None:
                dedupe = codec.encode_dedupe(req)
                wire = codec.encode_wire(req, "user", "", now)
                limits.check_wire_request(wire, dedupe[0], self.max_value_bytes)
                encoded.append(None)
            else:
                mode = (
                    "user"
                    if req.id is not None
                    else ("generated" if self._id_generator else "auto")
                )
                wire = codec.encode_wire(req, mode, req.id or "", now)
                limits.check_wire_request(wire, "", self.max_value_bytes)
                encoded.append(wire)
        results: builtins.list[EnqueueResult | None] = [None] * len(requests)
        woken: set[str] = set()
        try:
            i = 0
            while i < len(requests):
                if encoded[i] is None:
                    results[i] = yield from self._enqueue_steps(requests[i])
                    i += 1
                    continue
                j = i
                while j < len(requests) and encoded[j] is not None:
                    j += 1
                yield from self._insert_plain_steps(requests, encoded, range(i, j), results, woken)
                i = j
        except Exception:
            # The items inserted before the failure are runnable: wake their queues too.
            for queue in woken:
                yield wake(queue)
            raise
        for queue in woken:
            yield wake(queue)
        return [r for r in results if r is not None]

    def _insert_plain_steps(
        self,
        requests: builtins.list[EnqueueRequest],
        encoded: builtins.list[builtins.list[str] | None],
        positions: range,
        results: builtins.list[EnqueueResult | None],
        woken: set[str],
    ) -> Steps[None]:
        """Insert runs of plain items, BATCH per script call, each call at the store's time
        when it is sent: the jobs of a long call take the times they went in at, and the
        next call's rows sort after the last one's (an append to the chunked sets, not a
        merge into them; docs/data-layout.md)."""
        pending = builtins.list(positions)
        for _ in range(ID_DRAWS):
            if not pending:
                return
            retry: builtins.list[int] = []
            for start in range(0, len(pending), BATCH):
                chunk = pending[start : start + BATCH]
                args: builtins.list[str] = []
                for pos in chunk:
                    item = encoded[pos]
                    assert item is not None
                    if item[0] == "generated":
                        item[1] = self._draw_id(requests[pos])
                    args.extend(item)
                reply = yield run("enqueue_many", self.now(), self._idx, len(chunk), *args)
                if len(reply) != len(chunk):
                    raise JobStoreError(f"enqueue_many: unexpected reply length {len(reply)}")
                # One entry per item: the new id, NUL + the existing id, or '' (collision).
                for pos, job_id in zip(chunk, reply, strict=True):
                    if not job_id:
                        retry.append(pos)
                    elif job_id[0] == "\0":
                        results[pos] = EnqueueResult(job_id[1:], True)
                    else:
                        results[pos] = EnqueueResult(job_id, False)
                        woken.add(requests[pos].queue)
            pending = retry
        if pending:
            raise JobStoreError("enqueue failed: could not generate a unique job id")

    # ------------------------------------------------------------------ reads

    def _get_job_steps(self, job_id: str) -> Steps[JobRecord | None]:
        h = yield cmd("get_job", "hgetall", self.keys.job(job_id))
        return codec.record_from_hash(job_id, h) if h else None

    def _get_jobs_steps(self, job_ids: Sequence[str]) -> Steps[builtins.list[JobRecord | None]]:
        """Several records in one round trip (pipelined, at most 500 per call)."""
        out: builtins.list[JobRecord | None] = []
        ids = builtins.list(job_ids)
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            rows = yield pipe("get_jobs", [("hgetall", (self.keys.job(j),)) for j in chunk])
            out.extend(
                codec.record_from_hash(j, h) if h else None
                for j, h in zip(chunk, rows, strict=True)
            )
        return out

    def _get_attempts_steps(self, job_id: str) -> Steps[builtins.list[AttemptRecord]]:
        rows, h = yield pipe(
            "get_attempts",
            [
                ("lrange", (self.keys.attempts(job_id), 0, -1)),
                ("hgetall", (self.keys.job(job_id),)),
            ],
        )
        attempts = [codec.attempt_from_json(row) for row in rows]
        if h.get("lf") == "1":
            # The last entry is folded into the hash (unfold_attempt in lua/lib/ledger.lua).
            attempts.append(codec.folded_attempt(len(rows) + 1, h))
        return attempts

    def _counts_steps(self, queue: str | None) -> Steps[dict[str, int]]:
        """Jobs per state (all seven states), from O(1) counters; optionally one queue."""
        out = dict.fromkeys(ALL_STATES, 0)
        if queue is not None:
            fields = [f"{queue}|{s}" for s in ALL_STATES]
            values = yield cmd("counts", "hmget", self.keys.counts, fields)
            for state, value in zip(ALL_STATES, values, strict=True):
                out[state] = int(value or 0)
            return out
        counters = yield cmd("counts", "hgetall", self.keys.counts)
        for field, value in counters.items():
            state = field.rsplit("|", 1)[1]
            if state in out:
                out[state] += int(value)
        return out

    def _counts_by_queue_steps(self) -> Steps[dict[str, dict[str, int]]]:
        """Counts for every queue that ever held a job: ``{queue: {state: n}}``."""
        fields = yield cmd("counts", "hgetall", self.keys.counts)
        out: dict[str, dict[str, int]] = {}
        for field, value in fields.items():
            queue, state = field.rsplit("|", 1)
            if state in ALL_STATES:
                out.setdefault(queue, dict.fromkeys(ALL_STATES, 0))[state] = int(value)
        return out

    def _list_steps(
        self,
        queue: str | None,
        name: str | None,
        states: Iterable[str] | None,
        metadata: Mapping[str, str] | None,
        order_by: str,
        order: str,
        cursor: str | None,
        limit: int,
        scan_budget: int,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> Steps[ListResult]:
        plan = plan_list_query(
            self.keys, self.indexes, queue, name, states, metadata, order_by, order
        )
        parse_cursor(cursor)  # a malformed cursor is refused even when nothing can match
        payload = validate_payload_filters(payload)  # refused even when nothing can match
        id_prefix = validate_id_prefix(id_prefix)
        if plan.empty:
            return ListResult([], None)
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
            chunked=plan.chunked,
            id_prefix=id_prefix,
            payload=payload,
        )
        page = read_list_reply((yield run("list", *args)))
        items = [
            codec.record_from_hash(job_id, codec.pairs_to_dict(flat)) for job_id, flat in page.rows
        ]
        return ListResult(items, page.next_cursor, page.truncated, page.scanned)

    def plan_list(
        self,
        queue: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "enqueued_at",
        order: str = "desc",
    ) -> ListPlan:
        """How ``list`` with these filters would be served, without touching Redis.

        The plan names the structure the page would be read from (``route``,
        ``sources``) and the filters left to check per row (``residual``).  Raises as
        ``list`` would: ``InvalidRequestError`` for a bad argument,
        ``ListOrderUnsupportedError`` or ``ListIndexDisabledError`` for a combination
        this store cannot serve without a full scan.
        """
        return plan_list_query(
            self.keys, self.indexes, queue, name, states, metadata, order_by, order
        )

    # ------------------------------------------------------------------ admin verbs

    def _retry_steps(self, job_id: str) -> Steps[None]:
        reply = yield run("retry", self.now(), job_id)
        check_state_reply(reply, job_id, JobNotRetryableError)
        yield wake(reply[1])

    def _cancel_steps(self, job_id: str) -> Steps[None]:
        reply = yield run("cancel", self.now(), job_id)
        check_state_reply(reply, job_id, JobNotCancellableError)

    def _cancel_by_dedupe_steps(self, name: str, key: str) -> Steps[bool]:
        reply = yield run("cancel_by_dedupe", self.now(), name, key)
        return bool(reply[0] == "ok")

    def _promote_steps(self, job_id: str) -> Steps[None]:
        reply = yield run("promote", self.now(), job_id)
        check_state_reply(reply, job_id, JobNotPromotableError)
        yield wake(reply[1])

    def _remove_steps(self, job_id: str) -> Steps[bool]:
        return bool((yield run("remove", job_id, self.now())))

    def _pause_steps(self, queue: str) -> Steps[None]:
        yield cmd("pause", "sadd", self.keys.paused, queue)

    def _resume_steps(self, queue: str) -> Steps[None]:
        if (yield run("resume", queue)):
            yield wake(queue)

    def _record_resolvable_steps(self, queue: str, name: str, wake_queue: bool) -> Steps[None]:
        yield cmd("record task name", "sadd", self.keys.resolvable, f"{queue}{NUL}{name}")
        if wake_queue:
            yield wake(queue)

    def _paused_queues_steps(self) -> Steps[builtins.list[str]]:
        return sorted((yield cmd("paused_queues", "smembers", self.keys.paused)))
