#!/usr/bin/env bash
# The built wheel, installed into a fresh virtualenv, inside a brand-new Django project.
#
# Follows docs/django.md ("Add mqadmin to an existing Django project") and docs/django-tasks.md
# word for word: their snippets marked `<!-- snippet: NAME -->` are taken from those pages and
# appended to the new project's files as they stand, the ones for the Django release installed.
#   1. build the wheel from this checkout and `pip install` it into a new virtualenv (nothing
#      of this checkout is on its path): on Django 6 alone (no backport may come with it on
#      Python 3.12+), on Django 5.2 with the `django52` extra;
#   2. `django-admin startproject hostsite`, the pages' lines appended to its settings.py
#      and urls.py, and a `shop` app (`manage.py startapp`) holding a job and two tasks;
#   3. `manage.py check --fail-level WARNING` (the app's system checks must pass),
#      `migrate`, the dashboard under /ops/mq/ through Django's test client (templates and
#      static files from the wheel, anonymous visitors sent to LOGIN_URL, the admin's login);
#   4. end to end: Django tasks (`from django.tasks import task` on Django 6; a task with
#      `@task(attempts=2, ...)` on 6.1 and 5.2, a second TASKS alias on 6.0, failing its
#      first run) and a plain mqadmin job, enqueued from Django code, run by
#      `manage.py runworker --burst`, their results read back through the Tasks API
#      (status, return_value, errors, attempts, timestamps, worker_ids) and the store, and
#      shown by the dashboard.
# The project's embedded Redis (no MQ_* setting: <BASE_DIR>/var/redis) is stopped at the end.
#
# Environment (the matrix, .ci/noxfile.py, sets them per combination):
#   MQ_BUILD_PYTHON    builds the wheel (needs `build` and hatchling; default .venv/bin/python)
#   MQ_PROJECT_PYTHON  the new project's interpreter (default: MQ_BUILD_PYTHON)
#   MQ_DJANGO          a requirement for Django, e.g. "Django>=6.1,<6.2" (default: what pip
#                      picks for mqadmin alone, the newest supported release)
# Takes well under a minute when the packages come from a local cache or index.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
PY="${MQ_BUILD_PYTHON:-$ROOT/.venv/bin/python}"
PROJECT_PY="${MQ_PROJECT_PYTHON:-$PY}"
DJANGO_REQ="${MQ_DJANGO:-}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mq-wheel-project.XXXXXX")"
SITE="$WORK/hostsite"
cleanup() {
  if [ -x "$WORK/venv/bin/python" ] && [ -f "$SITE/manage.py" ]; then
    (cd "$SITE" && "$WORK/venv/bin/python" manage.py redis_server stop >/dev/null 2>&1) || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# The new project must configure itself: nothing from this shell's environment.
unset MQ_REDIS_URL MQ_PREFIX MQ_STORES MQ_DATA_DIR DJANGO_SETTINGS_MODULE PYTHONPATH

step() { echo "-- $*"; }

# The pages the snippets come from.
SNIPPET_PAGES=("$ROOT/docs/django.md" "$ROOT/docs/django-tasks.md")

# The fenced block right after `<!-- snippet: $1 -->` in one of SNIPPET_PAGES (an error when
# missing, or when two blocks carry the name).
snippet() {
  local text count
  count="$(cat "${SNIPPET_PAGES[@]}" | grep -cxF "<!-- snippet: $1 -->" || true)"
  if [ "$count" != 1 ]; then
    echo "docs: snippet $1 found $count times in ${SNIPPET_PAGES[*]#"$ROOT/"} (want once)" >&2
    exit 1
  fi
  text="$(awk -v want="<!-- snippet: $1 -->" '
    $0 == want { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }
  ' "${SNIPPET_PAGES[@]}")"
  if [ -z "$text" ]; then
    echo "docs: snippet $1 has no code block" >&2
    exit 1
  fi
  printf '\n%s\n' "$text"
}

step "build the wheel"
"$PY" -m build --wheel --no-isolation --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; exit 1; }
WHEEL="$(ls "$WORK"/dist/mqadmin-*.whl)"

"$PROJECT_PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
pip_install() {
  "$VPY" -m pip install --quiet --disable-pip-version-check "$@" >"$WORK/pip.log" 2>&1 \
    || { grep -v "^WARNING: Location" "$WORK/pip.log"; exit 1; }
}
# The Django release first (as a project that already has Django), then the wheel beside it.
if [ -n "$DJANGO_REQ" ]; then
  pip_install "$DJANGO_REQ"
