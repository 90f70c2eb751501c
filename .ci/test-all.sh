#!/usr/bin/env bash
# The whole test suite, as `make test` (and CI) run it.
#
# `make test` runs pass 1: everything a fresh machine can run, in 11-14 minutes on two cores.
# 1. Everything against a private embedded Redis 6.2 (or MQ_TEST_REDIS_URL when set) and the
#    dashboard database on SQLite.  1b: the host-project tests (their own settings module);
#    1c: the wheel installed into a new project (.ci/wheel-project.sh); 1d: the documentation
#    site built strictly; 1e: ruff (check and format) and mypy over store/ and mqadmin/, as `make lint` runs them.
# With MQ_TEST_ALL=1 (`.ci/run` sets it) the passes that need other servers or interpreters follow:
# 2. The whole suite again on the newest supported combination (Python 3.13 + Django 6.1, a nox
#    virtualenv: .ci/noxfile.py, session full(newest)), against the Redis on 127.0.0.1:6379 when
#    one answers (Redis 7 here).  Without that interpreter: the store, runtime, flow, chaos,
#    property and command suites against that Redis from the development virtualenv instead.
#    Tests only touch keys under their own unique prefixes; nothing is flushed.
# 3. When TEST_DATABASE_URL is set, or PostgreSQL accepts postgres@127.0.0.1:5432: the
#    dashboard suite and the host-project tests again on PostgreSQL (Django creates and
#    drops its own test database).
# 4. The Python x Django matrix (.ci/matrix.sh): the Tasks suite, the host project and the wheel
#    on every supported combination; a missing interpreter is reported SKIPPED.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python
# pytest-xdist workers: the suite mostly waits (on Redis, subprocesses, timeouts), so six keep
# two cores busy (pass 1: 9:34 at four workers with the browser tests, 7:07 at six).
WORKERS="${MQ_TEST_WORKERS:-6}"

# Compile everything up front: CPython 3.11 can raise a spurious "AST constructor recursion
# depth mismatch" SystemError when two threads compile at once (a worker thread importing a
# module while pytest rewrites a test module), which a fresh clone makes likely.
"$PY" -m compileall -q store mqadmin tests bench >/dev/null

# The accessibility tests need axe-core (git-ignored, fetched through npm); the browser tests
# themselves run only where a chromium is installed (`make browser-deps`), else they skip.
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && command -v npm >/dev/null 2>&1; then
  bash .ci/install-browser-deps.sh --axe-only || echo "axe-core unavailable: the accessibility tests will skip"
fi

echo "== pass 1: embedded Redis${MQ_TEST_REDIS_URL:+ ($MQ_TEST_REDIS_URL)}, SQLite"
"$PY" -m pytest -n "$WORKERS" "$@"

# pytest-django uses one settings module per process: the app inside a minimal host
# project (tests/hostproject: its own user model, login, URLconf with the app under
# ops/mq/) runs as a pass of its own.
echo "== pass 1b: mqadmin inside a host project (tests/host)"
rc=0
"$PY" -m pytest tests/host --ds=tests.hostproject.settings "$@" || rc=$?
# Exit 5 (nothing collected) is fine only when extra arguments (say -k) deselected it all.
if [ "$rc" -ne 0 ] && ! { [ "$rc" -eq 5 ] && [ "$#" -gt 0 ]; }; then exit "$rc"; fi

# The built wheel in a fresh virtualenv, added to a `django-admin startproject` project
# as docs/django.md "Add mqadmin to an existing Django project" says, one task run end to end.
echo "== pass 1c: the wheel in a new Django project"
bash .ci/wheel-project.sh

# The documentation (mkdocs.yml, docs/; the `docs` extra): --strict fails on a broken link or
# anchor, a page left out of the navigation, a deploy/ file the deployment page includes that
# is gone.  Built into a temporary directory, so the checkout's site/ is left alone.
echo "== pass 1d: the documentation (mkdocs build --strict)"
docs_site="$(mktemp -d "${TMPDIR:-/tmp}/mq-docs.XXXXXX")"
docs_rc=0
.venv/bin/mkdocs build --strict --quiet --site-dir "$docs_site" || docs_rc=$?
rm -rf "$docs_site"
[ "$docs_rc" -eq 0 ] || exit "$docs_rc"

# The type check ([tool.mypy] in pyproject.toml: store/ and mqadmin/ with the Django plugin);
# any error fails the run.
echo "== pass 1e: ruff and mypy (make lint)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

if [ "${MQ_TEST_ALL:-0}" != 1 ]; then
  echo "== passes 2-4 (Redis 7, PostgreSQL, the Python x Django matrix) run with MQ_TEST_ALL=1, as .ci/run does"
  exit 0
fi

redis_url=""
if [ -z "${MQ_TEST_REDIS_URL:-}" ] \
  && "$PY" -c 'import redis, sys; sys.exit(0 if redis.Redis(socket_connect_timeout=1).ping() else 1)' 2>/dev/null; then
  redis_url=redis://127.0.0.1:6379/0
fi
echo "== pass 2: the whole suite on the newest combination (.ci/noxfile.py full(newest))${redis_url:+, against $redis_url}"
MQ_TEST_REDIS_URL="${redis_url:-${MQ_TEST_REDIS_URL:-}}" \
  bash .ci/matrix.sh -s "full(newest)" -- -n "$WORKERS" "$@"
newest=$("$PY" -c 'import json; print(json.load(open("var/matrix/report.json"))["sessions"][0]["result"])')
if [ "$newest" != success ]; then
  echo "== pass 2: the newest combination has no interpreter here (nox: $newest)"
  if [ -n "$redis_url" ]; then
    echo "== pass 2 instead: the store and runtime suites against $redis_url"
    suites=()
    for d in tests/store tests/runtime tests/flows tests/chaos tests/property tests/commands tests/consistency tests/tasks; do
      [ -d "$d" ] && suites+=("$d")
    done
    MQ_TEST_REDIS_URL="$redis_url" "$PY" -m pytest -n "$WORKERS" "${suites[@]}" "$@"
  fi
fi
[ -n "$redis_url" ] || echo "== (no Redis on 127.0.0.1:6379: pass 2 ran on the embedded Redis)"

pg_url="${TEST_DATABASE_URL:-}"
if [ -z "$pg_url" ] && "$PY" -c 'import psycopg; psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2).close()' 2>/dev/null; then
  pg_url="postgres://postgres@127.0.0.1:5432/mqadmin"
fi
if [ -n "$pg_url" ]; then
  echo "== pass 3: the dashboard and Django Tasks suites on PostgreSQL"
  DATABASE_URL="$pg_url" "$PY" -m pytest -n "$WORKERS" tests/mqadmin tests/consistency tests/tasks "$@"
  echo "== pass 3b: the host project on PostgreSQL"
  DATABASE_URL="$pg_url" "$PY" -m pytest tests/host --ds=tests.hostproject.settings "$@"
else
  echo "== pass 3 skipped: no PostgreSQL (set TEST_DATABASE_URL)"
fi

# MQ_MATRIX_WRITE_DOCS=1 also rewrites the table of docs/compatibility.md from this run.
echo "== pass 4: the Python x Django matrix (.ci/matrix.sh)"
if [ "${MQ_MATRIX_WRITE_DOCS:-0}" = 1 ]; then
  bash .ci/matrix.sh --write-docs -s matrix
else
  bash .ci/matrix.sh -s matrix
fi
