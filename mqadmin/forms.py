"""Forms that validate every query string and every action the dashboard accepts.

A view never reads ``request.GET`` / ``request.POST`` directly: it binds one of these
forms and answers 400 with the form's messages when it is invalid.  Store names
are checked against ``MQ_STORES``; cursors against the store's cursor format.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.http import url_has_allowed_host_and_scheme

from mqadmin import actions, services
from mqadmin.queries.explorer import ORDER_CHOICES, STATES, JobQuery, auto_order
from mqadmin.queries.flows import FLOW_LIST_STATES
from mqadmin.queries.operations import FAILURE_SORTS, FAILURE_WINDOW_LABELS, FailureFilters
from mqadmin.queries.queue import SWEEP_STATES
from mqadmin.search import MAX_SEARCH, PAYLOAD_SEARCH_DENIED, Search, parse_search
from store.errors import InvalidCursorError
from store.listing import parse_cursor

#: Longest free-text value accepted (job ids, queue and job names, metadata).
MAX_TEXT = 1000
#: Page sizes the explorer offers; any value from 1 to MAX_LIMIT is accepted.
PAGE_SIZES = (20, 50, 100, 200)
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Metadata pairs one filter may hold.
MAX_METADATA_PAIRS = 10
#: Ids one "selected rows" bulk request may carry (a page holds at most MAX_LIMIT rows).
MAX_SELECTED = 500
#: Earlier child-page cursors a flow page keeps for its "previous" link.
MAX_FLOW_TRAIL = 20

#: Why a metadata filter is refused to a user who may not see metadata values.
METADATA_FILTER_DENIED = (
    "Filtering by metadata values needs the “view_payload” permission: metadata values are "
    "hidden from you, and the jobs a filter matches would reveal them."
)


def job_verb_choices() -> list[tuple[str, str]]:
    """The verbs a bulk run may apply (read from the registry per form: see ``mqadmin.actions``)."""
    return actions.bulk_choices()


def store_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in services.configured_stores()]


class StoreField(forms.ChoiceField):
    """A configured store name (choices are read per request: settings may change)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("error_messages", {})
        kwargs["error_messages"].setdefault(
            "invalid_choice", "There is no store named “%(value)s” in MQ_STORES."
        )
        super().__init__(choices=store_choices, **kwargs)


class MultiValueTextInput(forms.TextInput):
    """A text input whose name may repeat in the query string (``meta=a=1&meta=b=2``)."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        getter = getattr(data, "getlist", None)
        if getter is not None:
            return list(getter(name))
        value = data.get(name)
        return [] if value is None else [value]


class MultiValueHidden(forms.MultipleHiddenInput):
    pass


class MetadataField(forms.Field):
    """``key=value`` pairs (repeatable); blank entries are ignored; AND semantics."""

    widget = MultiValueTextInput

    def to_python(self, value: Any) -> dict[str, str]:
        if not value:
            return {}
        if isinstance(value, str):
            value = [value]
        pairs: dict[str, str] = {}
        for raw in value:
            text = str(raw).strip()
            if not text:
                continue
            if len(text) > MAX_TEXT:
                raise ValidationError(
                    "A metadata filter is longer than %(max)s characters.", params={"max": MAX_TEXT}
                )
            key, sep, val = text.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValidationError(
                    "Metadata filter “%(text)s” must look like key=value.",
                    params={"text": text[:80]},
                )
            if "\0" in text:
                raise ValidationError("Metadata filters cannot contain NUL characters.")
            if key in pairs and pairs[key] != val:
                raise ValidationError(
                    "Metadata key “%(key)s” is given twice with different values (filters are ANDed).",
                    params={"key": key[:80]},
                )
            pairs[key] = val
        if len(pairs) > MAX_METADATA_PAIRS:
            raise ValidationError(
                "At most %(n)s metadata filters.", params={"n": MAX_METADATA_PAIRS}
            )
        return pairs


class CursorField(forms.CharField):
    """A list cursor as the store issues them: ``<order value>:<job id>``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", MAX_TEXT + 20)
        kwargs.setdefault("strip", False)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> str | None:
        text = super().clean(value)
        if not text:
            return None

        try:
            parse_cursor(text)
        except InvalidCursorError as exc:
            raise ValidationError(
                "Malformed cursor: expected “<time>:<job id>” as issued by a previous page "
                "(%(detail)s).",
                params={"detail": str(exc)[:160]},
            ) from None
        return text


def _plain_text(value: str, label: str) -> str:
    if "\0" in value:
        raise ValidationError(f"The {label} cannot contain NUL characters.")
    return value


