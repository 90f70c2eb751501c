"""``manage.py seed_demo``: fill a store with realistic demo data for the dashboard.

Everything goes through real store operations, as producers and workers would do
them: jobs are enqueued, claimed and acked (completed, failed with a real
traceback, retried with backoff), cancelled, delayed, deduplicated; one job stalls
and is recovered; a few are left running; two schedules are registered; and a flow
fans out to children in a second store, some of whose reports are relayed and some
left in the outbox.

The history is spread over the last few hours: the command drives the store with a
clock that starts ``--hours`` ago and moves forward minute by minute, so timestamps,
the attempt ledgers and the per-minute throughput counters look like a living
system.  Running it again is safe: a store that already holds the demo flow only
gets its schedules refreshed (``--force`` adds another batch of jobs).
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import services
from store import RedisJobStore
from store.errors import StoreFailure
from store.flow_runtime import child_job_id, relay_outbox
from store.jobs import encode_failure
from store.records import (
    Claimed,
    Complete,
    DedupePolicy,
    EnqueueRequest,
    Fail,
    FanOut,
    FlowChildSpec,
    FlowState,
    ParentEnvelope,
    Retry,
    ScheduleRecord,
)
from store.registry import StoreRegistry
from store.schedules import next_cron

if TYPE_CHECKING:
    from store import RedisJobStore
    from store.protocol import JobStore

#: The flow parent's id: its presence marks a store as seeded.
FLOW_PARENT_ID = "demo/monthly-report"
FLOW_NAME = "MonthlyReport"
REGIONS = (
    "eu",
    "us",
    "apac",
    "latam",
    "mena",
    "nordics",
    "uk",
    "dach",
    "benelux",
    "iberia",
    "anz",
    "japan",
)
COUNTRIES = ("de", "fr", "it")
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
#: The longest seed_demo waits for live workers to confirm they went quiet (seconds).
QUIET_WAIT_S = 5.0


class CardDeclinedError(Exception):
    """A payment provider refused a charge."""


class SmtpTimeoutError(TimeoutError):
    """The mail relay did not answer in time."""


class UpstreamUnavailableError(ConnectionError):
    """The inventory service answered 503."""


# Job kinds: (name, queue, share of jobs, failure rate, attempts, backoff, payload maker).
def _email_payload(rng: random.Random, n: int) -> dict[str, Any]:
    user = rng.randint(1000, 99999)
    return {
        "user_id": user,
        "to": f"user{user}@example.com",
        "template": rng.choice(["welcome", "reset", "invoice"]),
    }


def _charge_payload(rng: random.Random, n: int) -> dict[str, Any]:
    return {
        "invoice_id": f"INV-{2026_0000 + n}",
        "amount_cents": rng.choice([499, 1299, 4900, 19900, 125000]),
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "card": {
            "brand": rng.choice(["visa", "mastercard", "amex"]),
            "last4": f"{rng.randint(0, 9999):04d}",
        },
    }


def _report_payload(rng: random.Random, n: int) -> dict[str, Any]:
    return {
        "report": rng.choice(["sales", "churn", "usage"]),
        "period": "2026-11",
        "format": rng.choice(["pdf", "csv"]),
    }


def _sync_payload(rng: random.Random, n: int) -> dict[str, Any]:
    return {
        "warehouse": rng.choice(["BER-1", "AMS-2", "NYC-1"]),
        "skus": [f"SKU-{rng.randint(100, 999)}" for _ in range(3)],
    }


def _cleanup_payload(rng: random.Random, n: int) -> dict[str, Any]:
    return {"older_than_hours": 24, "path": "/var/tmp/uploads"}


KINDS: list[dict[str, Any]] = [
    {
        "name": "SendWelcomeEmail",
        "queue": "emails",
        "share": 0.34,
        "doomed": 0.02,
        "fail": 0.06,
        "attempts": 4,
        "backoff": {"kind": "exponential", "delay_ms": 30_000},
        "payload": _email_payload,
        "run_ms": (80, 900),
    },
    {
        "name": "ChargeCard",
        "queue": "billing",
        "share": 0.22,
        "doomed": 0.06,
        "fail": 0.14,
        "attempts": 3,
        "backoff": {"kind": "fixed", "delay_ms": 60_000},
        "payload": _charge_payload,
        "run_ms": (200, 2500),
    },
    {
        "name": "BuildReport",
        "queue": "reports",
        "share": 0.08,
        "doomed": 0.05,
        "fail": 0.05,
        "attempts": 1,
        "backoff": None,
        "payload": _report_payload,
        "run_ms": (2000, 45_000),
    },
    {
        "name": "SyncInventory",
        "queue": "default",
        "share": 0.24,
        "doomed": 0.04,
        "fail": 0.09,
        "attempts": 2,
        "backoff": {"kind": "fixed", "delay_ms": 20_000},
        "payload": _sync_payload,
        "run_ms": (300, 4000),
    },
    {
        "name": "CleanupTempFiles",
        "queue": "default",
        "share": 0.12,
        "doomed": 0.0,
        "fail": 0.0,
        "attempts": 1,
        "backoff": None,
        "payload": _cleanup_payload,
        "run_ms": (50, 600),
    },
]


def _raise_for(name: str, payload: dict[str, Any]) -> None:
    """Raise the exception a real handler of ``name`` would (for a real traceback)."""
    if name == "ChargeCard":
        _charge_card(payload)
    elif name == "SendWelcomeEmail":
        _deliver_mail(payload)
    elif name == "SyncInventory":
        _fetch_stock(payload)
    else:
        _render_report(payload)


def _charge_card(payload: dict[str, Any]) -> None:
    card = payload.get("card", {})
    raise CardDeclinedError(
        f"card {card.get('brand')} ending {card.get('last4')} was declined: insufficient_funds"
    )


def _deliver_mail(payload: dict[str, Any]) -> None:
    raise SmtpTimeoutError(
        f"smtp.example.com:587 did not answer within 10 s (to {payload.get('to')})"
    )


def _fetch_stock(payload: dict[str, Any]) -> None:
    raise UpstreamUnavailableError(
        f"inventory API answered 503 for warehouse {payload.get('warehouse')}"
    )


def _render_report(payload: dict[str, Any]) -> Any:
    row = {"region": "eu", "period": payload.get("period")}
    # The column the template expects is missing: KeyError, as in a real bug.
    return row["revenue"]


def failure_exit(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        _raise_for(name, payload)
    except Exception as exc:
        return encode_failure(exc)
    raise AssertionError("unreachable: _raise_for always raises")


class DemoClock:
    """The store clock while seeding: real time, or a moment in the past we move forward."""

    def __init__(self) -> None:
        self.at: int | None = None

    def __call__(self) -> int:
        return self.at if self.at is not None else int(time.time() * 1000)

    def set(self, at: int) -> None:
        self.at = max(at, self.at or 0)

    def advance(self, ms: int) -> None:
        self.at = self() + ms

    def release(self) -> None:
        self.at = None


class Command(BaseCommand):
    help = (
        "Fill a store with realistic demo data: thousands of jobs in every state, failures "
        "with tracebacks, retries, delayed jobs, schedules, dedupe keys and a cross-store flow."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--store", help="store name in MQ_STORES (default: the first one)")
        parser.add_argument(
            "--children-store",
            help="store of the demo flow's children (default: the second configured store, "
            "else the same store)",
        )
        parser.add_argument("--jobs", type=int, default=3000, help="jobs to create (default 3000)")
        parser.add_argument(
            "--hours", type=int, default=3, help="hours of history to spread them over (default 3)"
        )
        parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
        parser.add_argument(
            "--force", action="store_true", help="add another batch even if the store is seeded"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stores = services.configured_stores()
        name = options["store"] or next(iter(stores))
        if name not in stores:
            raise CommandError(f"no store named {name!r} in MQ_STORES (known: {', '.join(stores)})")
        children_name = options["children_store"] or next((s for s in stores if s != name), name)
        if children_name not in stores:
            raise CommandError(f"no store named {children_name!r} in MQ_STORES")
        if options["jobs"] < 0 or options["hours"] < 1:
            raise CommandError("--jobs must be >= 0 and --hours >= 1")
        self.stopping = False
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._seed(name, children_name, options)
        except StoreFailure as exc:
            raise CommandError(f"store trouble: {exc}") from exc
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        self.stderr.write("stopping after the current step…")

    # ------------------------------------------------------------------ set-up

    def _open(self, name: str, clock: DemoClock) -> RedisJobStore:
        """A store on ``name``'s prefix driven by ``clock`` (same settings as the project's)."""

        entry = services.configured_stores()[name]
        client, _ = services.get_client(services.store_url(entry))
        # Built on real time: its boot reconcile stamps the index markers with "now".
        return RedisJobStore(
            client,
            prefix=str(entry["prefix"]),
            store_key=name,
            indexes=entry.get("indexes", True),
            history_ttl=entry.get("history_ttl"),
            clock=clock,
        )

    def _seed(self, name: str, children_name: str, options: dict[str, Any]) -> None:
        rng = random.Random(options["seed"])
        clock = DemoClock()
        job_store = self._open(name, clock)
        child_store = job_store if children_name == name else self._open(children_name, clock)
        quieted: list[tuple[RedisJobStore, str]] = []
        flow: FlowState | None = None
        try:
            self._upsert_schedules(job_store)
            seeded = job_store.get_job(FLOW_PARENT_ID) is not None
            if seeded and not options["force"]:
                self.stdout.write(
                    f"Store {name!r} already holds the demo data (found {FLOW_PARENT_ID}); "
                    "schedules refreshed. Use --force to add another batch of jobs."
                )
                return
            # A running worker would take the jobs this command claims and acks itself
            # (and the flow parent it must fan out): it stays quiet until the data is in.
            quieted = self._quiet_workers([job_store, child_store])
            created = self._history(job_store, clock, rng, options["jobs"], options["hours"])
            if self.stopping:
                self.stdout.write(f"Stopped early after {created} jobs.")
                return
            clock.release()
            extras = self._specials(job_store, clock, rng)
            if not seeded:
                self._flow(job_store, child_store, clock)
            counts = job_store.counts()
            parent = job_store.get_job(FLOW_PARENT_ID)
            flow = parent.flow if parent is not None else None
        finally:
            clock.release()
            for quiet_store, worker_id in quieted:
                self._quietly(quiet_store.control_worker, worker_id, None)
            if quieted:
                self.stdout.write(f"Live workers resumed: {', '.join(w for _, w in quieted)}")
            job_store.close()
            if child_store is not job_store:
                child_store.close()
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded store {name!r}: {created + extras} jobs "
                + ", ".join(f"{state} {n}" for state, n in counts.items())
            )
        )
        if flow is not None:
            total = flow.pending + flow.completed + flow.failed + flow.cancelled
            self.stdout.write(
                f"The demo flow {FLOW_PARENT_ID}: {flow.completed + flow.failed} of {total} "
                f"children reported ({flow.completed} completed, {flow.failed} failed), "
                f"{flow.pending} to go."
            )
        if children_name == name:
            self.stdout.write(
                "Only one store is configured, so the demo flow's children live in the same "
                "store. To see a cross-store flow, configure two stores, e.g.\n"
                '  MQ_STORES=\'{"default": {"prefix": "mq"}, "reports": {"prefix": "mq-reports"}}\''
                "\nand run seed_demo again on a fresh prefix."
            )
        else:
            self.stdout.write(
                f"The demo flow {FLOW_PARENT_ID} has its children in {children_name!r}."
            )

    def _quiet_workers(self, stores: list[RedisJobStore]) -> list[tuple[RedisJobStore, str]]:
        """Tell the live workers of ``stores`` that serve queues to go quiet; wait until they
        say so (a few seconds at most).  Returns (store, worker id) of those told."""
        told: list[tuple[RedisJobStore, str]] = []
        for job_store in {id(s): s for s in stores}.values():
            controls = job_store.worker_controls()
            for worker in job_store.live_workers():
                if worker.queues and worker.state == "running" and worker.worker_id not in controls:
                    job_store.control_worker(worker.worker_id, "quiet")
                    told.append((job_store, worker.worker_id))
        if not told:
            return told
        self.stdout.write(
            f"Asking {len(told)} live worker(s) to stay quiet while seeding: "
            + ", ".join(w for _, w in told)
        )
        deadline = time.monotonic() + QUIET_WAIT_S
        waiting = set(told)
        while waiting and time.monotonic() < deadline:
            time.sleep(0.1)
            for job_store, worker_id in list(waiting):
                states = {w.worker_id: w.state for w in job_store.live_workers()}
                if states.get(worker_id, "quiet") != "running":
                    waiting.discard((job_store, worker_id))
        return told

    def _upsert_schedules(self, job_store: JobStore) -> None:
        now = int(time.time() * 1000)
        cron, tz = "0 7 * * 1-5", "Europe/Berlin"
        job_store.upsert_schedule(
            ScheduleRecord(
                key="SendDigest/weekday-morning",
                job_name="SendDigest",
                queue="emails",
                cron=cron,
                tz=tz,
                payload={"digest": "daily", "audience": "all-active-users"},
                metadata={"tenant": "acme"},
                attempts_max=3,
                next_run_at=next_cron(cron, tz, now) or now,
            )
        )
        job_store.upsert_schedule(
            ScheduleRecord(
                key="CleanupTempFiles/every-15-min",
                job_name="CleanupTempFiles",
                queue="default",
                every_ms=15 * 60_000,
                payload={"older_than_hours": 24, "path": "/var/tmp/uploads"},
                group="maintenance",
                next_run_at=now + 15 * 60_000,
            )
        )
        # A frequent one, so a running worker fires a schedule within seconds of seeding.
        job_store.upsert_schedule(
            ScheduleRecord(
                key="RefreshPriceCache/every-30-s",
                job_name="RefreshPriceCache",
                queue="maintenance",
                every_ms=30_000,
                payload={"warehouse": "AMS-2"},
                group="maintenance",
                next_run_at=now + 2_000,
            )
        )

    # ------------------------------------------------------------------ history

    def _history(
        self, job_store: JobStore, clock: DemoClock, rng: random.Random, total: int, hours: int
    ) -> int:
        """Enqueue ``total`` jobs over ``hours`` and process them minute by minute."""

        minutes = hours * 60
        end = int(time.time() * 1000)
        start = end - minutes * 60_000
        weights = [1.0 + 0.6 * math.sin(m / minutes * 2 * math.pi * 1.5) for m in range(minutes)]
        scale = total / sum(weights)
        created = 0
        serial = 0
        report_every = max(1, minutes // 10)
        for minute in range(minutes):
            if self.stopping:
                break
            clock.set(start + minute * 60_000 + rng.randint(0, 5_000))
            quota = int(round(weights[minute] * scale))
            if minute == minutes - 1:
                quota = total - created
            requests = []
            for _ in range(max(0, quota)):
                kind = rng.choices(KINDS, weights=[k["share"] for k in KINDS])[0]
                serial += 1
                tenant = rng.choice(TENANTS)
                metadata = {"tenant": tenant, "region": rng.choice(["eu", "us", "apac"])}
                if kind["name"] == "ChargeCard":
                    metadata["customer"] = f"cus_{rng.randint(1000, 9999)}"
                delay = 0
                if rng.random() < 0.05:
                    # Scheduled for later than now (real time), so it is still delayed.
                    delay = (minutes - minute) * 60_000 + rng.randint(10 * 60_000, 6 * 3_600_000)
                requests.append(
                    EnqueueRequest(
                        name=kind["name"],
                        queue=kind["queue"],
                        payload=kind["payload"](rng, serial),
                        metadata=metadata,
                        priority=rng.choice([0, 0, 0, 5, 10]) if kind["queue"] == "billing" else 0,
                        attempts_max=kind["attempts"],
                        backoff=kind["backoff"],
                        keep=None,
                        timeout_ms=60_000 if kind["name"] != "BuildReport" else 300_000,
                        delay_ms=delay,
                    )
                )
            results = job_store.enqueue_many(requests)
            created += len(results)
            for result in results:
                if rng.random() < 0.015:
                    self._quietly(job_store.cancel, result.id)
            # The last minutes fall behind: a backlog of waiting jobs remains.
            share = 1.0 if minute < minutes - 6 else 0.25
            self._work(job_store, clock, rng, share)
            if minute % report_every == 0:
                self.stdout.write(f"  {minute * 100 // minutes:3d}%  {created} jobs")
        return created

    def _work(
        self, job_store: JobStore, clock: DemoClock, rng: random.Random, share: float
    ) -> None:
        """Claim and ack the waiting jobs of every queue (a ``share`` of them)."""

        by_queue: dict[str, list[str]] = {}
        for kind in KINDS:
            by_queue.setdefault(kind["queue"], []).append(kind["name"])
        kinds = {kind["name"]: kind for kind in KINDS}
        for queue, names in by_queue.items():
            waiting = job_store.counts(queue)["waiting"]
            for _ in range(int(waiting * share)):
                token = f"demo-worker-{rng.randint(1, 4)}:{rng.randint(1, 10**6)}"
                claimed = job_store.claim(
                    queue=queue, names=names, token=token, lock_duration_ms=30_000
                )
                if not isinstance(claimed, Claimed):
                    break
                job = claimed.job
                kind = kinds[job.name]
                low, high = kind["run_ms"]
                clock.advance(rng.randint(low, high))
                # Some jobs fail on every attempt (a bad card, a bug); others only now and then.
                doomed = random.Random(job.id).random() < kind["doomed"]
                if doomed or rng.random() < kind["fail"]:
                    exit_value = failure_exit(job.name, job.payload)
                    if job.attempts_made + 1 < job.attempts_max and kind["backoff"]:
                        delay = kind["backoff"]["delay_ms"] * (
                            2**job.attempts_made if kind["backoff"]["kind"] == "exponential" else 1
                        )
                        job_store.ack(job.id, token, Retry(delay, exit_value))
                    else:
                        job_store.ack(job.id, token, Fail(exit_value))
                else:
                    job_store.ack(job.id, token, Complete(self._success_exit(job, rng)))

    @staticmethod
    def _success_exit(job: Any, rng: random.Random) -> Any:
        if job.name == "ChargeCard":
            return {"charge_id": f"ch_{rng.getrandbits(48):012x}", "status": "succeeded"}
        if job.name == "SendWelcomeEmail":
            return {"message_id": f"<{rng.getrandbits(40):010x}@mail.example.com>"}
        if job.name == "SyncInventory":
            return {"updated": rng.randint(0, 40), "skipped": rng.randint(0, 5)}
        if job.name == "BuildReport":
            return {
                "url": f"https://reports.example.com/{rng.getrandbits(32):08x}.pdf",
                "rows": rng.randint(100, 90_000),
            }
        return None

    @staticmethod
    def _quietly(operation: Callable[..., Any], *args: Any) -> None:
        with contextlib.suppress(StoreFailure):
            operation(*args)

    # ------------------------------------------------------------------ special cases

    def _specials(self, job_store: JobStore, clock: DemoClock, rng: random.Random) -> int:
        """A stalled-then-recovered job, dedupe keys, jobs running now and a stuck one."""

        now = int(time.time() * 1000)
        created = 0
        # A job whose worker died mid-run: its lock expires, the stall sweep requeues it
        # (a "stalled" attempt), and a second worker completes it.
        clock.set(now - 9 * 60_000)
        stalled = job_store.enqueue(
            EnqueueRequest(
                name="ReindexSearch",
                queue="maintenance",
                payload={"index": "products", "full": True},
                metadata={"tenant": "hooli", "region": "eu"},
                attempts_max=2,
            )
        )
        created += 1
        claimed = job_store.claim(
            queue="maintenance",
            names=["ReindexSearch"],
            token="demo-worker-9:1",
            lock_duration_ms=5_000,
        )
        clock.advance(60_000)
        job_store.recover_stalled(max_stalled_count=1)
        clock.advance(2_000)
        again = job_store.claim(
            queue="maintenance",
            names=["ReindexSearch"],
            token="demo-worker-2:77",
            lock_duration_ms=30_000,
        )
        clock.advance(12_000)
        if (
            isinstance(claimed, Claimed)
            and isinstance(again, Claimed)
            and again.job.id == stalled.id
        ):
            job_store.ack(
                stalled.id,
                "demo-worker-2:77",
                Complete({"url": "https://reports.example.com/usage.pdf", "rows": 4200}),
            )
        # Pending dedupe: three enqueues for one user, one job.
        clock.set(now - 4 * 60_000)
        for _ in range(3):
            job_store.enqueue(
                EnqueueRequest(
                    name="SendDigest",
                    queue="emails",
                    payload={"user_id": 42, "digest": "weekly"},
                    metadata={"tenant": "acme"},
                    dedupe=DedupePolicy(key="digest-user-42"),
                    delay_ms=30 * 60_000,
                )
            )
        created += 1
        # Throttle window: the job finished, the key stays taken until the window ends.
        throttled = job_store.enqueue(
            EnqueueRequest(
                name="RefreshPriceCache",
                queue="maintenance",
                payload={"warehouse": "BER-1"},
                metadata={"tenant": "globex", "region": "eu"},
                dedupe=DedupePolicy(key="prices-BER-1", ttl_ms=60 * 60_000),
            )
        )
        created += 1
        done = job_store.claim(
            queue="maintenance",
            names=["RefreshPriceCache"],
            token="demo-worker-3:5",
            lock_duration_ms=30_000,
        )
        if isinstance(done, Claimed):
            clock.advance(1_500)
            job_store.ack(done.job.id, "demo-worker-3:5", Complete({"updated": 12, "skipped": 0}))
        del throttled
        # Jobs running right now (locks valid for a few minutes) and one whose worker vanished.
        clock.release()
        for n in range(4):
            kind = KINDS[n % 2]
            job_store.enqueue(
                EnqueueRequest(
                    name=kind["name"],
                    queue=kind["queue"],
                    payload=kind["payload"](rng, 900_000 + n),
                    metadata={"tenant": rng.choice(TENANTS), "region": "us"},
                    attempts_max=kind["attempts"],
                )
            )
            created += 1
            job_store.claim(
                queue=kind["queue"],
                names=[kind["name"]],
                token=f"demo-worker-{n + 1}:{500 + n}",
                lock_duration_ms=rng.choice([120_000, 300_000]),
            )
        clock.set(int(time.time() * 1000) - 3 * 60_000)
        job_store.enqueue(
            EnqueueRequest(
                name="SyncInventory",
                queue="default",
                payload={"warehouse": "NYC-1", "skus": ["SKU-404"]},
                metadata={"tenant": "initech", "region": "us"},
                attempts_max=2,
            )
        )
        created += 1
        job_store.claim(
            queue="default",
            names=["SyncInventory"],
            token="demo-worker-7:13",
            lock_duration_ms=60_000,
        )
        clock.release()
        return created

    def _flow(
        self, parent_store: RedisJobStore, child_store: RedisJobStore, clock: DemoClock
    ) -> None:
        """A parent in one store fanning out to twelve children in another, mid-way through."""

        psk, csk = parent_store.store_key, child_store.store_key
        now = int(time.time() * 1000)
        clock.set(now - 6 * 60_000)
        parent_store.enqueue(
            EnqueueRequest(
                id=FLOW_PARENT_ID,
                name="BuildMonthlyReport",
                queue="reports",
                payload={"period": "2026-11", "regions": list(REGIONS)},
                metadata={"tenant": "acme"},
                attempts_max=2,
            )
        )
        token = "demo-worker-1:flow"
        claimed = parent_store.claim(
            queue="reports", names=["BuildMonthlyReport"], token=token, lock_duration_ms=60_000
        )
        if not isinstance(claimed, Claimed):
            raise CommandError(
                "could not claim the demo flow parent (is a worker consuming 'reports'?)"
            )

        def spec(
            flow_id: str, key: str, name: str, parent_key: str, depth: int, payload: Any
        ) -> FlowChildSpec:
            return FlowChildSpec(
                child_key=key,
                store_key=csk,
                request=EnqueueRequest(
                    id=child_job_id(parent_key, flow_id, key),
                    name=name,
                    queue="reports",
                    payload=payload,
                    metadata={"tenant": "acme", "region": key},
                    attempts_max=2,
                    parent=ParentEnvelope(FLOW_NAME, flow_id, key, parent_key, depth),
                ),
            )

        specs = [
            spec(
                FLOW_PARENT_ID,
                region,
                "RenderRegionReport",
                psk,
                1,
                {"region": region, "period": "2026-11"},
            )
            for region in REGIONS
        ]
        clock.advance(800)
        parent_store.ack(FLOW_PARENT_ID, token, FanOut(False, specs))
        child_store.enqueue_many([s.request for s in specs])
        registry = StoreRegistry()
        registry.register(parent_store)
        registry.register(child_store)

        def run_child(outcome: str, lock_ms: int = 300_000) -> str | None:
            tok = f"demo-worker-5:{outcome}-{time.monotonic_ns()}"
            got = child_store.claim(
                queue="reports", names=["RenderRegionReport"], token=tok, lock_duration_ms=lock_ms
            )
            if not isinstance(got, Claimed):
                return None
            clock.advance(4_000)
            if outcome == "completed":
                child_store.ack(
                    got.job.id,
                    tok,
                    Complete(
                        {
                            "pages": 14,
                            "url": f"https://reports.example.com/{got.job.payload['region']}.pdf",
                        }
                    ),
                )
            elif outcome == "failed":
                child_store.ack(
                    got.job.id, tok, Fail(failure_exit("BuildReport", {"report": "sales"}))
                )
            return got.job.id

        for _ in range(6):
            run_child("completed")
        run_child("failed")
        relay_outbox(child_store, registry)
        # These two finished, but no relay ran since: their reports wait in the outbox.
        run_child("completed")
        run_child("completed")
        # The next child ("eu" comes later by FIFO order) is itself a flow: it fans out.
        nested_tok = "demo-worker-6:nested"
        nested = child_store.claim(
            queue="reports",
            names=["RenderRegionReport"],
            token=nested_tok,
            lock_duration_ms=300_000,
        )
        if isinstance(nested, Claimed):
            nested_id = nested.job.id
            grand = [
                spec(nested_id, country, "RenderCountryReport", csk, 2, {"country": country})
                for country in COUNTRIES
            ]
            clock.advance(500)
            child_store.ack(nested_id, nested_tok, FanOut(False, grand))
            child_store.enqueue_many([g.request for g in grand])
            tok = "demo-worker-6:grand"
            got = child_store.claim(
                queue="reports", names=["RenderCountryReport"], token=tok, lock_duration_ms=300_000
            )
            if isinstance(got, Claimed):
                clock.advance(2_000)
                child_store.ack(got.job.id, tok, Complete({"pages": 3}))
        # One child running now, on a worker that never comes back: once its short lock
        # expires, a live worker's stall recovery hands it to a worker that completes it
        # (so the flow settles under `make run`).  The rest wait for a worker.
        clock.release()
        run_child("running", lock_ms=20_000)
