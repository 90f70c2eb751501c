"""The steps of docs/django-tasks.md ("Django Tasks backend"), followed in a fresh project, in real processes.

A host project with its own settings (the page's TASKS block) and an app with a task:
one process enqueues, ``runworker --burst`` runs it, a third process reads the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import django
import pytest

# docs/django.md: Django 6 has template partials and the Tasks framework built in; on Django 5.2
# they come from the django-template-partials and django-tasks packages (their apps).
DJANGO_6 = django.VERSION >= (6, 0)
DJANGO52_APPS = "" if DJANGO_6 else '"template_partials", "django_tasks",'
TASKS_IMPORT = "django.tasks" if DJANGO_6 else "django_tasks"

REPO = Path(__file__).resolve().parents[2]

SETTINGS = """
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "test-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_htmx",
    "mqadmin",
    "shop",
    @django52_apps@
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "hostproj.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}}
MQ_STORES = {"default": {"prefix": "@prefix@", "url": "@redis_url@"}}
TASKS = {
    "default": {
        "BACKEND": "mqadmin.tasks.StoreBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"STORE": "default", "ATTEMPTS": 3},
    }
}
"""

TASKS_MODULE = """
from @tasks_module@ import task


@task(queue_name="emails", priority=10)
def send_welcome(user_id: int) -> str:
    return f"sent to {user_id}"
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def run(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "hostproj.settings"
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, *argv], cwd=project, env=env, capture_output=True, text=True, timeout=90
    )


def test_readme_steps_in_a_host_project(tmp_path: Path, redis_url: str, prefix: str) -> None:
    project = tmp_path / "site"
    write(project / "hostproj" / "__init__.py", "")
    write(
        project / "hostproj" / "settings.py",
        SETTINGS.replace("@redis_url@", redis_url)
        .replace("@prefix@", prefix)
        .replace("@django52_apps@", DJANGO52_APPS),
    )
    write(
        project / "hostproj" / "urls.py",
        "urlpatterns = []  # the tasks backend and the worker need no URLs\n",
    )
    write(project / "shop" / "__init__.py", "")
    write(project / "shop" / "tasks.py", TASKS_MODULE.replace("@tasks_module@", TASKS_IMPORT))

    checked = run(project, "-m", "django", "check")
    assert "mqadmin.E201" not in checked.stdout + checked.stderr

    enqueue = run(
        project,
        "-c",
        "import django, json; django.setup()\n"
        "from shop.tasks import send_welcome\n"
        "r = send_welcome.enqueue(7)\n"
        "print(json.dumps({'id': r.id, 'status': str(r.status)}))",
    )
    assert enqueue.returncode == 0, enqueue.stderr
    enqueued = json.loads(enqueue.stdout.strip().splitlines()[-1])
    assert enqueued["status"] == "READY"

    worker = run(project, "-m", "django", "runworker", "--burst", "--poll-interval-ms", "200")
    assert worker.returncode == 0, worker.stderr
    assert "Django tasks: serving queues default, emails" in worker.stdout
    assert "'completed': 1" in worker.stdout

    read = run(
        project,
        "-c",
        "import django, json; django.setup()\n"
        "from shop.tasks import send_welcome\n"
        f"r = send_welcome.get_result({enqueued['id']!r})\n"
        "print(json.dumps({'status': str(r.status), 'value': r.return_value,"
        " 'queue': r.task.queue_name, 'priority': r.task.priority, 'attempts': r.attempts}))",
    )
    assert read.returncode == 0, read.stderr
    got: dict[str, Any] = json.loads(read.stdout.strip().splitlines()[-1])
    assert got == {
        "status": "SUCCESSFUL",
        "value": "sent to 7",
        "queue": "emails",
        "priority": 10,
        "attempts": 1,
    }


pytestmark = pytest.mark.timeout(300)
