"""Worker metrics (prometheus-client), tracing (OpenTelemetry SDK, in-memory exporter),
and the worker's presence heartbeat."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from store import Claimed, EnqueueRequest, Job, JobRecord, Worker, system_clock, tracing
from store.worker_metrics import WorkerMetrics
from tests.runtime.harness import eventually, running, state_of


class Boom(Exception):
    pass


@pytest.fixture
def live_store(make_store: Any) -> Any:
    return make_store(clock=system_clock)


@pytest.fixture
def live_registry(live_store: Any) -> Any:
    from store import StoreRegistry

    reg = StoreRegistry()
    reg.register(live_store)
    return reg


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()


def value(registry: CollectorRegistry, sample: str, /, **labels: str) -> float:
    got = registry.get_sample_value(sample, labels)
    return 0.0 if got is None else got


# ---------------------------------------------------------------------- metrics


def test_worker_metrics_count_runs_by_outcome(live_store: Any, live_registry: Any) -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry=registry)
    calls = {"flaky": 0}

    def ok(payload: Any) -> str:
        return "fine"

    def bad(payload: Any) -> None:
        raise Boom("always")

    def flaky(payload: Any) -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise Boom("once")
        return "second time"

    jobs = [
        Job("Ok", handler=ok, registry=live_registry),
        Job("Bad", handler=bad, queue="side", registry=live_registry),
        Job("Flaky", handler=flaky, attempts=2, registry=live_registry),
    ]
    worker = Worker(live_store, jobs, registry=live_registry, metrics=metrics, poll_interval_ms=50)
    with running(worker):
        ids = [jobs[0].enqueue() for _ in range(3)] + [jobs[1].enqueue(), jobs[2].enqueue()]
        eventually(lambda: all(state_of(live_store, i) in ("completed", "failed") for i in ids))
        eventually(lambda: value(registry, "mq_jobs_in_flight", queue="default") == 0)

    hist = "mq_job_duration_seconds_count"
    assert value(registry, hist, name="Ok", queue="default", outcome="completed") == 3
    assert value(registry, hist, name="Bad", queue="side", outcome="failed") == 1
    assert value(registry, hist, name="Flaky", queue="default", outcome="retried") == 1
    assert value(registry, hist, name="Flaky", queue="default", outcome="completed") == 1
    assert value(registry, "mq_job_attempts_total", name="Ok", queue="default") == 3
    assert value(registry, "mq_job_attempts_total", name="Flaky", queue="default") == 2
    assert value(registry, "mq_job_attempts_total", name="Bad", queue="side") == 1
    # The +Inf bucket holds every run; the sum is real time (positive).
    assert (
        value(
            registry,
            "mq_job_duration_seconds_bucket",
            name="Ok",
            queue="default",
            outcome="completed",
            le="+Inf",
        )
        == 3
    )
    assert (
        value(
            registry, "mq_job_duration_seconds_sum", name="Ok", queue="default", outcome="completed"
        )
        > 0
    )
    assert value(registry, "mq_jobs_in_flight", queue="side") == 0
    assert value(registry, "mq_lock_lost_total") == 0


def test_in_flight_gauge_while_a_handler_runs(live_store: Any, live_registry: Any) -> None:
    import threading

    registry = CollectorRegistry()
    gate = threading.Event()

    def hold(payload: Any) -> None:
        gate.wait(5)

    job = Job("Hold", handler=hold, registry=live_registry)
    worker = Worker(
        live_store, [job], registry=live_registry, metrics=WorkerMetrics(registry), concurrency=2
    )
    with running(worker):
        job.enqueue()
        job.enqueue()
        eventually(lambda: value(registry, "mq_jobs_in_flight", queue="default") == 2)
        gate.set()
        eventually(lambda: value(registry, "mq_jobs_in_flight", queue="default") == 0)


def test_lock_lost_and_stalled_recovery_are_counted(live_store: Any, live_registry: Any) -> None:
    import threading

    registry = CollectorRegistry()
    gate = threading.Event()

    def hold(payload: Any) -> None:
        gate.wait(5)

    job = Job("Hold", handler=hold, registry=live_registry)
    # A stalled job of a dead worker: claimed with a lock that has already expired.
    stale_id = live_store.enqueue(EnqueueRequest(name="Gone", queue="old")).id
    claimed = live_store.claim(queue="old", names=["Gone"], token="dead:1", lock_duration_ms=1)
    assert isinstance(claimed, Claimed)
    worker = Worker(
        live_store,
        [job],
        registry=live_registry,
        metrics=WorkerMetrics(registry),
        lock_duration_ms=2_000,
        lock_renew_interval_ms=100,
        stalled_interval_ms=100,
    )
    with running(worker):
        held_id = job.enqueue()
        eventually(lambda: state_of(live_store, held_id) == "active")
        # Someone else takes the lock over (as stall recovery elsewhere would).
        live_store.client.hset(live_store.keys.job(held_id), "lock_token", "thief:1")
        eventually(lambda: value(registry, "mq_lock_lost_total") == 1)
        eventually(lambda: value(registry, "mq_stalled_recovered_total", outcome="requeued") >= 1)
        gate.set()
    assert state_of(live_store, stale_id) in ("waiting", "failed")


# ---------------------------------------------------------------------- presence


def test_a_running_worker_announces_itself(live_store: Any, live_registry: Any) -> None:
    job = Job("Ok", handler=lambda p: None, registry=live_registry)
    worker = Worker(live_store, [job], registry=live_registry, worker_id="w-presence")
    with running(worker):
        live = eventually(lambda: live_store.live_workers())
        assert [w.worker_id for w in live] == ["w-presence"]
        assert live[0].host == socket.gethostname()
        assert live[0].queues == {"default": ["Ok"]}
    # A clean stop says goodbye.
    assert live_store.live_workers() == []


# ---------------------------------------------------------------------- tracing


def test_a_trace_continues_from_enqueue_into_the_worker(
    live_store: Any, live_registry: Any, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=TracerProvider())
    seen: dict[str, Any] = {}

    def handler(payload: Any) -> None:
        seen["span"] = trace.get_current_span().get_span_context()

    job = Job("Traced", handler=handler, registry=live_registry)
    with tracer.start_as_current_span("request") as producer:
        job_id = job.enqueue({"x": 1})
        producer_ctx = producer.get_span_context()
    record = live_store.get_job(job_id)
    assert record.trace is not None
    assert record.trace.trace_id == format(producer_ctx.trace_id, "032x")
    assert record.trace.span_id == format(producer_ctx.span_id, "016x")
    assert record.trace.sampled is True and record.trace.delayed is False

    with running(Worker(live_store, [job], registry=live_registry)):
        eventually(lambda: state_of(live_store, job_id) == "completed")

    (span,) = [s for s in spans.get_finished_spans() if s.name == "Traced.run"]
    assert span.context.trace_id == producer_ctx.trace_id
    assert span.parent is not None and span.parent.span_id == producer_ctx.span_id
    assert span.kind == trace.SpanKind.CONSUMER
    assert dict(span.attributes) == {
        "mq.job_id": job_id,
        "mq.job_name": "Traced",
        "mq.queue": "default",
        "mq.attempt": 1,
        "mq.outcome": "completed",
    }
    # The handler (a thread-pool function) ran inside the attempt's span.
    assert seen["span"].span_id == span.context.span_id


def test_every_attempt_gets_its_span_and_failures_are_marked(
    live_store: Any, live_registry: Any, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=TracerProvider())

    async def always(payload: Any) -> None:
        raise Boom("nope")

    job = Job("Failing", handler=always, attempts=2, registry=live_registry)
    with tracer.start_as_current_span("request") as producer:
        job_id = job.enqueue()
    with running(Worker(live_store, [job], registry=live_registry)):
        eventually(lambda: state_of(live_store, job_id) == "failed")
    runs = sorted(
        (s for s in spans.get_finished_spans() if s.name == "Failing.run"),
        key=lambda s: s.attributes["mq.attempt"],
    )
    assert [s.attributes["mq.attempt"] for s in runs] == [1, 2]
    assert [s.attributes["mq.outcome"] for s in runs] == ["retried", "failed"]
    assert all(s.context.trace_id == producer.get_span_context().trace_id for s in runs)
    assert all(s.status.status_code == trace.StatusCode.ERROR for s in runs)
    assert all(any(e.name == "exception" for e in s.events) for s in runs)


def test_a_delayed_job_starts_its_own_trace_linked_to_the_producer(
    live_store: Any, live_registry: Any, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=TracerProvider())
    job = Job("Later", handler=lambda p: None, registry=live_registry)
    with tracer.start_as_current_span("request") as producer:
        job_id = job.enqueue(delay_ms=50)
    assert live_store.get_job(job_id).trace.delayed is True
    with running(Worker(live_store, [job], registry=live_registry, poll_interval_ms=50)):
        eventually(lambda: state_of(live_store, job_id) == "completed")
    (span,) = [s for s in spans.get_finished_spans() if s.name == "Later.run"]
    producer_ctx = producer.get_span_context()
    assert span.context.trace_id != producer_ctx.trace_id
    assert span.parent is None
    assert [link.context.span_id for link in span.links] == [producer_ctx.span_id]


def test_without_a_current_span_nothing_is_recorded(live_store: Any, live_registry: Any) -> None:
    job = Job("Plain", handler=lambda p: None, registry=live_registry)
    assert live_store.get_job(job.enqueue()).trace is None


def test_without_opentelemetry_nothing_changes(
    live_store: Any, live_registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer = trace.get_tracer("test", tracer_provider=TracerProvider())
    monkeypatch.setattr(tracing, "_otel_trace", None)
    job = Job("NoOtel", handler=lambda p: "done", registry=live_registry)
    with tracer.start_as_current_span("request"):
        job_id = job.enqueue()
    record: JobRecord = live_store.get_job(job_id)
    assert record.trace is None
    with running(Worker(live_store, [job], registry=live_registry)):
        eventually(lambda: state_of(live_store, job_id) == "completed")
    assert live_store.get_job(job_id).exit == "done"


def test_the_store_imports_without_opentelemetry_installed() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import store, store.worker, store.tracing\n"
        "assert not store.tracing.enabled()\n"
        "assert store.tracing.current_trace_context() is None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_with_the_api_but_no_sdk_provider_attempts_make_no_span(live_store: Any) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    job_id = live_store.enqueue(EnqueueRequest(name="X")).id
    with tracing.attempt_span(live_store.get_job(job_id), 1) as span:
        assert span is None


def test_a_fan_out_run_is_labelled_fanned_out(live_store: Any, live_registry: Any) -> None:
    from store import Flow, children

    registry = CollectorRegistry()
    parent = Job("MetricsParent", attempts=1, registry=live_registry)
    child = Job("MetricsChild", handler=lambda p: p["i"], registry=live_registry)
    flow = Flow("metrics-flow", parent=parent, children=[child])
    flow.fan_out(lambda payload: children(child, [(f"c{i}", {"i": i}) for i in range(3)]))
    flow.collect(lambda payload, results: results.counts.completed)
    worker = Worker(
        live_store,
        [parent, child],
        registry=live_registry,
        metrics=WorkerMetrics(registry),
        poll_interval_ms=50,
        flow_sweep_interval_ms=200,
    )
    with running(worker):
        job_id = parent.enqueue({})
        eventually(lambda: state_of(live_store, job_id) == "completed", timeout=15)
    count = "mq_job_duration_seconds_count"
    assert value(registry, count, name="MetricsParent", queue="default", outcome="fanned-out") == 1
    assert value(registry, count, name="MetricsParent", queue="default", outcome="completed") == 1
    assert value(registry, count, name="MetricsChild", queue="default", outcome="completed") == 3
    assert live_store.get_job(job_id).exit == 3
