"""Every change the dashboard can make, declared once: the verb registry.

A verb is one change an operator makes from the dashboard: retry a job, pause a
queue, trigger a schedule.  Its :class:`Verb` entry in :data:`VERBS` says all the
app needs to know about it: its name in the URL, its button label, the permission
it needs, the states of its target it applies to and what a refusal says in other
states, how it runs (its store call), whether it is dangerous and asks to confirm,
and the extra form fields it takes.  Everything else is derived from this module:

* the bulk forms' verb choices and each action's form (:mod:`mqadmin.forms`);
* the permission checks and the ``can`` map templates read (:mod:`mqadmin.permissions`);
* the model's permissions, hence the Permission migration (:mod:`mqadmin.models`);
* the job page's buttons, the explorer's and bulk page's choices, the overview's
  queue buttons and the schedules page's buttons (``{% verbs %}`` in the templates);
* which audit entries link to their job, and the one action view
  (:mod:`mqadmin.views.actions`).

Adding a verb means: a run function calling the store, one :class:`Verb` entry, a
:class:`Grant` appended to :data:`GRANTS` if it needs a permission of its own (then
``manage.py makemigrations``), and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import ValidationError
from django.urls import reverse

from store.errors import (
    InvalidRequestError,
    JobNotCancellableError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRetryableError,
)
from store.flow_control import RATE_HELP, format_rate, parse_rate
from store.records import ALL_STATES, TERMINAL_STATES

if TYPE_CHECKING:
    # Meta.permissions' declared type (from django-stubs; nothing imports it at run time).
    from django_stubs_ext import StrOrPromise

# ---------------------------------------------------------------------- permissions


@dataclass(frozen=True)
class Grant:
    """A Django permission the dashboard declares (on ``AuditEntry``, so a migration makes it)."""

    codename: str
    #: What the admin shows ("mqadmin | audit entry | Can retry failed jobs").
    name: str


RETRY_JOB = Grant("retry_job", "Can retry failed jobs")
CANCEL_JOB = Grant("cancel_job", "Can cancel jobs")
PROMOTE_JOB = Grant("promote_job", "Can promote delayed jobs")
REMOVE_JOB = Grant("remove_job", "Can remove jobs")
PAUSE_QUEUE = Grant("pause_queue", "Can pause and resume queues")
BULK_ACTION = Grant("bulk_action", "Can run bulk actions")
VIEW_PAYLOAD = Grant("view_payload", "Can see job payloads, exits and metadata values")
TRIGGER_SCHEDULE = Grant("trigger_schedule", "Can trigger a schedule now")
REMOVE_SCHEDULE = Grant("remove_schedule", "Can remove schedules")
CHANGE_LIMITS = Grant("change_limits", "Can change queue limits")
CONTROL_WORKER = Grant("control_worker", "Can quiet, resume and stop workers")
DRAIN_QUEUE = Grant("drain_queue", "Can drain queues (remove their waiting and delayed jobs)")
CLEAN_QUEUE = Grant("clean_queue", "Can clean queues (remove their finished jobs)")

#: Every permission of the dashboard, in the order of the migration: append new ones
#: (reordering them makes Django write a migration that only reorders).
GRANTS: tuple[Grant, ...] = (
    RETRY_JOB,
    CANCEL_JOB,
    PROMOTE_JOB,
    REMOVE_JOB,
    PAUSE_QUEUE,
    BULK_ACTION,
    VIEW_PAYLOAD,
    TRIGGER_SCHEDULE,
    REMOVE_SCHEDULE,
    CHANGE_LIMITS,
    CONTROL_WORKER,
    DRAIN_QUEUE,
    CLEAN_QUEUE,
)

#: The permission name a bulk run needs besides its verb's own.
BULK = "bulk"
#: Its words in a refusal ("... permission to run bulk actions").
BULK_DOING = "run bulk actions"
#: The queue page's sweeps: drain (remove waiting and delayed jobs) and clean (remove
#: finished jobs).  Each is previewed and run in chunks like a bulk run, so it is no
#: verb of one target; its permission is checked by these names, as ``BULK``'s is.
DRAIN = "drain_queue"
CLEAN = "clean_queue"

#: Permissions checked by a name of their own (not a verb's key): name -> (grant, doing).
OPERATIONS: dict[str, tuple[Grant, str]] = {
    BULK: (BULK_ACTION, BULK_DOING),
    DRAIN: (DRAIN_QUEUE, "drain queues"),
    CLEAN: (CLEAN_QUEUE, "clean queues"),
}


def model_permissions() -> list[tuple[str, StrOrPromise]]:
    """``AuditEntry.Meta.permissions``: every grant as (codename, name)."""
    return [(grant.codename, grant.name) for grant in GRANTS]


# ---------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """What the verbs of one kind act on, and how a form names it."""

    kind: str
    #: The POST field carrying the target (job id, queue name, schedule key).
    field: str
    #: The URL name of the action view (``actions/<kind>/<verb>/``).
    url_name: str
    #: Title of the 400 page for an invalid form (``{verb}``: the verb's name).
    invalid_title: str
    #: The message when the target does not exist.
    missing: str
    #: The message when the target's state refuses the verb (``{state}``, ``{refusal}``).
    in_state: str
    #: The URL of the page showing the target (an action returns there): (store, target).
    page: Callable[[str, str], str]
    #: Where an action returns once its target is gone: (store).
    gone_page: Callable[[str], str]


JOB = Target(
    kind="job",
    field="job_id",
    url_name="mqadmin:job_action",
    invalid_title="Cannot {verb} that job",
    missing="Cannot {verb} {target}: no such job.",
    in_state="Cannot {verb} {target}: the job is {state} — {refusal}.",
    page=lambda store, target: reverse("mqadmin:job", args=[store, target]),
    gone_page=lambda store: reverse("mqadmin:jobs") + f"?store={store}",
)
QUEUE = Target(
    kind="queue",
    field="queue",
    url_name="mqadmin:queue_action",
    invalid_title="Cannot {verb} that queue",
    missing="Cannot {verb} queue “{target}”: no such queue.",
    in_state="Cannot {verb} queue “{target}”: it is {state}.",
    page=lambda store, target: reverse("mqadmin:home"),
    gone_page=lambda store: reverse("mqadmin:home"),
)
SCHEDULE = Target(
    kind="schedule",
    field="key",
    url_name="mqadmin:schedule_action",
    invalid_title="Cannot do that to the schedule",
    missing="Cannot {verb} “{target}”: no such schedule.",
    in_state="Cannot {verb} “{target}”: it is {state}.",
    page=lambda store, target: reverse("mqadmin:schedules"),
    gone_page=lambda store: reverse("mqadmin:schedules"),
)

WORKER = Target(
    kind="worker",
    field="worker_id",
    url_name="mqadmin:worker_action",
    invalid_title="Cannot {verb} that worker",
    missing="Cannot {verb} worker {target}: no live worker by that id (it stopped?).",
    in_state="Cannot {verb} worker {target}: it is {state}.",
    page=lambda store, target: reverse("mqadmin:workers"),
    gone_page=lambda store: reverse("mqadmin:workers"),
)

TARGETS: dict[str, Target] = {target.kind: target for target in (JOB, QUEUE, SCHEDULE, WORKER)}


# ---------------------------------------------------------------------- verbs


@dataclass(frozen=True)
class ActionResult:
    """How one verb on one target went, in words for the operator."""

    ok: bool
    message: str
    #: Facts for the audit entry's params (a triggered schedule's new job id).
    params: Mapping[str, Any] = field(default_factory=dict)


class TargetMissing(Exception):
    """A run function found no such target (reported with :attr:`Target.missing`)."""


class StateRefused(Exception):
    """A run function found the target in a state the verb does not apply to."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