else
  pip_install "$WHEEL"
fi
DJANGO_VERSION="$("$VPY" -c 'import django; print(django.get_version())')"
case "$DJANGO_VERSION" in
  5.2*) SERIES=52 ;;
  6.0*) SERIES=60 ;;
  *) SERIES=61 ;;
esac
if [ "$SERIES" = 52 ]; then
  step "install the wheel with the django52 extra next to Django $DJANGO_VERSION ($("$VPY" -V))"
  pip_install "$WHEEL[django52]"
else
  step "install the wheel next to Django $DJANGO_VERSION ($("$VPY" -V)), no backport"
  pip_install "$WHEEL"
fi
AFTER="$("$VPY" -c 'import django; print(django.get_version())')"
[ "$AFTER" = "$DJANGO_VERSION" ] || { echo "installing the wheel changed Django $DJANGO_VERSION to $AFTER" >&2; exit 1; }
if [ "$SERIES" != 52 ]; then
  # Django 6 has both built in: neither backport may come with the wheel (on Python 3.11
  # template partials is required, but Django 6 does not run there).
  "$VPY" -m pip list --format=freeze 2>/dev/null | grep -iE "^django[-_]tasks==" \
    && { echo "the django-tasks backport came with the wheel on Django 6" >&2; exit 1; }
  if "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    "$VPY" -m pip list --format=freeze 2>/dev/null | grep -iE "^django[-_]template[-_]partials==" \
      && { echo "django-template-partials came with the wheel on Django 6" >&2; exit 1; }
  fi
fi

step "django-admin startproject hostsite; manage.py startapp shop"
(cd "$WORK" && "$WORK/venv/bin/django-admin" startproject hostsite)
cd "$SITE"
"$VPY" manage.py startapp shop

# -- docs/django.md "Settings", "URLs", "Running workers"; docs/django-tasks.md -----------
if [ "$SERIES" = 52 ]; then
  snippet settings-django52 >>hostsite/settings.py
else
  snippet settings-django6 >>hostsite/settings.py
fi
snippet urls >>hostsite/urls.py
snippet login >>hostsite/settings.py
# The project's own app, with its job (docs/django.md "Running workers") and tasks.
cat >>hostsite/settings.py <<'EOF'

INSTALLED_APPS += ["shop"]
EOF
snippet jobs >shop/jobs.py
[ "$SERIES" = 52 ] && snippet tasks-app-django52 >>hostsite/settings.py
snippet tasks-settings >>hostsite/settings.py
if [ "$SERIES" = 52 ]; then
  snippet tasks-import-django52 >shop/tasks.py
else
  snippet tasks-import-django6 >shop/tasks.py
fi
snippet tasks-send-welcome >>shop/tasks.py
if [ "$SERIES" = 60 ]; then
  snippet tasks-retrying-django60 >>hostsite/settings.py
  snippet tasks-charge-django60 >>shop/tasks.py
else
  snippet tasks-charge-django61 >>shop/tasks.py
fi

step "manage.py check / migrate"
"$VPY" manage.py check --fail-level WARNING
"$VPY" manage.py migrate --noinput >/dev/null

step "the dashboard under /ops/mq/, from the installed wheel"
"$VPY" manage.py shell -v 0 -c '
from pathlib import Path

import mqadmin
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.template.loader import get_template
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse

setup_test_environment()
package = Path(mqadmin.__file__).parent
assert "site-packages" in str(package), package
assert Path(get_template("mqadmin/base.html").origin.name) == package / "templates/mqadmin/base.html"
assert Path(finders.find("mqadmin/app.js")) == package / "static/mqadmin/app.js"
assert reverse("mqadmin:home") == "/ops/mq/"

anonymous = Client().get("/ops/mq/jobs/")
assert anonymous.status_code == 302, anonymous.status_code
assert anonymous["Location"] == "/admin/login/?next=/ops/mq/jobs/", anonymous["Location"]
assert Client().get(anonymous["Location"]).status_code == 200

admin = get_user_model().objects.create_superuser("ops", "ops@example.com", None)
client = Client()
client.force_login(admin)
for url in ("/ops/mq/", "/ops/mq/jobs/", "/ops/mq/schedules/", "/ops/mq/outbox/", "/ops/mq/indexes/", "/ops/mq/audit/"):
    page = client.get(url)
    assert page.status_code == 200, (url, page.status_code)
    html = page.content.decode()
    assert "/static/mqadmin/app.js" in html and "<html" in html, url