def queue_name_problems(queue: str) -> list[str]:
    """What is wrong with a queue name taken from a URL path (empty when nothing)."""
    if len(queue) > MAX_TEXT:
        return [f"A queue name is at most {MAX_TEXT} characters."]
    if "\0" in queue:
        return ["The queue cannot contain NUL characters."]
    return []


class JobFilterForm(forms.Form):
    """The explorer's query string: filters, order, page size and position."""

    store = StoreField(required=False)
    queue = forms.CharField(required=False, max_length=MAX_TEXT)
    name = forms.CharField(required=False, max_length=MAX_TEXT)
    state = forms.MultipleChoiceField(
        required=False,
        choices=[(state, state) for state in STATES],
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": "“%(value)s” is not a job state (states: " + ", ".join(STATES) + ").",
        },
    )
    meta = MetadataField(required=False)
    order_by = forms.ChoiceField(
        required=False,
        choices=list(ORDER_CHOICES.items()),
        error_messages={
            "invalid_choice": "“%(value)s” is not an order (use auto, enqueued_at, run_at, "
            "finished_at or position)."
        },
    )
    order = forms.ChoiceField(
        required=False,
        choices=[("desc", "newest first"), ("asc", "oldest first")],
        error_messages={"invalid_choice": "“%(value)s” is not a direction (use desc or asc)."},
    )
    limit = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_LIMIT,
        error_messages={
            "invalid": "The page size must be a whole number.",
            "min_value": "The page size must be at least %(limit_value)s.",
            "max_value": "The page size can be at most %(limit_value)s.",
        },
    )
    cursor = CursorField()
    before = CursorField()
    error = forms.RegexField(
        required=False,
        regex=r"^[0-9a-f]{16}$",
        error_messages={
            "invalid": "“error” must be an error group id (16 hex digits); to find failures "
            "by their error text, search for error:<text>."
        },
    )
    #: The search box (mqadmin/search.py): ids, error:, args.<path>:, meta.<key>: terms.
    q = forms.CharField(required=False, max_length=MAX_SEARCH, strip=True)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Who asks: metadata-value filters need the view payload permission (None: not checked).
        self.user = user

    def clean_meta(self) -> dict[str, str]:
        pairs: dict[str, str] = self.cleaned_data.get("meta") or {}
        if pairs and self.user is not None:
            from mqadmin import permissions

            if not permissions.can_view_payload(self.user):
                # Which jobs match would tell whether a guessed (hidden) value is right.
                raise ValidationError(METADATA_FILTER_DENIED)
        return pairs

    def clean_q(self) -> Search:
        search = parse_search(_plain_text(self.cleaned_data["q"], "search"))
        if (search.payload or search.metadata) and self.user is not None:
            from mqadmin import permissions

            if not permissions.can_view_payload(self.user):
                raise ValidationError(PAYLOAD_SEARCH_DENIED)
        return search

    def clean_queue(self) -> str:
        return _plain_text(self.cleaned_data["queue"], "queue")

    def clean_name(self) -> str:
        return _plain_text(self.cleaned_data["name"], "job name")

    def clean(self) -> dict[str, Any]:
        super().clean()  # Form.clean() only hands back cleaned_data
        data = self.cleaned_data
        if data.get("cursor") and data.get("before"):
            raise ValidationError(
                "Give either cursor (next pages) or before (previous pages), not both."
            )
        return data

    def to_query(self, default_store: str) -> JobQuery:
        data = self.cleaned_data
        states = data.get("state") or None
        state_tuple = tuple(s for s in STATES if s in states) if states else None
        error = data.get("error") or None
        if error and state_tuple is None:
            state_tuple = ("failed",)  # an error filter lists failed jobs
        requested = data.get("order_by") or "auto"
        search: Search = data.get("q") or Search()
        return JobQuery(
            store=data.get("store") or default_store,
            queue=data.get("queue") or None,
            name=data.get("name") or None,
            states=state_tuple,
            metadata=data.get("meta") or {},
            order_by=auto_order(state_tuple) if requested == "auto" else requested,
            order_auto=requested == "auto",
            error=error,
            order=data.get("order") or "desc",
            limit=data.get("limit") or DEFAULT_LIMIT,
            cursor=data.get("cursor"),
            before=data.get("before"),
            search=search.text,
            payload=search.payload,
            search_metadata=search.metadata,
            id_prefix=search.id_text or None,
            error_text=search.error_text or None,
        )


