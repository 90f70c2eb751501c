"""``RedisJobStore``: the job lifecycle on Redis, one Lua script per atomic operation.

Every operation reads the injected clock once and passes ``now`` to its script;
every script receives the store's hash tag as KEYS[1] and touches only keys
under it.  Work that can grow with the data is paged from Python in bounded
calls (chunks of at most 500).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from store import codec, limits
from store.clock import system_clock
from store.errors import (
    InvalidRequestError,
    JobNotCancellableError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRetryableError,
    JobStoreError,
    LockLostError,
    StoreFailure,
    redis_errors,
    store_error,
)
from store.events import EventOperations, check_log_caps
from store.eviction import warn_once
from store.flow_control import QueueLimitOperations
from store.flows import FlowOperations
from store.indexes import IndexSummary, index_summary, normalize_indexes, reconcile_indexes
from store.insights import InsightOperations
from store.keys import NUL, StoreKeys
from store.layout import check_layout
from store.listing import (
    DEFAULT_SCAN_BUDGET,
    ListPlan,
    list_script_args,
    parse_cursor,
    plan_list_query,
    read_list_reply,
)
from store.records import (
    ALL_STATES,
    TERMINAL_STATES,
    AckOutcome,
    AttemptRecord,
    Cancelled,
    Claimed,
    ClaimResult,
    Complete,
    Empty,
    EnqueueRequest,
    EnqueueResult,
    ExtendLocksResult,
    Fail,
    FanOut,
    JobRecord,
    ListResult,
    Retry,
    StalledJob,
)
from store.schedules import ScheduleOperations
from store.scripts import ScriptRegistry
from store.wake import BROADCAST, WakeHub

logger = logging.getLogger(__name__)

#: The largest number of items one script call handles.
BATCH = 500
#: Rows per page of the history and dedupe sweeps.
SWEEP_PAGE = 200
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


@dataclass(frozen=True)
class ClaimBatch:
    """What ``ack_and_claim_many`` returns: the claimed (job, token) pairs, an Empty
    when the batch did not fill, and each ack's error (or None).

    The Empty says why: the queue ran dry (``next_run_at``), a queue limit held the rest
    back (``throttled`` "concurrency" or "rate", with ``throttled_until``), every group
    with waiting jobs is held back by the group limits (``throttled`` "group"), or the
    queue has limits, which a batch claims one job at a time (``throttled`` "limited")."""

    jobs: list[tuple[JobRecord, str]]
    empty: Empty | None
    ack_errors: list[StoreFailure | None]


class RedisJobStore(
    ScheduleOperations, FlowOperations, InsightOperations, QueueLimitOperations, EventOperations
):
    """The job store on one Redis (standalone, TLS, unix socket or Cluster)."""

    def __init__(
        self,
        client: Any,
        prefix: str = "mq",
        indexes: Any = True,
        id_generator: IdGenerator | None = None,
        clock: Callable[[], int] | None = None,
        history_ttl: HistoryTtl = None,
        store_key: str = "default",
        max_value_bytes: int | None = None,
        log_max_lines: int | None = None,
        log_max_bytes: int | None = None,
    ) -> None:
        try:
            self.keys = StoreKeys(prefix)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        encoder = getattr(client, "get_encoder", None)
        if encoder is not None and not getattr(encoder(), "decode_responses", True):
            raise InvalidRequestError(
                "RedisJobStore needs a client created with decode_responses=True (store.connect does this)"
            )
        self.client = client
        self.prefix = prefix
        self.store_key = store_key
        self.indexes = normalize_indexes(indexes)
        self.history_ttl = normalize_history_ttl(history_ttl)
        #: The largest payload, metadata, dedupe key, result or error, in UTF-8 bytes
        #: (store/limits.py; None = ``limits.DEFAULT_MAX_VALUE_BYTES``).
        self.max_value_bytes = limits.normalize_max_value_bytes(max_value_bytes)
        #: Caps of each job's log (store/events.py; None = the defaults there): past
        #: either, the oldest lines go.
        self.log_max_lines, self.log_max_bytes = check_log_caps(log_max_lines, log_max_bytes)
        self._id_generator = id_generator
        self._clock = clock or system_clock
        self._idx = ("1" if self.indexes["name"] else "0") + ("1" if self.indexes["queue"] else "0")
        with redis_errors("loading the store's scripts"):
            self._scripts = ScriptRegistry(client, self.keys.tag)
        self._wake = WakeHub(client, self.keys.wake)
        # Refuses a data layout this version does not know (store/layout.py).
        #: The data layout of the store's job hashes at start (store/layout.py).
        self.layout = check_layout(self)
        # Fatal on failure: a store never starts with half-configured indexes.
        reconcile_indexes(self, self.now())
        #: The server's maxmemory-policy as read at start (warned about once per process).
        self.eviction = warn_once(client)

    def __repr__(self) -> str:
        return f"RedisJobStore(prefix={self.prefix!r}, store_key={self.store_key!r})"

    def close(self, *, close_client: bool = False) -> None:
        """Stop the wake subscriber and drop this store's own connections.

        The Redis client (and its pool) belongs to the caller; ``close_client=True``
        closes it too, for a caller that opened a client for this store alone.
        """
        self._wake.close()
        self._scripts.close()
        if close_client:
            self.client.close()

    def now(self) -> int:
        return int(self._clock())

    def check_scripts(self) -> None:
        """Run one cheap read-only script: raises JobStoreError (naming the missing ACL
        permission, if that is why) when this Redis user cannot run the store's scripts."""
        try:
            self._scripts.probe()
        except RedisError as exc:
            raise store_error("running the store's scripts", exc, self.keys.tag) from exc

    def _run(self, script: str, *args: Any) -> Any:
        # The body of redis_errors(), inlined: this is every operation's hot path.
        try:
            reply = self._scripts(script, *args)
        except RedisError as exc:
            raise store_error(script, exc, self.keys.tag) from exc
        except UnicodeDecodeError as exc:
            raise JobStoreError(
                f"{script} failed: Redis returned data that is not UTF-8 ({exc})", exc
            ) from exc
        if (
            reply.__class__ is list
            and reply
            and reply[-1].__class__ is list
            and reply[-1][:1] == ["!owed"]
        ):
            self._finish_owed(reply.pop()[1:])
        return reply

    def _finish_owed(self, owed: list[str]) -> None:
        """Finish work a script could not complete within its own bounded call.

        ``keep``: pruning of a (name, state) group beyond one call's budget;
        ``rows``: flipping the pending rows of a settled flow with many children;
        ``promote``: promoting a queue's due delayed jobs beyond one claim's
        budget (the claim picked nothing and answers ``again``).
        """
        for k in range(0, len(owed), 4):
            kind, a, b, c = owed[k : k + 4]
            if kind == "keep":
                while self._run("prune_keep", self.now(), a, b, c):
                    pass
            elif kind == "rows":
                last = b
                while last:
                    last = self._run("flip_flow_rows", self.now(), a, last)
            elif kind == "promote":
                while self._run("promote_due", self.now(), a, BATCH):
                    pass

    def _signal_wake(self, queue: str) -> None:
        self._wake.signal(queue)

    def _command(self, operation: str, command: str, *args: Any, **kwargs: Any) -> Any:
        """One plain redis-py command, with errors mapped to JobStoreError."""
        with redis_errors(operation):
            return getattr(self.client, command)(*args, **kwargs)

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, request: EnqueueRequest) -> EnqueueResult:
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
            reply = self._run("enqueue", now, self._idx, *args, *dedupe)
            code = reply[0]
            if code == "new":
                self._wake.signal(request.queue)
                return EnqueueResult(reply[1], False)
            if code == "dup":
                return EnqueueResult(reply[1], True)
            if code == "replaced":
                self._wake.signal(reply[2])
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

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueResult]:
        """Insert many jobs with single-enqueue semantics per item, positional results.

        Items with a dedupe policy go through ``enqueue`` in order; runs of plain
        items between them are inserted in chunks of 500 per script call.  Not
        one transaction: on a failure the items already inserted stay (their
        queues are woken) and the call raises ``JobStoreError``.
        """
        requests = list(requests)
        now = self.now()
        # Validate everything first: one bad item refuses the whole batch.
        encoded: list[list[str] | None] = []
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
        results: list[EnqueueResult | None] = [None] * len(requests)
        woken: set[str] = set()
        try:
            i = 0
            while i < len(requests):
                if encoded[i] is None:
                    results[i] = self.enqueue(requests[i])
                    i += 1
                    continue
                j = i
                while j < len(requests) and encoded[j] is not None:
                    j += 1
                self._insert_plain(requests, encoded, range(i, j), results, woken, now)
                i = j
        finally:
            for queue in woken:
                self._wake.signal(queue)
        return [r for r in results if r is not None]

    def _insert_plain(
        self,
        requests: list[EnqueueRequest],
        encoded: list[list[str] | None],
        positions: range,
        results: list[EnqueueResult | None],
        woken: set[str],
        now: int,
    ) -> None:
        pending = list(positions)
        for _ in range(ID_DRAWS):
            if not pending:
                return
            retry: list[int] = []
            for start in range(0, len(pending), BATCH):
                chunk = pending[start : start + BATCH]
                args: list[str] = []
                for pos in chunk:
                    item = encoded[pos]
                    assert item is not None
                    if item[0] == "generated":
                        item[1] = self._draw_id(requests[pos])
                    args.extend(item)
                reply = self._run("enqueue_many", now, self._idx, len(chunk), *args)
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

    # ------------------------------------------------------------------ claim / ack

    def claim(
        self,
        queue: str = "default",
        names: Iterable[str] = (),
        token: str = "",
        lock_duration_ms: int = 30_000,
    ) -> ClaimResult:
        """Take the best waiting job of ``queue`` whose name is in ``names``, under ``token``."""
        names = list(names)
        if not token:
            raise InvalidRequestError("claim needs a lock token")
        self._wake.ensure_subscribed()
        wake_token = self._wake.version
        return self._claim_result(
            self._claim_reply(queue, names, token, lock_duration_ms), wake_token
        )

    def _claim_reply(
        self, queue: str, names: list[str], token: str, lock_duration_ms: int
    ) -> list[Any]:
        """One claim, repeated while the script answers ``again`` (it promoted or
        cleaned a bounded page and picked nothing; each pass makes progress)."""
        while True:
            reply: list[Any] = self._run(
                "claim", *self._claim_argv(self.now(), lock_duration_ms, queue, (), (token,), names)
            )
            if reply[0] != "again":
                return reply

    @staticmethod
    def _claim_argv(
        now: int,
        lock_duration_ms: int,
        queue: str,
        acks: Sequence[tuple[str, str, str, str, int]],
        tokens: Sequence[str],
        names: Sequence[str],
    ) -> list[Any]:
        """The ARGV every claim script reads (``read_claim_args`` in lua/lib/claim_ack.lua).

        now, lock ms, queue, the number of acks, each ack's (id, token, outcome, exit
        JSON, retry delay), the number of tokens, the tokens (one per claim), the names.
        """
        argv: list[Any] = [now, int(lock_duration_ms), queue, len(acks)]
        for ack in acks:
            argv.extend(ack)
        argv.append(len(tokens))
        argv.extend(tokens)
        argv.extend(names)
        return argv

    def _ack_args(self, job_id: str, outcome: AckOutcome, now: int) -> tuple[str, str, int]:
        """The ack script's outcome, exit JSON and retry delay for ``outcome``.

        An exit over ``max_value_bytes`` never fails the ack (the run happened and its
        attempt must count): a result becomes a failed attempt under the job's retry
        policy, an error is cut to fit; either exit says the size and the limit.  A
        retry whose run time would pass the calendar bound is refused.
        """
        if isinstance(outcome, Complete):
            code, exit_json, delay = "complete", codec.encode_exit(outcome.exit), 0
        elif isinstance(outcome, Fail):
            code, exit_json, delay = "fail", codec.encode_exit(outcome.exit), 0
        elif isinstance(outcome, Retry):
            code, exit_json = "retry", codec.encode_exit(outcome.exit)
            delay = max(0, int(outcome.delay_ms or 0))
            codec.check_run_at(now + delay, f"a retry delay of {delay} ms")
        elif isinstance(outcome, Cancelled):
            return ("cancelled", "", 0)
        else:
            raise InvalidRequestError(f"unknown ack outcome: {outcome!r}")
        size = limits.over_limit(exit_json, self.max_value_bytes)
        if not size:
            return (code, exit_json, delay)
        if code != "complete":
            return (code, limits.cut_error_exit(exit_json, size, self.max_value_bytes), delay)
        return self._result_too_large(job_id, size)

    def _result_too_large(self, job_id: str, size: int) -> tuple[str, str, int]:
        """Ack args for a run whose result has ``size`` bytes over the limit: a failed
        attempt, retried when the job has attempts left (after its backoff delay)."""
        # Imported here: the worker imports this module (the retry policy lives with it).
        from store.worker import backoff_delay_ms

        exit_json = limits.result_too_large_exit(size, self.max_value_bytes)
        job = self.get_job(job_id)
        if job is None:
            return ("fail", exit_json, 0)  # the ack answers notfound
        attempt = job.attempts_made + 1
        logger.warning(
            "job %s (%s): result of %d bytes exceeds max_value_bytes %d; attempt %d fails",
            job_id,
            job.name,
            size,
            self.max_value_bytes,
            attempt,
        )
        if attempt >= job.attempts_max:
            return ("fail", exit_json, 0)
        return ("retry", exit_json, backoff_delay_ms(job, attempt))

    def ack(self, job_id: str, token: str, outcome: AckOutcome) -> None:
        """Record the outcome of the run ``token`` holds (a FanOut parks a flow parent)."""
        if isinstance(outcome, FanOut):
            self._fan_out(job_id, token, outcome)
            return
        now = self.now()
        ack_args = self._ack_args(job_id, outcome, now)
        reply = self._run("ack", now, job_id, token, *ack_args)
        self._check_lock_reply(reply, job_id)
        if ack_args[0] == "retry":
            self._wake.signal(reply[1])

    def ack_and_claim(
        self,
        job_id: str,
        token: str,
        outcome: AckOutcome,
        *,
        queue: str,
        names: Iterable[str],
        next_token: str,
        lock_duration_ms: int = 30_000,
    ) -> ClaimResult:
        """``ack`` then ``claim`` in one round trip (a worker's hot path).

        The ack's errors are raised after the claim took effect; the claimed
        job (if any) is then available as the exception's ``claimed`` attribute.
        """
        names = list(names)
        now = self.now()
        ack_args = self._ack_args(job_id, outcome, now)
        self._wake.ensure_subscribed()
        wake_token = self._wake.version
        reply = self._run(
            "ack_claim",
            *self._claim_argv(
                now, lock_duration_ms, queue, ((job_id, token, *ack_args),), (next_token,), names
            ),
        )
        if reply[0] == "ok" and ack_args[0] == "retry":
            self._wake.signal(reply[1])
        claim_reply = reply[2:]
        if claim_reply[0] == "again":
            claim_reply = self._claim_reply(queue, names, next_token, lock_duration_ms)
        claimed = self._claim_result(claim_reply, wake_token)
        try:
            self._check_lock_reply(reply, job_id)
        except (JobNotFoundError, LockLostError) as exc:
            exc.claimed = claimed
            raise
        return claimed

    def ack_and_claim_many(
        self,
        acks: Sequence[tuple[str, str, AckOutcome]],
        *,
        queue: str,
        names: Iterable[str],
        tokens: Sequence[str],
        lock_duration_ms: int = 30_000,
    ) -> ClaimBatch:
        """Ack a batch of held runs and claim up to ``len(tokens)`` jobs, in one round trip.

        Ack failures do not raise: each ack's result is reported positionally
        (None when it landed, else the LockLostError / JobNotFoundError).
        """
        names = list(names)
        self._wake.ensure_subscribed()
        wake_token = self._wake.version
        now = self.now()
        wire_acks: list[tuple[str, str, str, str, int]] = []
        retried: list[bool] = []
        for job_id, token, outcome in acks:
            if isinstance(outcome, FanOut):
                raise InvalidRequestError("ack_and_claim_many takes no FanOut outcomes")
            ack_args = self._ack_args(job_id, outcome, now)
            retried.append(ack_args[0] == "retry")
            wire_acks.append((job_id, token, *ack_args))
        reply = self._run(
            "ack_claim_many",
            *self._claim_argv(now, lock_duration_ms, queue, wire_acks, tokens, names),
        )
        ack_reply, claimed, next_run_at = reply
        # A claim that stopped short (owed promotions, dangling members): claim
        # the rest with no acks, until the batch fills or the queue runs dry.
        while next_run_at == "!again":
            rest = tokens[len(claimed) // 2 :]
            more = self._run(
                "ack_claim_many",
                *self._claim_argv(self.now(), lock_duration_ms, queue, (), rest, names),
            )
            claimed = [*claimed, *more[1]]
            next_run_at = more[2]
        errors: list[StoreFailure | None] = []
        for k, (job_id, _token, _outcome) in enumerate(acks):
            code, ack_queue = ack_reply[2 * k], ack_reply[2 * k + 1]
            if code == "notfound":
                errors.append(JobNotFoundError(job_id))
            elif code == "locklost":
                errors.append(LockLostError(job_id))
            else:
                errors.append(None)
                if retried[k]:
                    self._wake.signal(ack_queue)
        jobs = [
            (
                codec.record_from_hash(claimed[k], codec.pairs_to_dict(claimed[k + 1])),
                tokens[k // 2],
            )
            for k in range(0, len(claimed), 2)
        ]
        empty = None
        if len(jobs) < len(tokens):
            if next_run_at[:1] == "!":
                # A queue limit stopped the batch: '!<reason>:<until ms>'.
                reason, _, until = next_run_at[1:].partition(":")
                empty = Empty(None, wake_token, reason, int(until) if until else None)
            else:
                empty = Empty(int(float(next_run_at)) if next_run_at != "" else None, wake_token)
        return ClaimBatch(jobs, empty, errors)

    @staticmethod
    def _claim_result(reply: list[Any], wake_token: int) -> ClaimResult:
        if reply[0] == "claimed":
            return Claimed(codec.record_from_hash(reply[1], codec.pairs_to_dict(reply[2])))
        if reply[0] == "throttled":
            return Empty(None, wake_token, reply[2], int(reply[1]))
        next_run_at = int(float(reply[1])) if reply[1] != "" else None
        return Empty(next_run_at, wake_token)

    @staticmethod
    def _check_lock_reply(reply: list[Any], job_id: str) -> None:
        code = reply[0]
        if code == "notfound":
            raise JobNotFoundError(job_id)
        if code == "locklost":
            raise LockLostError(job_id)

    def release(self, job_id: str, token: str) -> None:
        """Hand a held job back to waiting without using an attempt (shutdown)."""
        reply = self._run("release", self.now(), job_id, token)
        self._check_lock_reply(reply, job_id)
        self._wake.signal(reply[1])

    def extend_locks(
        self, locks: Iterable[tuple[str, str] | Mapping[str, str]], duration_ms: int
    ) -> ExtendLocksResult:
        """The heartbeat: extend each held lock to now + duration_ms."""
        pairs: list[str] = []
        for lock in locks:
            if isinstance(lock, Mapping):
                pairs.extend((lock["id"], lock["token"]))
            else:
                job_id, token = lock
                pairs.extend((job_id, token))
        lost: list[str] = []
        cancel: list[str] = []
        now = self.now()
        for start in range(0, len(pairs), 2 * BATCH):
            reply = self._run(
                "extend_locks", now, int(duration_ms), *pairs[start : start + 2 * BATCH]
            )
            lost.extend(reply[0])
            cancel.extend(reply[1])
        return ExtendLocksResult(lost, cancel)

    def recover_stalled(self, max_stalled_count: int = 1) -> list[StalledJob]:
        """Requeue (or fail, past the stall limit) every active job whose lock expired."""
        now = self.now()
        out: list[StalledJob] = []
        requeued = 0
        while True:
            reply = self._run("recover_stalled", now, int(max_stalled_count), BATCH)
            examined, requeued_page = int(reply[0]), int(reply[1])
            requeued += requeued_page
            for k in range(2, len(reply), 2):
                out.append(StalledJob(reply[k], reply[k + 1] == "1"))
            if examined < BATCH:
                break
        if requeued:
            self._wake.signal(BROADCAST)
        return out

    def await_wake(
        self, queues: Iterable[str], wake_token: int, timeout_ms: int | None = None
    ) -> bool:
        """Block until new work may be runnable on one of ``queues`` since ``wake_token``.

        Returns True when woken (spurious wake-ups are allowed), False when
        ``timeout_ms`` passed first.
        """
        self._wake.ensure_subscribed()
        timeout_s = None if timeout_ms is None else max(0.0, timeout_ms / 1000)
        return self._wake.wait(queues, int(wake_token), timeout_s)

    # ------------------------------------------------------------------ reads

    def get_job(self, job_id: str) -> JobRecord | None:
        with redis_errors("get_job"):
            h = self.client.hgetall(self.keys.job(job_id))
        return codec.record_from_hash(job_id, h) if h else None

    def get_jobs(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """Several records in one round trip (pipelined, at most 500 per call)."""
        out: list[JobRecord | None] = []
        ids = list(job_ids)
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            with redis_errors("get_jobs"):
                pipe = self.client.pipeline(transaction=False)
                for job_id in chunk:
                    pipe.hgetall(self.keys.job(job_id))
                rows = pipe.execute()
            out.extend(
                codec.record_from_hash(j, h) if h else None
                for j, h in zip(chunk, rows, strict=True)
            )
        return out

    def get_attempts(self, job_id: str) -> list[AttemptRecord]:
        with redis_errors("get_attempts"):
            pipe = self.client.pipeline(transaction=False)
            pipe.lrange(self.keys.attempts(job_id), 0, -1)
            pipe.hgetall(self.keys.job(job_id))
            rows, h = pipe.execute()
        attempts = [codec.attempt_from_json(row) for row in rows]
        if h.get("lf") == "1":
            # The last entry is folded into the hash (unfold_attempt in lua/lib/ledger.lua).
            attempts.append(codec.folded_attempt(len(rows) + 1, h))
        return attempts

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs per state (all seven states), from O(1) counters; optionally one queue."""
        out = dict.fromkeys(ALL_STATES, 0)
        with redis_errors("counts"):
            if queue is not None:
                values = self.client.hmget(self.keys.counts, [f"{queue}|{s}" for s in ALL_STATES])
                for state, value in zip(ALL_STATES, values, strict=True):
                    out[state] = int(value or 0)
                return out
            fields = self.client.hgetall(self.keys.counts)
        for field, value in fields.items():
            state = field.rsplit("|", 1)[1]
            if state in out:
                out[state] += int(value)
        return out

    def counts_by_queue(self) -> dict[str, dict[str, int]]:
        """Counts for every queue that ever held a job: ``{queue: {state: n}}``."""
        with redis_errors("counts"):
            fields = self.client.hgetall(self.keys.counts)
        out: dict[str, dict[str, int]] = {}
        for field, value in fields.items():
            queue, state = field.rsplit("|", 1)
            if state in ALL_STATES:
                out.setdefault(queue, dict.fromkeys(ALL_STATES, 0))[state] = int(value)
        return out

    # ------------------------------------------------------------------ list

    # Annotations below this method name the built-in list as ``builtins.list``.
    def list(
        self,
        queue: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "enqueued_at",
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = DEFAULT_SCAN_BUDGET,
    ) -> ListResult:
        """One page of jobs, newest first by default, from the narrowest sorted structure.

        ``cursor`` is ``"<order value>:<id>"`` from a previous page with the same
        options; a malformed one raises ``InvalidCursorError``.  Each call
        examines at most ``scan_budget`` rows: when residual filters (those the
        routed structure does not serve) leave the page short at that point, the
        result has ``truncated=True`` and a cursor that continues the scan.
        """
        plan = plan_list_query(
            self.keys, self.indexes, queue, name, states, metadata, order_by, order
        )
        parse_cursor(cursor)  # a malformed cursor is refused even when nothing can match
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
        )
        page = read_list_reply(self._run("list", *args))
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

    def retry(self, job_id: str) -> None:
        """Revive a failed job with a fresh budget."""
        reply = self._run("retry", self.now(), job_id)
        self._check_state_reply(reply, job_id, JobNotRetryableError)
        self._wake.signal(reply[1])

    def cancel(self, job_id: str) -> None:
        """Cancel a waiting/delayed job now; flag an active one for its holder."""
        reply = self._run("cancel", self.now(), job_id)
        self._check_state_reply(reply, job_id, JobNotCancellableError)

    def cancel_by_dedupe(self, name: str, key: str) -> bool:
        """Cancel the job a (name, dedupe key) entry points at; False when nothing is pending."""
        reply = self._run("cancel_by_dedupe", self.now(), name, key)
        return reply[0] == "ok"

    def promote(self, job_id: str) -> None:
        """Make a delayed job runnable now (it keeps its FIFO position)."""
        reply = self._run("promote", self.now(), job_id)
        self._check_state_reply(reply, job_id, JobNotPromotableError)
        self._wake.signal(reply[1])

    @staticmethod
    def _check_state_reply(
        reply: builtins.list[Any], job_id: str, state_error: type[Exception]
    ) -> None:
        code = reply[0]
        if code == "notfound":
            raise JobNotFoundError(job_id)
        if code == "state":
            raise state_error(job_id, reply[1])

    def remove(self, job_id: str) -> bool:
        """Delete a job that is neither active nor a parked flow parent."""
        return bool(self._run("remove", job_id, self.now()))

    def pause(self, queue: str) -> None:
        with redis_errors("pause"):
            self.client.sadd(self.keys.paused, queue)

    def resume(self, queue: str) -> None:
        if self._run("resume", queue):
            self._wake.signal(queue)

    def paused_queues(self) -> builtins.list[str]:
        with redis_errors("paused_queues"):
            return sorted(self.client.smembers(self.keys.paused))

    # ------------------------------------------------------------------ indexes

    def index_summary(self) -> builtins.list[IndexSummary]:
        """Per index kind: configuration, ready marker and the size of the index sets of the
        names and queues this store knows, in bounded calls (see ``store.indexes.index_summary``)."""
        return index_summary(self)

    # ------------------------------------------------------------------ name resolvers

    def record_resolvable(self, queue: str, name: str, *, wake: bool = False) -> None:
        """Record that jobs named ``name`` on ``queue`` are run through a name resolver.

        Workers serving the store through a resolver (``Worker(resolver=...)``, e.g. the
        Django Tasks backend's) read these pairs with :meth:`resolvable_names` to learn
        which names to claim.  Idempotent (one SADD).  ``wake=True`` then wakes the
        queue's idle workers, which may have read the names just before this pair landed.
        """
        self._command("record task name", "sadd", self.keys.resolvable, f"{queue}{NUL}{name}")
        if wake:
            self._wake.signal(queue)

    def resolvable_names(self) -> dict[str, set[str]]:
        """Every pair recorded by :meth:`record_resolvable`: queue -> job names.

        Read with SSCAN pages of 500 (a set that grows with the number of task names).
        """
        by_queue: dict[str, set[str]] = {}
        with redis_errors("resolvable names"):
            for member in self.client.sscan_iter(self.keys.resolvable, count=500):
                queue, _, name = member.partition(NUL)
                by_queue.setdefault(queue, set()).add(name)
        return by_queue

    # ------------------------------------------------------------------ maintenance

    def sweep_state(self) -> dict[str, int]:
        """One history sweep: delete terminal rows past ``history_ttl`` or their own keep.age_ms.

        Paged in bounded calls; only rows that are due are read.  Safe to run
        in many processes at once.
        """
        now = self.now()
        scanned = deleted = 0
        for state in ("completed", "failed", "cancelled"):
            ttl = self.history_ttl.get(state)
            if ttl is None:
                continue
            s, d = self._sweep_pages("ttl", now, state, str(now - ttl))
            scanned, deleted = scanned + s, deleted + d
        s, d = self._sweep_pages("age", now, "", "")
        return {"scanned": scanned + s, "deleted": deleted + d}

    def _sweep_pages(self, phase: str, now: int, state: str, cutoff: str) -> tuple[int, int]:
        scanned = deleted = offset = 0
        while True:
            reply = self._run("sweep_history", phase, now, SWEEP_PAGE, offset, state, cutoff)
            page, page_deleted, skipped = (int(x) for x in reply)
            scanned += page
            deleted += page_deleted
            offset += skipped
            if page < SWEEP_PAGE:
                return scanned, deleted

    def sweep_dedupes(self) -> int:
        """Prune dead dedupe entries (ended windows; pending entries of gone/terminal jobs)."""
        now = self.now()
        pruned = 0
        while True:
            scanned, n, _ = self._run("sweep_dedupes", "window", now, SWEEP_PAGE, "")
            pruned += int(n)
            if int(scanned) < SWEEP_PAGE:
                break
        cursor = "-"
        while True:
            scanned, n, last = self._run("sweep_dedupes", "pending", now, SWEEP_PAGE, cursor)
            pruned += int(n)
            if int(scanned) < SWEEP_PAGE or not last:
                break
            cursor = "(" + last
        return pruned
