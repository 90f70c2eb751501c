"""One Django Tasks backend, one mode, one run: prints one JSON line (bench/common.py's format).

    python -m bench.peers.django_tasks_driver --lib ours|rq|redis --mode enqueue|drain \\
        --redis-url URL --n N [--prefix P]

* ``enqueue``: ``noop.enqueue(payload)`` N times, sequentially (the Django Tasks API has no
  bulk enqueue).
* ``drain``: N tasks enqueued the same way (not timed), then the backend's own worker, in
  this process, from its start until the queue is empty (each lib's burst/one-shot mode).

On Django 5.2 ours runs from the project's venv; rq (django-tasks-rq) and redis
(django-tasks-redis) from bench/.venv-dtasks. django-tasks-redis is written for Django 6's
``django.tasks``; on Python 3.11 / Django 5.2 the driver aliases ``django.tasks`` to the
backport.  On Django 6.x (bench/.venv-dtasks-6.1) ours and django-tasks-redis use Django's own
``django.tasks``; django-tasks-rq is built on the backport only, so its task is declared with
the backport's ``@task`` (``BENCH_DTASKS_API=backport``, read by bench/peers/dtasks.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import sys
import types
from importlib.metadata import version
from typing import Any

from bench.common import Timer, emit, fail, payload, quiet_logging

MODES = ("enqueue", "drain")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=("ours", "rq", "redis"), required=True)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--stats", choices=("reset", "diff", "off"), default="reset")
    parser.add_argument("--prefetch", type=int, default=50, help="ours: jobs per claim")
    return parser.parse_args(argv)


def alias_django_tasks() -> None:
    """Make ``django.tasks`` the backport (django-tasks-redis imports the Django 6 name)."""
    import django
    import django_tasks
    import django_tasks.backends
    import django_tasks.backends.base
    import django_tasks.base
    import django_tasks.exceptions
    import django_tasks.signals
    import django_tasks.utils

    for name in ("", ".base", ".backends", ".backends.base", ".exceptions", ".signals", ".utils"):
        sys.modules["django.tasks" + name] = sys.modules["django_tasks" + name]
    django.tasks = django_tasks  # type: ignore[attr-defined]
    # The two other Django 6 names it uses: the exception's new name, and normalize_json's home.
    exceptions = django_tasks.exceptions
    exceptions.InvalidTaskBackend = exceptions.InvalidTaskBackendError  # type: ignore[attr-defined]
    utils_json = types.ModuleType("django.utils.json")
    utils_json.normalize_json = django_tasks.utils.normalize_json  # type: ignore[attr-defined]
    sys.modules["django.utils.json"] = utils_json


def native_tasks() -> bool:
    """Whether the running Django ships ``django.tasks`` (6.0 and later)."""
    return importlib.util.find_spec("django.tasks") is not None


def configure(args: argparse.Namespace) -> None:
    from django.conf import settings

    apps = ["django.contrib.contenttypes", "django.contrib.auth"]
    extra: dict[str, Any] = {}
    if args.lib == "ours":
        apps.append("mqadmin")
        tasks = {"BACKEND": "mqadmin.tasks.StoreBackend", "OPTIONS": {"STORE": "default"}}
        extra["MQ_STORES"] = {"default": {"prefix": args.prefix, "url": args.redis_url}}
    elif args.lib == "rq":
        apps.append("django_rq")
        tasks = {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]}
        extra["RQ_QUEUES"] = {"default": {"URL": args.redis_url}}
        if native_tasks():
            os.environ["BENCH_DTASKS_API"] = "backport"
    else:
        if not native_tasks():
            alias_django_tasks()
        apps.append("django_tasks_redis")
        tasks = {
            "BACKEND": "django_tasks_redis.backends.RedisTaskBackend",
            "OPTIONS": {"REDIS_URL": args.redis_url, "REDIS_KEY_PREFIX": args.prefix},
        }
    settings.configure(
        INSTALLED_APPS=apps,
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        TASKS={"default": tasks},
        USE_TZ=True,
        LOGGING_CONFIG=None,
        **extra,
    )
    import django

    django.setup()
    quiet_logging()


def drain(args: argparse.Namespace) -> tuple[str, str]:
    """Run the lib's worker until the queue is empty; returns (variant, api)."""
    if args.lib == "ours":
        from mqadmin import runtime
        from store.worker import Worker

        job_store = runtime.build_store("default")
        worker = Worker(
            job_store,
            burst=True,
            prefetch=args.prefetch,
            job_hooks=runtime.django_job_hooks(),
            resolver=runtime.tasks_resolver(job_store),
        )
        worker.run(install_signal_handlers=False)
        if worker.stats["completed"] != args.n:
            fail(f"ours: completed {worker.stats['completed']} of {args.n}: {worker.stats}")
        return (
            f"Worker(burst, prefetch={args.prefetch})",
            "runworker's Worker + the Django task resolver, in-process",
        )
    if args.lib == "rq":
        from django_tasks import default_task_backend
        from django_tasks_rq.backend import Job
        from rq import SimpleWorker

        queues = default_task_backend._get_queues()
        worker = SimpleWorker(queues, job_class=Job, connection=queues[0].connection)
        worker.work(burst=True, logging_level="WARNING")
        left = sum(q.count for q in queues)
        if left:
            fail(f"rq: {left} tasks left in the queue")
        return "SimpleWorker(burst)", "rq SimpleWorker.work(burst=True), the backend's Job class"
    from django.core.management import call_command

    out = io.StringIO()
    call_command("run_redis_tasks", stdout=out)
    if f"Processed {args.n} task(s)" not in out.getvalue():
        fail(f"redis: worker output: {out.getvalue()[-300:]}")
    return "run_redis_tasks (one-shot)", "manage.py run_redis_tasks (no --continuous), in-process"


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    configure(args)
    from bench.peers.dtasks import noop

    timer = Timer(args)
    n = args.n
    if args.mode == "enqueue":
        timer.start()
        for i in range(n):
            noop.enqueue(payload(i))
        timer.stop()
        variant, api = "enqueue", "noop.enqueue(payload) loop (Django Tasks API)"
    else:
        for i in range(n):
            noop.enqueue(payload(i))
        timer.start()
        variant, api = drain(args)
        timer.stop()
    import django

    package = {"ours": "mqadmin", "rq": "django-tasks-rq", "redis": "django-tasks-redis"}[args.lib]
    lib_version = f"{package} {version(package)}, Django {django.get_version()}"
    if args.lib == "rq" or not native_tasks():
        lib_version += f", django-tasks backport {version('django-tasks')}"
    emit(
        f"django-tasks/{args.lib}",
        args,
        timer,
        variant=variant,
        api=api,
        version=lib_version,
        django=django.get_version(),
    )


if __name__ == "__main__":
    main()