#: A verb's store call: (store, store name, target, extra field values) -> result.
#: It raises :class:`TargetMissing` / :class:`StateRefused` (or the store's own
#: not-found and wrong-state errors) for the two refusals every verb words alike.
Run = Callable[[Any, str, str, Mapping[str, Any]], ActionResult]
#: A verb's confirmation question, from the target, the store and page facts.
Confirm = Callable[..., str]


@dataclass(frozen=True)
class Verb:
    """One dashboard action: everything the forms, checks, pages and views need to know."""

    target: Target
    #: The verb in the URL and the form choices (unique within its target kind).
    name: str
    #: The button's text.
    label: str
    grant: Grant
    run: Run
    #: The name the audit log, the permission checks and ``can.<key>`` use (unique).
    key: str = ""
    #: The refusal's words: "You need the … permission to <doing>."
    doing: str = ""
    #: Refused exactly as the verb with this key (it has no grant of its own).
    checked_as: str | None = None
    #: The target states it applies to; None: every state.
    states: frozenset[str] | None = None
    #: Why a target in another state refuses it ("only failed jobs can be retried").
    refusal: str = ""
    #: The button's style: "" (plain), "secondary" or "danger".
    style: str = ""
    #: Asks this question before running (the page's ``data-confirm``); None: no question.
    confirm: Confirm | None = None
    #: Offered by the explorer's bulk bars and accepted by the bulk forms.
    bulk: bool = False
    #: The target is gone afterwards (no page to return to, no link in the audit log).
    removes: bool = False
    #: Extra form fields: name -> a factory of the Django form field.
    fields: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    #: What the extra fields mean, shown with them ("" for none).
    help: str = ""
    #: What happens to a job it applies to, for bulk previews ("will be retried").
    outcome: str = ""
    #: State -> a different outcome for jobs in that state (a running job's cancel).
    outcomes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)
        if not self.doing and self.checked_as is None:
            raise ValueError(f"verb {self.key!r} needs the words of its refusal (doing)")
        if self.bulk and (self.target is not JOB or self.fields):
            raise ValueError(f"verb {self.key!r}: only job verbs without extra fields run in bulk")

    @property
    def kind(self) -> str:
        return self.target.kind

    @property
    def permission_key(self) -> str:
        """The key whose permission check (and refusal) this verb shares."""
        return self.checked_as or self.key

    @property
    def asks_to_confirm(self) -> bool:
        # Templates call callables they meet, so they test this flag, not ``confirm``.
        return self.confirm is not None

    def applies_to(self, state: str) -> bool:
        return self.states is None or state in self.states

    @property
    def dangerous(self) -> bool:
        return self.style == "danger"

    def outcome_in(self, state: str) -> str:
        """What the verb does to a job in ``state`` ("will be retried"), for previews."""
        return self.outcomes.get(state, self.outcome or f"will get “{self.name}”")

    def confirm_text(self, target: str, store: str, **facts: Any) -> str:
        return self.confirm(target=target, store=store, **facts) if self.confirm else ""

    def perform(
        self,
        job_store: Any,
        target: str,
        *,
        store_name: str = "",
        values: Mapping[str, Any] | None = None,
    ) -> ActionResult:
        """Run the verb on ``target``, turning the usual refusals into a message that says why."""
        words = {"verb": self.name, "target": target, "refusal": self.refusal}
        try:
            return self.run(job_store, store_name, target, values or {})
        except (JobNotFoundError, TargetMissing):
            return ActionResult(False, self.target.missing.format(**words))
        except (JobNotRetryableError, JobNotCancellableError, JobNotPromotableError) as exc:
            return ActionResult(False, self.target.in_state.format(state=exc.state, **words))
        except StateRefused as exc:
            return ActionResult(False, self.target.in_state.format(state=exc.state, **words))