def query_string(query: JobQuery, **overrides: Any) -> str:
    """The explorer's query string for ``query`` (a permalink), with fields replaced."""
    from django.http import QueryDict

    params = QueryDict(mutable=True)
    values: dict[str, Any] = {
        "store": query.store,
        "queue": query.queue,
        "name": query.name,
        "state": list(query.states) if query.states else None,
        "meta": [f"{key}={value}" for key, value in query.metadata.items()] or None,
        "order_by": None if query.order_auto else query.order_by,
        "order": query.order if query.order != "desc" else None,
        "limit": query.limit if query.limit != DEFAULT_LIMIT else None,
        "cursor": query.cursor,
        "before": query.before,
        "error": query.error,
        "q": query.search or None,
    }
    values.update(overrides)
    for key, value in values.items():
        if value is None or value == "":
            continue
        if isinstance(value, list | tuple):
            params.setlist(key, [str(v) for v in value])
        else:
            params[key] = str(value)
    return params.urlencode()


class JobLookupForm(forms.Form):
    store = StoreField()
    id = forms.CharField(max_length=MAX_TEXT, strip=True)

    def clean_id(self) -> str:
        return _plain_text(self.cleaned_data["id"], "job id")


class NextField(forms.CharField):
    """Where to go after an action: a local path only (never an open redirect)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 4000)
        super().__init__(**kwargs)

    def clean(self, value: Any) -> str:
        text = super().clean(value)
        if not text:
            return ""
        if not text.startswith("/") or not url_has_allowed_host_and_scheme(
            text, allowed_hosts=None
        ):
            raise ValidationError("“next” must be a path on this site.")
        return text


class JobActionForm(forms.Form):
    store = StoreField()
    job_id = forms.CharField(max_length=MAX_TEXT, strip=False)
    next = NextField()
    #: The explorer page (with its filter) the job was opened from: where a removal returns.
    back = NextField()


class QueueActionForm(forms.Form):
    store = StoreField()
    queue = forms.CharField(max_length=MAX_TEXT, strip=False)
    next = NextField()

    def clean_queue(self) -> str:
        return _plain_text(self.cleaned_data["queue"], "queue")


class ScheduleActionForm(forms.Form):
    store = StoreField()
    key = forms.CharField(max_length=MAX_TEXT, strip=False)
    next = NextField()


class WorkerActionForm(forms.Form):
    store = StoreField()
    worker_id = forms.CharField(max_length=200, strip=False)
    next = NextField()

    def clean_worker_id(self) -> str:
        return _plain_text(self.cleaned_data["worker_id"], "worker id")


#: The form of each target kind's actions (a verb's extra fields are added to it).
ACTION_FORMS: dict[str, type[forms.Form]] = {
    actions.JOB.kind: JobActionForm,
    actions.QUEUE.kind: QueueActionForm,
    actions.SCHEDULE.kind: ScheduleActionForm,
    actions.WORKER.kind: WorkerActionForm,
}


def action_form_class(verb: actions.Verb) -> type[forms.Form]:
    """The form a POST of ``verb`` binds: its target kind's form plus the verb's extra fields."""
    base = ACTION_FORMS[verb.kind]
    if not verb.fields:
        return base
    extra = {name: make() for name, make in verb.fields.items()}
    return type(f"{verb.key.title().replace('_', '')}ActionForm", (base,), extra)


class MultiIdField(forms.Field):
    widget = MultiValueHidden

    def to_python(self, value: Any) -> list[str]:
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        ids = list(dict.fromkeys(str(v) for v in value if str(v)))
        for job_id in ids:
            if len(job_id) > MAX_TEXT or "\0" in job_id:
                raise ValidationError("A job id is too long or contains NUL.")
        return ids

    def validate(self, value: list[str]) -> None:
        super().validate(value)
        if len(value) > MAX_SELECTED:
            raise ValidationError(
                "At most %(n)s jobs can be selected at once; use “all matching this filter”.",
                params={"n": MAX_SELECTED},
            )


class BulkSelectedForm(forms.Form):
    """Rows ticked in the explorer, and the verb to apply to them."""

    store = StoreField()
    verb = forms.ChoiceField(choices=job_verb_choices)
    ids = MultiIdField(required=True, error_messages={"required": "Select at least one job first."})
    next = NextField()


class BulkFilterForm(JobFilterForm):
    """An explorer filter plus the verb to apply to every match (and where to resume).

    The verb may be left out of a preview: it then says what each verb would do.
    """

    verb = forms.ChoiceField(choices=job_verb_choices, required=False)
    resume = CursorField()
    #: The audit entry of the run's previous request (progress adds up over "continue").
    run = forms.IntegerField(required=False, min_value=1)
    #: How many jobs the preview counted (the progress bar's whole).
    expected = forms.IntegerField(required=False, min_value=0)

    def to_query(self, default_store: str) -> JobQuery:
        query = super().to_query(default_store)
        # A bulk run always covers the whole filter, whatever page it was started from.
        return JobQuery(**{**query.__dict__, "cursor": None, "before": None})


#: An age as the clean form takes it: a number and a unit (minutes, hours, days).
AGE_UNITS_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_AGE_DAYS = 3650


def parse_age(text: str) -> int:
    """``"90m"``, ``"12h"``, ``"7d"`` -> milliseconds (ValueError when it is none of those)."""
    cleaned = text.strip().lower().replace(" ", "")
    number, unit = cleaned[:-1], cleaned[-1:]
    if unit not in AGE_UNITS_MS or not number.isdigit() or not 0 < int(number) <= 10**6:
        raise ValueError(text)
    return min(int(number) * AGE_UNITS_MS[unit], MAX_AGE_DAYS * AGE_UNITS_MS["d"])


class QueueSweepForm(forms.Form):
    """Drain or clean one queue: which states, an age for a clean, and where a run resumes.

    ``finished_before`` is the clean's cut-off in epoch ms, fixed by the preview from
    ``older_than`` so that every request of one run removes the same jobs.
    """

    store = StoreField()
    queue = forms.CharField(max_length=MAX_TEXT, strip=False)
    sweep = forms.ChoiceField(
        choices=[("drain", "drain"), ("clean", "clean")],
        error_messages={"invalid_choice": "“%(value)s” is not a sweep (use drain or clean)."},
    )
    state = forms.MultipleChoiceField(
        required=False,
        choices=[(state, state) for state in STATES],
        error_messages={"invalid_choice": "“%(value)s” is not a job state."},
    )
    older_than = forms.CharField(required=False, max_length=20)
    finished_before = forms.IntegerField(required=False, min_value=0)
    resume = CursorField()
    run = forms.IntegerField(required=False, min_value=1)
    expected = forms.IntegerField(required=False, min_value=0)

    def clean_queue(self) -> str:
        queue = str(self.cleaned_data["queue"])
        problems = queue_name_problems(queue)
        if problems:
            raise ValidationError(problems[0])
        return queue

    def clean_older_than(self) -> int | None:
        text = self.cleaned_data.get("older_than") or ""
        if not text.strip():
            return None
        try:
            return parse_age(text)
        except ValueError:
            raise ValidationError(
                "“%(text)s” is not an age: give a number and m, h or d (90m, 12h, 7d).",
                params={"text": text[:20]},
            ) from None

    def clean(self) -> dict[str, Any]:
        super().clean()  # Form.clean() only hands back cleaned_data
        data = self.cleaned_data
        sweep = data.get("sweep")
        allowed = SWEEP_STATES.get(str(sweep), ())
        states = data.get("state") or list(allowed)
        wrong = [state for state in states if state not in allowed]
        if sweep and wrong:
            self.add_error(
                "state",
                f"A {sweep} removes only {' and '.join(allowed)} jobs, not {', '.join(wrong)}.",
            )
        data["state"] = [state for state in allowed if state in states]
        if sweep == "drain" and (data.get("older_than") or data.get("finished_before")):
            self.add_error("older_than", "Only a clean takes an age (a drain removes every job).")
        return data


class FlowPageForm(forms.Form):
    """Position in a flow's children: the last child key seen, and the earlier pages' keys."""

    cursor = forms.CharField(required=False, max_length=MAX_TEXT, strip=False)
    trail = forms.Field(required=False, widget=MultiValueTextInput)
    embed = forms.BooleanField(required=False)

    def clean_cursor(self) -> str | None:
        value = self.cleaned_data.get("cursor") or None
        if value is not None:
            _plain_text(value, "cursor")
        return value

    def clean_trail(self) -> list[str]:
        value = self.cleaned_data.get("trail") or []
        if len(value) > MAX_FLOW_TRAIL:
            raise ValidationError(
                "Too many earlier pages in “trail” (at most %(n)s).", params={"n": MAX_FLOW_TRAIL}
            )
        for item in value:
            if len(item) > MAX_TEXT or "\0" in item:
                raise ValidationError("A “trail” entry is too long or contains NUL.")
        return list(value)


class FlowListForm(forms.Form):
    """The flows page's query string: which store, waiting or settled parents, which page."""

    store = StoreField(required=False)
    state = forms.ChoiceField(
        required=False,
        choices=list(FLOW_LIST_STATES.items()),
        error_messages={
            "invalid_choice": "“%(value)s” is not a flow state (use waiting or settled)."
        },
    )
    cursor = forms.CharField(required=False, max_length=MAX_TEXT, strip=False)

    def clean_state(self) -> str:
        return self.cleaned_data.get("state") or "waiting"

    def clean_cursor(self) -> str | None:
        value = self.cleaned_data.get("cursor") or None
        if value is not None:
            _plain_text(value, "cursor")
        return value


