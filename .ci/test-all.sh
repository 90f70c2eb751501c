#!/usr/bin/env bash
# The whole test suite, as `make test` (and CI) run it.
#
# 1. Everything against a private embedded Redis 6.2 (or MQ_TEST_REDIS_URL when set) and the
#    dashboard database on SQLite.  This pass alone is what a fresh machine runs.
# 2. When a Redis answers on 127.0.0.1:6379 (and MQ_TEST_REDIS_URL is unset): the store,
#    runtime, flow, chaos, property and command suites again against that server (Redis 7 here).
#    Tests only touch keys under their own unique prefixes; nothing is flushed.
# 3. When TEST_DATABASE_URL is set, or PostgreSQL accepts postgres@127.0.0.1:5432: the
#    dashboard suite again on PostgreSQL (Django creates and drops its own test database).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=.venv/bin/python

# Compile everything up front: CPython 3.11 can raise a spurious "AST constructor recursion
# depth mismatch" SystemError when two threads compile at once (a worker thread importing a
# module while pytest rewrites a test module), which a fresh clone makes likely.
"$PY" -m compileall -q store mqadmin tests bench >/dev/null

echo "== pass 1: embedded Redis${MQ_TEST_REDIS_URL:+ ($MQ_TEST_REDIS_URL)}, SQLite"
"$PY" -m pytest "$@"

if [ -z "${MQ_TEST_REDIS_URL:-}" ]; then
  if "$PY" -c 'import redis, sys; sys.exit(0 if redis.Redis(socket_connect_timeout=1).ping() else 1)' 2>/dev/null; then
    echo "== pass 2: the Redis on 127.0.0.1:6379"
    suites=()
    for d in tests/store tests/runtime tests/flows tests/chaos tests/property tests/commands tests/consistency; do
      [ -d "$d" ] && suites+=("$d")
    done
    MQ_TEST_REDIS_URL=redis://127.0.0.1:6379/0 "$PY" -m pytest "${suites[@]}" "$@"
  else
    echo "== pass 2 skipped: no Redis on 127.0.0.1:6379"
  fi
fi

pg_url="${TEST_DATABASE_URL:-}"
if [ -z "$pg_url" ] && "$PY" -c 'import psycopg; psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2).close()' 2>/dev/null; then
  pg_url="postgres://postgres@127.0.0.1:5432/mqadmin"
fi
if [ -n "$pg_url" ]; then
  echo "== pass 3: the dashboard suite on PostgreSQL"
  DATABASE_URL="$pg_url" "$PY" -m pytest tests/mqadmin "$@"
else
  echo "== pass 3 skipped: no PostgreSQL (set TEST_DATABASE_URL)"
fi