# ---------------------------------------------------------------------- job verbs


def _retry(job_store: Any, store_name: str, job_id: str, values: Mapping[str, Any]) -> ActionResult:
    job_store.retry(job_id)
    return ActionResult(True, f"Retried {job_id}: it is waiting again.")


def _cancel(
    job_store: Any, store_name: str, job_id: str, values: Mapping[str, Any]
) -> ActionResult:
    before = job_store.get_job(job_id)
    job_store.cancel(job_id)
    if before is not None and before.state == "active":
        return ActionResult(
            True,
            f"Cancel requested for {job_id}: it is running, so its worker stops it at "
            "the next heartbeat.",
        )
    return ActionResult(True, f"Cancelled {job_id}.")


def _promote(
    job_store: Any, store_name: str, job_id: str, values: Mapping[str, Any]
) -> ActionResult:
    job_store.promote(job_id)
    return ActionResult(True, f"Promoted {job_id}: it is waiting now.")


def _remove(
    job_store: Any, store_name: str, job_id: str, values: Mapping[str, Any]
) -> ActionResult:
    if job_store.remove(job_id):
        return ActionResult(True, f"Removed {job_id}.")
    current = job_store.get_job(job_id)
    if current is None:
        raise TargetMissing(job_id)
    raise StateRefused(current.state)