class OutboxPageForm(forms.Form):
    store = StoreField(required=False)
    after = forms.IntegerField(
        required=False,
        min_value=0,
        error_messages={"invalid": "“after” must be an outbox entry number."},
    )


class FailuresForm(forms.Form):
    """The failures page's query string: store, order and filters over the error groups."""

    store = StoreField(required=False)
    sort = forms.ChoiceField(
        required=False,
        choices=list(FAILURE_SORTS.items()),
        error_messages={
            "invalid_choice": "“%(value)s” is not a sort (use last_seen, count or first_seen)."
        },
    )
    order = forms.ChoiceField(
        required=False,
        choices=[("desc", "descending"), ("asc", "ascending")],
        error_messages={"invalid_choice": "“%(value)s” is not a direction (use desc or asc)."},
    )
    queue = forms.CharField(required=False, max_length=MAX_TEXT)
    name = forms.CharField(required=False, max_length=MAX_TEXT)
    window = forms.ChoiceField(
        required=False,
        choices=list(FAILURE_WINDOW_LABELS.items()),
        error_messages={
            "invalid_choice": "“%(value)s” is not a time window (use 1h, 24h, 7d or all)."
        },
    )

    def clean_queue(self) -> str:
        return _plain_text(self.cleaned_data["queue"], "queue")

    def clean_name(self) -> str:
        return _plain_text(self.cleaned_data["name"], "job name")

    def to_filters(self, store: str) -> FailureFilters:
        data = self.cleaned_data
        return FailureFilters(
            store=store,
            sort=data.get("sort") or "last_seen",
            order=data.get("order") or "desc",
            queue=data.get("queue") or "",
            name=data.get("name") or "",
            window=data.get("window") or "all",
        )


