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
from store.core import (
    BATCH,
    HistoryTtl,
    IdGenerator,
    StoreCore,
    owed_work,
    script_failure,
)
from store.errors import (
    InvalidRequestError,
    JobNotFoundError,
    LockLostError,
    StoreFailure,
    redis_errors,
    store_error,
)
from store.events import EventOperations, check_log_caps
from store.eviction import warn_once
from store.flow_control import QueueLimitOperations
from store.flows import FlowOperations
from store.indexes import IndexSummary, index_summary, reconcile_indexes
from store.insights import InsightOperations
from store.keys import NUL
from store.layout import check_layout
from store.listing import (
    DEFAULT_SCAN_BUDGET,
)
from store.records import (
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
from store.steps import RUN, WAKE, Step, Steps, T, client_step, drive
from store.wake import BROADCAST, WakeHub

logger = logging.getLogger(__name__)

#: Rows per page of the history and dedupe sweeps.
SWEEP_PAGE = 200


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
    StoreCore,
    ScheduleOperations,
    FlowOperations,
    InsightOperations,
    QueueLimitOperations,
    EventOperations,
):
    """The job store on one Redis (standalone, TLS, unix socket or Cluster).

    Its core operations are written once as steps (store/core.py) and driven here with
    blocking calls; ``store.aio.AsyncRedisJobStore`` awaits the same steps."""

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
        self._configure(
            client, prefix, indexes, id_generator, clock, history_ttl, store_key, max_value_bytes
        )
        #: Caps of each job's log (store/events.py; None = the defaults there): past
        #: either, the oldest lines go.
        self.log_max_lines, self.log_max_bytes = check_log_caps(log_max_lines, log_max_bytes)
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

    def after_fork(self) -> None:
        """Make the store usable in a forked child (the worker's per-job processes): drop
        the parent's connections without closing them.  The client's pool resets itself."""
        self._scripts.after_fork()

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
        except (RedisError, UnicodeDecodeError) as exc:
            raise script_failure(script, exc, self.keys.tag) from exc
        if reply.__class__ is list and reply:
            owed = owed_work(reply)
            if owed is not None:
                self._finish_owed(owed)
        return reply

    def _finish_owed(self, owed: list[str]) -> None:
        """Finish the work a script owes (``StoreCore._finish_owed_steps``)."""
        self._drive(self._finish_owed_steps(owed))

    def _drive(self, steps: Steps[T]) -> T:
        """Run an operation written as steps (store/steps.py) with blocking calls."""
        return drive(steps, self._do)

    def _do(self, step: Step) -> Any:
        if step[0] == RUN:
            return self._run(step[1], *step[2])
        if step[0] == WAKE:
            self._wake.signal(step[1])
            return None
        return client_step(self.client, step)

    def _signal_wake(self, queue: str) -> None:
        self._wake.signal(queue)

    def _command(self, operation: str, command: str, *args: Any, **kwargs: Any) -> Any:
        """One plain redis-py command, with errors mapped to JobStoreError."""
        with redis_errors(operation):
            return getattr(self.client, command)(*args, **kwargs)

    # ------------------------------------------------------------------ enqueue

    def enqueue(self, request: EnqueueRequest) -> EnqueueResult:
        """Insert one job (explicit-id check, dedupe tree, id resolution, insert, wake)."""
        return self._drive(self._enqueue_steps(request))

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueResult]:
        """Insert many jobs with single-enqueue semantics per item, positional results.

        Items with a dedupe policy go through ``enqueue`` in order; runs of plain
        items between them are inserted in chunks of 500 per script call.  Not
        one transaction: on a failure the items already inserted stay (their
        queues are woken) and the call raises ``JobStoreError``.
        """
        return self._drive(self._enqueue_many_steps(requests))

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
        return self._drive(self._get_job_steps(job_id))

    def get_jobs(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """Several records in one round trip (pipelined, at most 500 per call)."""
        return self._drive(self._get_jobs_steps(job_ids))

    def get_attempts(self, job_id: str) -> list[AttemptRecord]:
        return self._drive(self._get_attempts_steps(job_id))

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs per state (all seven states), from O(1) counters; optionally one queue."""
        return self._drive(self._counts_steps(queue))

    def counts_by_queue(self) -> dict[str, dict[str, int]]:
        """Counts for every queue that ever held a job: ``{queue: {state: n}}``."""
        return self._drive(self._counts_by_queue_steps())

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
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> ListResult:
        """One page of jobs, newest first by default, from the narrowest sorted structure.

        ``cursor`` is ``"<order value>:<id>"`` from a previous page with the same
        options; a malformed one raises ``InvalidCursorError``.  Each call
        examines at most ``scan_budget`` rows: when residual filters (those the
        routed structure does not serve) leave the page short at that point, the
        result has ``truncated=True`` and a cursor that continues the scan.

        ``payload`` (``{"order.id": "42"}``: dotted paths of the JSON payload, see
        ``store.listing.validate_payload_filters``) and ``id_prefix`` are residual
        filters too: checked per examined row, within the same budget.
        """
        return self._drive(
            self._list_steps(
                queue,
                name,
                states,
                metadata,
                order_by,
                order,
                cursor,
                limit,
                scan_budget,
                payload,
                id_prefix,
            )
        )

    # ------------------------------------------------------------------ admin verbs

    def retry(self, job_id: str) -> None:
        """Revive a failed job with a fresh budget."""
        self._drive(self._retry_steps(job_id))

    def cancel(self, job_id: str) -> None:
        """Cancel a waiting/delayed job now; flag an active one for its holder."""
        self._drive(self._cancel_steps(job_id))

    def cancel_by_dedupe(self, name: str, key: str) -> bool:
        """Cancel the job a (name, dedupe key) entry points at; False when nothing is pending."""
        return self._drive(self._cancel_by_dedupe_steps(name, key))

    def promote(self, job_id: str) -> None:
        """Make a delayed job runnable now (it keeps its FIFO position)."""
        self._drive(self._promote_steps(job_id))

    def remove(self, job_id: str) -> bool:
        """Delete a job that is neither active nor a parked flow parent."""
        return self._drive(self._remove_steps(job_id))

    def pause(self, queue: str) -> None:
        self._drive(self._pause_steps(queue))

    def resume(self, queue: str) -> None:
        self._drive(self._resume_steps(queue))

    def paused_queues(self) -> builtins.list[str]:
        return self._drive(self._paused_queues_steps())

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
        self._drive(self._record_resolvable_steps(queue, name, wake))

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