# ---------------------------------------------------------------------- queue verbs


def _pause(job_store: Any, store_name: str, queue: str, values: Mapping[str, Any]) -> ActionResult:
    job_store.pause(queue)
    return ActionResult(
        True, f"Paused queue “{queue}” of {store_name}: workers stop claiming from it."
    )


def _resume(job_store: Any, store_name: str, queue: str, values: Mapping[str, Any]) -> ActionResult:
    job_store.resume(queue)
    return ActionResult(True, f"Resumed queue “{queue}” of {store_name}.")


class RateField(forms.CharField):
    """A queue's rate limit as text ("100/s"); cleaned to that text ("" when left blank)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 40)
        kwargs.setdefault("help_text", RATE_HELP)
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"placeholder": "no limit", "title": RATE_HELP})
        )
        super().__init__(**kwargs)

    def clean(self, value: Any) -> str:
        text = str(super().clean(value) or "")
        if not text:
            return ""
        try:
            return format_rate(parse_rate(text))
        except ValueError as exc:
            raise ValidationError(
                "%(label)s “%(text)s”: %(detail)s.",
                params={"label": self.label or "Rate", "text": text[:40], "detail": exc},
            ) from None


def _concurrency_field(label: str = "Concurrency") -> forms.IntegerField:
    field = forms.IntegerField(required=False, min_value=1, max_value=1_000_000_000, label=label)
    field.widget.attrs["placeholder"] = "no limit"
    return field


def _group_concurrency_field() -> forms.IntegerField:
    return _concurrency_field("Group concurrency")


def _group_rate_field() -> RateField:
    return RateField(label="Group rate")


#: The "Set limits" form's fields, in form order: (field, how the result message says it).
LIMIT_FIELDS: tuple[tuple[str, str], ...] = (
    ("concurrency", "at most {} running"),
    ("rate", "rate {}"),
    ("group_concurrency", "at most {} running per group"),
    ("group_rate", "group rate {}"),
)


def limits_initial(limits: Any) -> dict[str, Any]:
    """The "Set limits" form's values for a queue's current limits (``queue_limits()``).

    Every field is present: a blank one (None) means no limit of that kind, which is
    what submitting it blank sets (the call replaces all four).
    """
    return {
        "concurrency": limits.concurrency,
        "rate": format_rate(limits.rate) if limits.rate is not None else None,
        "group_concurrency": limits.group_concurrency,
        "group_rate": format_rate(limits.group_rate) if limits.group_rate is not None else None,
    }


def _set_limits(
    job_store: Any, store_name: str, queue: str, values: Mapping[str, Any]
) -> ActionResult:
    given = {
        name: value
        for name, _ in LIMIT_FIELDS
        if (value := values.get(name)) is not None and value != ""
    }
    if not given:
        return ActionResult(
            False,
            f"Cannot set limits of queue “{queue}”: give at least one of concurrency, rate, "
            "group concurrency and group rate (“Clear limits” removes them all).",
        )
    try:
        job_store.set_queue_limits(
            queue,
            concurrency=given.get("concurrency"),
            rate=parse_rate(given["rate"]) if "rate" in given else None,
            group_concurrency=given.get("group_concurrency"),
            group_rate=parse_rate(given["group_rate"]) if "group_rate" in given else None,
        )
    except (InvalidRequestError, ValueError) as exc:
        return ActionResult(False, f"Cannot set limits of queue “{queue}”: {exc}")
    said = [words.format(given[name]) for name, words in LIMIT_FIELDS if name in given]
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return ActionResult(True, f"Limited queue “{queue}” of {store_name}: {listed}.")


def _clear_limits(
    job_store: Any, store_name: str, queue: str, values: Mapping[str, Any]
) -> ActionResult:
    try:
        job_store.clear_queue_limits(queue)
    except InvalidRequestError as exc:
        return ActionResult(False, f"Cannot clear limits of queue “{queue}”: {exc}")
    return ActionResult(True, f"Cleared the limits of queue “{queue}” of {store_name}.")


# ---------------------------------------------------------------------- schedule verbs


def _trigger_schedule(
    job_store: Any, store_name: str, key: str, values: Mapping[str, Any]
) -> ActionResult:
    job_id = job_store.trigger_schedule(key)
    return ActionResult(True, f"Triggered “{key}”: enqueued job {job_id}.", {"job_id": job_id})


def _pause_schedule(
    job_store: Any, store_name: str, key: str, values: Mapping[str, Any]
) -> ActionResult:
    if job_store.pause_schedule(key):
        return ActionResult(True, f"Paused schedule “{key}”: it fires again once resumed.")
    raise TargetMissing(key)


def _resume_schedule(
    job_store: Any, store_name: str, key: str, values: Mapping[str, Any]
) -> ActionResult:
    if job_store.resume_schedule(key):
        return ActionResult(True, f"Resumed schedule “{key}” from its next occurrence.")
    return ActionResult(False, f"Cannot resume “{key}”: it is not paused.")


def _remove_schedule(
    job_store: Any, store_name: str, key: str, values: Mapping[str, Any]
) -> ActionResult:
    if job_store.remove_schedule(key):
        return ActionResult(True, f"Removed schedule “{key}”.")
    return ActionResult(False, f"Cannot remove “{key}”: no such schedule (already removed?).")


def _confirm_schedule_removal(target: str, store: str, group: str = "", **facts: Any) -> str:
    question = f"Remove schedule {target}?"
    if group:
        question += (
            f" It belongs to group {group}: the next deploy that reconciles that group "
            "may add it back."
        )
    return question


# ---------------------------------------------------------------------- worker verbs


def worker_state(worker: Any, command: str | None) -> str:
    """A live worker's state as the page shows it: its own word, or the command it was given
    and has not answered yet (workers read their command every second)."""
    if command == "stop" or worker.state == "stopping":
        return "stopping"
    if command == "quiet" or worker.state == "quiet":
        return "quiet"
    return "running"


def _live_worker_state(job_store: Any, worker_id: str) -> str:
    worker = next((w for w in job_store.live_workers() if w.worker_id == worker_id), None)
    if worker is None:
        raise TargetMissing(worker_id)
    return worker_state(worker, job_store.worker_control(worker_id))


def _quiet_worker(
    job_store: Any, store_name: str, worker_id: str, values: Mapping[str, Any]
) -> ActionResult:
    state = _live_worker_state(job_store, worker_id)
    if state != "running":
        raise StateRefused(state)
    job_store.control_worker(worker_id, "quiet")
    return ActionResult(
        True,
        f"Asked worker {worker_id} to go quiet: within a few seconds it claims nothing new "
        "and finishes the jobs it holds.",
    )


def _resume_worker(
    job_store: Any, store_name: str, worker_id: str, values: Mapping[str, Any]
) -> ActionResult:
    state = _live_worker_state(job_store, worker_id)
    if state != "quiet":
        raise StateRefused(state)
    job_store.control_worker(worker_id, None)
    return ActionResult(True, f"Resumed worker {worker_id}: it claims jobs again.")


def _stop_worker(
    job_store: Any, store_name: str, worker_id: str, values: Mapping[str, Any]
) -> ActionResult:
    state = _live_worker_state(job_store, worker_id)
    if state == "stopping":
        raise StateRefused(state)
    job_store.control_worker(worker_id, "stop")
    return ActionResult(
        True,
        f"Asked worker {worker_id} to stop: within a few seconds it shuts down as on SIGTERM "
        "(running jobs are handed back to waiting without using an attempt). A supervisor "
        "(systemd, runworker --processes) may start it again.",
    )


_UNFINISHED = frozenset(ALL_STATES) - TERMINAL_STATES

#: The registry: every verb of the dashboard, in the order pages show them.
VERBS: tuple[Verb, ...] = (
    Verb(
        JOB,
        "retry",
        "Retry",
        RETRY_JOB,
        _retry,
        doing="retry jobs",
        states=frozenset({"failed"}),
        refusal="only failed jobs can be retried",
        bulk=True,
        outcome="will be retried",
    ),
    Verb(
        JOB,
        "cancel",
        "Cancel",
        CANCEL_JOB,
        _cancel,
        doing="cancel jobs",
        states=_UNFINISHED,
        refusal="finished jobs cannot be cancelled",
        style="danger",
        confirm=lambda target, **facts: f"Cancel job {target}?",
        bulk=True,
        outcome="will be cancelled",
        outcomes={
            "active": "will be asked to stop (their workers cancel them at the next heartbeat)"
        },
    ),
    Verb(
        JOB,
        "promote",
        "Promote",
        PROMOTE_JOB,
        _promote,
        doing="promote jobs",
        states=frozenset({"delayed"}),
        refusal="only delayed jobs can be promoted",
        bulk=True,
        outcome="will be promoted (waiting now)",
    ),
    Verb(
        JOB,
        "remove",
        "Remove",
        REMOVE_JOB,
        _remove,
        doing="remove jobs",
        states=frozenset(ALL_STATES) - {"active", "waiting-children"},
        refusal="active jobs and flow parents waiting for children cannot be removed",
        style="danger",
        confirm=lambda target, **facts: f"Remove job {target} and its attempt ledger for good?",
        bulk=True,
        removes=True,
        outcome="will be removed for good",
    ),
    Verb(
        QUEUE,
        "pause",
        "Pause",
        PAUSE_QUEUE,
        _pause,
        doing="pause queues",
        states=frozenset({"running"}),
        style="secondary",
        confirm=lambda target, store, **facts: (
            f"Pause queue “{target}” of {store}? Workers stop claiming from it until it is resumed."
        ),
    ),
    Verb(
        QUEUE,
        "resume",
        "Resume",
        PAUSE_QUEUE,
        _resume,
        doing="resume queues",
        states=frozenset({"paused"}),
    ),
    Verb(
        QUEUE,
        "limits",
        "Set limits",
        CHANGE_LIMITS,
        _set_limits,
        doing="change queue limits",
        style="secondary",
        fields={
            "concurrency": _concurrency_field,
            "rate": RateField,
            "group_concurrency": _group_concurrency_field,
            "group_rate": _group_rate_field,
        },
        help=(
            "Replaces all four limits: a blank field means no limit of that kind. "
            f"Rates look like {RATE_HELP}."
        ),
    ),
    Verb(
        QUEUE,
        "clear_limits",
        "Clear limits",
        CHANGE_LIMITS,
        _clear_limits,
        doing="change queue limits",
        style="secondary",
        confirm=lambda target, store, **facts: f"Clear every limit of queue “{target}” of {store}?",
    ),
    Verb(
        SCHEDULE,
        "trigger",
        "Trigger now",
        TRIGGER_SCHEDULE,
        _trigger_schedule,
        key="trigger_schedule",
        doing="trigger schedules",
    ),
    # Pausing and resuming need the permission to remove a schedule (no separate grant).
    Verb(
        SCHEDULE,
        "pause",
        "Pause",
        REMOVE_SCHEDULE,
        _pause_schedule,
        key="pause_schedule",
        checked_as="remove_schedule",
        states=frozenset({"active"}),
        style="secondary",
    ),
    Verb(
        SCHEDULE,
        "resume",
        "Resume",
        REMOVE_SCHEDULE,
        _resume_schedule,
        key="resume_schedule",
        checked_as="remove_schedule",
        states=frozenset({"paused"}),
        style="secondary",
    ),
    Verb(
        SCHEDULE,
        "remove",
        "Remove",
        REMOVE_SCHEDULE,
        _remove_schedule,
        key="remove_schedule",
        doing="remove schedules",
        style="danger",
        confirm=_confirm_schedule_removal,
        removes=True,
    ),
    Verb(
        WORKER,
        "quiet",
        "Quiet",
        CONTROL_WORKER,
        _quiet_worker,
        key="quiet_worker",
        doing="control workers",
        states=frozenset({"running"}),
        style="secondary",
        confirm=lambda target, store, **facts: (
            f"Quiet worker {target} of {store}? It stops claiming new jobs (the ones it holds "
            "finish) until it is resumed."
        ),
    ),
    Verb(
        WORKER,
        "resume",
        "Resume",
        CONTROL_WORKER,
        _resume_worker,
        key="resume_worker",
        checked_as="quiet_worker",
        states=frozenset({"quiet"}),
    ),
    Verb(
        WORKER,
        "stop",
        "Stop",
        CONTROL_WORKER,
        _stop_worker,
        key="stop_worker",
        checked_as="quiet_worker",
        states=frozenset({"running", "quiet"}),
        style="danger",
        confirm=lambda target, store, **facts: (
            f"Stop worker {target} of {store}? It shuts down within a few seconds; its running "
            "jobs go back to waiting."
        ),
    ),
)


# ---------------------------------------------------------------------- lookups


def verbs(kind: str | None = None) -> tuple[Verb, ...]:
    """The registry's verbs (of one target kind), in page order."""
    return tuple(verb for verb in VERBS if kind is None or verb.kind == kind)