class AuditFilterForm(forms.Form):
    before = forms.IntegerField(
        required=False, min_value=1, error_messages={"invalid": "“before” must be an entry number."}
    )
    action = forms.CharField(required=False, max_length=40)
    user = forms.CharField(required=False, max_length=150)
    store = forms.CharField(required=False, max_length=200)
    outcome = forms.ChoiceField(
        required=False,
        choices=[("", "any"), ("ok", "succeeded"), ("failed", "failed")],
        error_messages={"invalid_choice": "“%(value)s” is not an outcome (use ok or failed)."},
    )


class LogPageForm(forms.Form):
    """Where a page of a job's log lines starts (``?start=``, 0 for the oldest line)."""

    start = forms.IntegerField(required=False, min_value=0, max_value=10**9)


class EventStreamForm(forms.Form):
    """The live event stream's query string (``views/events.py``): which stores, and
    optionally one queue or one job of a single store, from which position."""

    store = forms.MultipleChoiceField(choices=store_choices, required=False)
    queue = forms.CharField(required=False, max_length=MAX_TEXT, strip=False)
    job = forms.CharField(required=False, max_length=MAX_TEXT, strip=False)
    after = forms.CharField(required=False, max_length=4000, strip=True)

    def clean_queue(self) -> str | None:
        return self.cleaned_data["queue"] or None

    def clean_job(self) -> str | None:
        return self.cleaned_data["job"] or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        stores = data.get("store") or [name for name, _ in store_choices()]
        data["store"] = list(dict.fromkeys(stores))
        if (data.get("queue") or data.get("job")) and len(data["store"]) != 1:
            raise ValidationError("A queue or a job is followed in exactly one store.")
        if data.get("queue") and data.get("job"):
            raise ValidationError("Follow a queue or a job, not both.")
        if not data["store"]:
            raise ValidationError("No store is configured (MQ_STORES).")
        return data


def form_errors(form: forms.Form) -> list[str]:
    """Every message of an invalid form, prefixed with its field's name."""
    messages: list[str] = []
    for field_name, errors in form.errors.items():
        label = "" if field_name == "__all__" else f"{field_name}: "
        messages.extend(f"{label}{error}" for error in errors)
    return messages
