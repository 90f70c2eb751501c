#!/usr/bin/env bash
# The built wheel, installed into a fresh virtualenv, inside a brand-new Django project.
#
# Follows README "Add mqadmin to an existing Django project" step by step:
#   1. build the wheel from this checkout and `pip install` it with django-tasks into a new
#      virtualenv (nothing of this checkout is on its path);
#   2. `django-admin startproject hostsite`, then the README's lines appended to its
#      settings.py and urls.py, and a `shop` app (`manage.py startapp`) holding one job;
#   3. `manage.py check --fail-level WARNING` (the app's system checks must pass),
#      `migrate`, the dashboard under /ops/mq/ through Django's test client (templates and
#      static files from the wheel, anonymous visitors sent to LOGIN_URL, the admin's login);
#   4. end to end: a Django Tasks `@task` (TASKS = {"default": {"BACKEND":
#      "mqadmin.tasks.StoreBackend"}}) and a plain mqadmin job definition, both enqueued
#      from Django code, run by one `manage.py runworker --burst`, their results read back
#      through the Tasks API and the store, and shown by the dashboard.
# The project's embedded Redis (no MQ_* setting: <BASE_DIR>/var/redis) is stopped at the end.
# Takes well under a minute when the packages come from a local cache or index.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
PY="$ROOT/.venv/bin/python"

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

step "build the wheel"
"$PY" -m build --wheel --no-isolation --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; exit 1; }
WHEEL="$(ls "$WORK"/dist/mqadmin-*.whl)"

step "install it with django-tasks into a new virtualenv"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install --quiet --disable-pip-version-check "$WHEEL" django-tasks \
  >"$WORK/pip.log" 2>&1 || { grep -v "^WARNING: Location" "$WORK/pip.log"; exit 1; }

step "django-admin startproject hostsite; manage.py startapp shop"
(cd "$WORK" && "$WORK/venv/bin/django-admin" startproject hostsite)
cd "$SITE"
"$VPY" manage.py startapp shop

# -- README: settings.py -----------------------------------------------------------------
cat >>hostsite/settings.py <<'EOF'

# mqadmin (README "Add mqadmin to an existing Django project")
INSTALLED_APPS += ["template_partials", "mqadmin"]
MIDDLEWARE += ["django_htmx.middleware.HtmxMiddleware"]
EOF
# -- README: urls.py ---------------------------------------------------------------------
cat >>hostsite/urls.py <<'EOF'

# mqadmin (README "Add mqadmin to an existing Django project")
from django.urls import include  # noqa: E402

urlpatterns += [path("ops/mq/", include("mqadmin.urls"))]
EOF
# -- README: the login page (a startproject project has only the admin's) ----------------
cat >>hostsite/settings.py <<'EOF'
LOGIN_URL = "admin:login"
EOF
# The project's own app, with its job (README "Running workers").
cat >>hostsite/settings.py <<'EOF'
INSTALLED_APPS += ["shop"]
EOF
cat >shop/jobs.py <<'EOF'
from store import Job

add = Job("shop.add", queue="default")


@add.handler
def run_add(payload: dict) -> dict:
    return {"sum": payload["a"] + payload["b"]}
EOF
# -- README: "Django Tasks backend" ------------------------------------------------------
cat >>hostsite/settings.py <<'EOF'
INSTALLED_APPS += ["django_tasks"]
TASKS = {"default": {"BACKEND": "mqadmin.tasks.StoreBackend"}}
EOF
cat >shop/tasks.py <<'EOF'
from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b
EOF

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

step "a Django task (@task + .enqueue()) and a plain job, runworker --burst, the results"
TASK_ID="$("$VPY" manage.py shell -v 0 -c '
from shop.tasks import add
print(add.enqueue(2, 3).id)
' | tail -1)"
JOB_ID="$("$VPY" manage.py shell -v 0 -c '
from shop.jobs import add
print(add.enqueue({"a": 2, "b": 3}))
' | tail -1)"
echo "   enqueued task $TASK_ID and job $JOB_ID"
timeout 60 "$VPY" manage.py runworker --burst >"$WORK/worker.log" 2>&1 || { cat "$WORK/worker.log"; exit 1; }
tail -n 1 "$WORK/worker.log" | sed 's/^/   /'

JOB_ID="$JOB_ID" TASK_ID="$TASK_ID" "$VPY" manage.py shell -v 0 -c '
import os

from mqadmin.services import get_named_store

from django_tasks import TaskResultStatus
from shop.tasks import add

task_id, job_id = os.environ["TASK_ID"], os.environ["JOB_ID"]
store = get_named_store("default")
record = store.get_job(task_id)
assert record is not None, f"task job {task_id} is not in the store"
assert record.state == "completed", record.state
assert record.name == "shop.tasks.add", record.name
result = add.get_result(task_id)
assert result.status == TaskResultStatus.SUCCESSFUL, result.status
assert result.return_value == 5, result.return_value
print(f"   Django task {task_id}: {result.status}, returned {result.return_value}")
job = store.get_job(job_id)
assert job is not None and job.state == "completed", job
assert job.exit == {"sum": 5}, job.exit
print(f"   job {job_id}: {job.state}, returned {job.exit}")

# ... and the dashboard shows it.
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment
from django.urls import reverse

setup_test_environment()
client = Client()
client.force_login(get_user_model().objects.get(username="ops"))
url = reverse("mqadmin:job", args=["default", task_id])
page = client.get(url)
assert page.status_code == 200, page.status_code
assert "completed" in page.content.decode()
print(f"   the dashboard shows it at {url}")
'
echo "-- the wheel works in a new project"