def job_verbs() -> tuple[Verb, ...]:
    return verbs(JOB.kind)


def bulk_verbs() -> tuple[Verb, ...]:
    return tuple(verb for verb in job_verbs() if verb.bulk)


def find(kind: str, name: str) -> Verb | None:
    """The verb ``name`` of target kind ``kind``, or None."""
    return next((verb for verb in VERBS if verb.kind == kind and verb.name == name), None)


def by_key() -> dict[str, Verb]:
    """Key (audit action) -> verb."""
    return {verb.key: verb for verb in VERBS}


def bulk_verbs_for(states: Iterable[str] | None) -> tuple[Verb, ...]:
    """The bulk verbs that apply to at least one of ``states`` (all of them when unknown)."""
    if states is None:
        return bulk_verbs()
    listed = set(states)
    return tuple(verb for verb in bulk_verbs() if any(verb.applies_to(s) for s in listed))


def default_bulk_verb(offered: Iterable[Verb]) -> Verb | None:
    """The verb a bulk chooser starts on: the only safe one offered, else none.

    An operator looking at failed jobs means to retry them, at delayed ones to promote
    them; when two safe verbs (or only dangerous ones) are offered the page must not
    guess, so nothing is preselected.
    """
    safe = [verb for verb in offered if not verb.dangerous]
    return safe[0] if len(safe) == 1 else None


