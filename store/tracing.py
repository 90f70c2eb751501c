"""OpenTelemetry tracing, used only when ``opentelemetry-api`` is installed (extra ``otel``).

* Producer side: :func:`current_trace_context` is what ``Job.build_request`` stores
  in the job's ``trace`` field: the current span's trace id, span id and sampled
  flag, plus ``delayed`` (the job was scheduled for later).  No valid current span
  (or no OpenTelemetry): nothing is stored.
* Worker side: :func:`attempt_span` runs one attempt in a span named
  ``<job name>.run`` with attributes ``mq.job_id``, ``mq.job_name``, ``mq.queue`` and
  ``mq.attempt``.  How it attaches to the producer's trace follows the design's
  "auto" linking: a job enqueued to run now continues the producer's trace (the
  stored span is the remote parent); a delayed job starts its own trace with a
  span link to the producer (a backlog hours later should not stretch one trace).

Without the package both are no-ops: records and runs are exactly as before.  With
the API but no SDK tracer provider configured, the worker skips its spans (they could
record nothing); enqueue still records a valid current span's context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from store.records import JobRecord, TraceContext

try:  # pragma: no cover - exercised by the tests with and without the package
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover
    _otel_trace = None  # type: ignore[assignment]

TRACER_NAME = "mqadmin.store"
#: A TracerProvider for the worker's spans instead of the global one (None: global).
_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Send attempt spans to ``provider`` (an OpenTelemetry TracerProvider; None: the global one)."""
    global _provider
    _provider = provider


def enabled() -> bool:
    """Whether OpenTelemetry is importable (tracing can do anything at all)."""
    return _otel_trace is not None


def current_trace_context(delayed: bool = False) -> TraceContext | None:
    """The current span as a job's trace field, or None without a valid span."""
    if _otel_trace is None:
        return None
    context = _otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return TraceContext(
        trace_id=format(context.trace_id, "032x"),
        span_id=format(context.span_id, "016x"),
        sampled=bool(context.trace_flags & 0x01),
        delayed=bool(delayed),
    )


def _remote_context(trace: TraceContext | None) -> Any:
    if trace is None or _otel_trace is None:
        return None
    try:
        trace_id, span_id = int(trace.trace_id, 16), int(trace.span_id, 16)
    except (TypeError, ValueError):
        return None  # a foreign producer's ids that are not W3C hex: no edge
    context = _otel_trace.SpanContext(
        trace_id=trace_id,
        span_id=span_id,
        is_remote=True,
        trace_flags=_otel_trace.TraceFlags(0x01 if trace.sampled else 0x00),
    )
    return context if context.is_valid else None


def _tracer() -> Any:
    """The tracer of the configured provider; None while no SDK provider is set at all."""
    assert _otel_trace is not None
    provider = _provider if _provider is not None else _otel_trace.get_tracer_provider()
    if isinstance(provider, _otel_trace.ProxyTracerProvider):
        # The API alone, no SDK configured: every span would be a no-op, so skip the work.
        return None
    cached = _tracers.get(id(provider))
    if cached is None or cached[0] is not provider:
        cached = (provider, provider.get_tracer(TRACER_NAME))
        _tracers[id(provider)] = cached
    return cached[1]


_tracers: dict[int, tuple[Any, Any]] = {}


@contextlib.contextmanager
def attempt_span(job: JobRecord, attempt: int) -> Iterator[Any]:
    """Run one attempt of ``job`` inside its span (yields the span, or None without OTel)."""
    tracer = _tracer() if _otel_trace is not None else None
    if tracer is None:
        yield None
        return
    assert _otel_trace is not None
    remote = _remote_context(job.trace)
    parent = None
    links: list[Any] = []
    if remote is not None:
        if job.trace is not None and job.trace.delayed:
            links.append(_otel_trace.Link(remote))
            # A fresh root: not the worker's ambient context either.
            parent = _otel_trace.set_span_in_context(_otel_trace.INVALID_SPAN)
        else:
            parent = _otel_trace.set_span_in_context(_otel_trace.NonRecordingSpan(remote))
    with tracer.start_as_current_span(
        f"{job.name}.run",
        context=parent,
        kind=_otel_trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "mq.job_id": job.id,
            "mq.job_name": job.name,
            "mq.queue": job.queue,
            "mq.attempt": int(attempt),
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def finish_span(span: Any, outcome: str, error: BaseException | None = None) -> None:
    """Mark the attempt's span with its outcome (an error status for failed attempts)."""
    if span is None or _otel_trace is None:
        return
    span.set_attribute("mq.outcome", outcome)
    if error is not None and outcome in ("failed", "retried"):
        span.record_exception(error)
        span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))