partial = client.get("/ops/mq/jobs/", headers={"HX-Request": "true"})
assert partial.status_code == 200 and "<html" not in partial.content.decode()
print("   pages, partial, templates and static files: ok")
'

step "Django tasks (@task + .enqueue()) and a plain job, runworker --burst, the results"
IDS="$("$VPY" manage.py shell -v 0 -c '
from shop.jobs import add
from shop.tasks import charge, send_welcome
print(send_welcome.enqueue(7).id, charge.enqueue(42).id, add.enqueue({"a": 2, "b": 3}))
' | tail -1)"
read -r TASK_ID CHARGE_ID JOB_ID <<<"$IDS"
echo "   enqueued tasks $TASK_ID, $CHARGE_ID and job $JOB_ID"
# charge fails its first run and is retried 500 ms later: a burst worker exits while the
# retry is not due yet, so burst again until it has run (a few rounds at most).
for round in 1 2 3 4 5; do
  timeout 60 "$VPY" manage.py runworker --burst >"$WORK/worker.log" 2>&1 || { cat "$WORK/worker.log"; exit 1; }
  tail -n 1 "$WORK/worker.log" | sed "s/^/   burst $round: /"
  CHARGE_ID="$CHARGE_ID" "$VPY" manage.py shell -v 0 -c '
import os, sys
from shop.tasks import charge
sys.exit(0 if charge.get_result(os.environ["CHARGE_ID"]).is_finished else 3)
' && break
  sleep 1
done

JOB_ID="$JOB_ID" TASK_ID="$TASK_ID" CHARGE_ID="$CHARGE_ID" SERIES="$SERIES" "$VPY" manage.py shell -v 0 -c '
import os

from mqadmin.services import get_named_store
from mqadmin.tasks import TaskResultStatus
from shop.tasks import charge, send_welcome

task_id, charge_id, job_id = os.environ["TASK_ID"], os.environ["CHARGE_ID"], os.environ["JOB_ID"]
store = get_named_store("default")
record = store.get_job(task_id)
assert record is not None, f"task job {task_id} is not in the store"
assert record.state == "completed", record.state
assert record.name == "shop.tasks.send_welcome", record.name
assert (record.queue, record.priority) == ("emails", 10), (record.queue, record.priority)
result = send_welcome.get_result(task_id)
assert result.status == TaskResultStatus.SUCCESSFUL, result.status
assert result.return_value == "sent", result.return_value
assert result.errors == [] and result.attempts == 1 and len(result.worker_ids) == 1, result
print(f"   Django task {task_id}: {result.status}, returned {result.return_value!r}")

# charge: failed once, retried, then successful (its own options on Django 6.1 and 5.2,
# the "retrying" alias on 6.0).
stored = store.get_job(charge_id)
assert (stored.attempts_max, stored.timeout_ms) == (2, 30_000), (stored.attempts_max, stored.timeout_ms)
result = charge.get_result(charge_id)
assert result.backend == ("retrying" if os.environ["SERIES"] == "60" else "default"), result.backend
assert result.status == TaskResultStatus.SUCCESSFUL, (result.status, result.errors)
assert result.return_value == "charged order 42", result.return_value
assert result.attempts == 2 and len(result.worker_ids) == 2, result.worker_ids
assert all(isinstance(w, str) and w for w in result.worker_ids), result.worker_ids
assert len(result.errors) == 1, result.errors
error = result.errors[0]
assert error.exception_class is ConnectionError, error.exception_class_path
assert "payment gateway timed out" in error.traceback, error.traceback
assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at, result
assert result.last_attempted_at > result.started_at, "the retry is a later attempt"
print(
    f"   Django task {charge_id}: {result.status} after {result.attempts} attempts "
    f"(error {error.exception_class_path}), returned {result.return_value!r}, "
    f"workers {result.worker_ids}"
)

job = store.get_job(job_id)
assert job is not None and job.state == "completed", job
assert job.exit == {"sum": 5}, job.exit
print(f"   job {job_id}: {job.state}, returned {job.exit}")

# ... and the dashboard shows them.
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse

setup_test_environment()
client = Client()
client.force_login(get_user_model().objects.get(username="ops"))
for shown in (task_id, charge_id):
    url = reverse("mqadmin:job", args=["default", shown])
    page = client.get(url)
    assert page.status_code == 200, page.status_code
    assert "completed" in page.content.decode()
print(f"   the dashboard shows them at {url} and the like")
'
echo "-- the wheel works in a new project (Django $DJANGO_VERSION, $("$VPY" -V))"