def bulk_choices() -> list[tuple[str, str]]:
    """The bulk forms' verb choices."""
    return [(verb.name, verb.label) for verb in bulk_verbs()]


def actions_for_state(state: str) -> dict[str, bool]:
    """Job verb -> whether the store accepts it for a job in ``state`` (store contract §4.12–4.16)."""
    return {verb.name: verb.applies_to(state) for verb in job_verbs()}


def state_rules() -> dict[str, str]:
    """Job verb -> why a job in another state refuses it."""
    return {verb.name: verb.refusal for verb in job_verbs()}


def run_job_action(job_store: Any, verb: str, job_id: str) -> ActionResult:
    """One job verb on one job, with a message that says why when the state forbids it."""
    spec = find(JOB.kind, verb)
    if spec is None:
        raise ValueError(f"unknown job action {verb!r}")
    return spec.perform(job_store, job_id)


def links_to_target(action: str, ok: bool) -> bool:
    """Whether an audit entry of ``action`` names a job that may still exist."""
    verb = by_key().get(action)
    return ok and verb is not None and verb.kind == JOB.kind and not verb.removes


def check_registry(registry: Iterable[Verb] | None = None) -> list[str]:
    """What is wrong with the registry (empty when every entry is consistent)."""
    problems: list[str] = []
    entries = list(VERBS if registry is None else registry)
    keys = [verb.key for verb in entries]
    for key in sorted({key for key in keys if keys.count(key) > 1}):
        problems.append(f"two verbs use the key {key!r}")
    routes = [(verb.kind, verb.name) for verb in entries]
    for kind, name in sorted({route for route in routes if routes.count(route) > 1}):
        problems.append(f"two {kind} verbs are named {name!r}")
    for verb in entries:
        if verb.grant not in GRANTS:
            problems.append(f"verb {verb.key!r} needs {verb.grant.codename!r}, missing from GRANTS")
        if verb.checked_as is not None and verb.checked_as not in keys:
            problems.append(f"verb {verb.key!r} is checked as an unknown verb {verb.checked_as!r}")
        if verb.key in OPERATIONS:
            problems.append(f"the key {verb.key!r} is the {verb.key} permission's")
        if verb.states is not None and verb.kind == JOB.kind and not verb.refusal:
            problems.append(f"job verb {verb.key!r} applies to some states but has no refusal")
    return problems
