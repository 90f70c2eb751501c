#!/usr/bin/env bash
# Creates the virtualenvs the benchmarks run their peers from:
#   bench/.venv-peers  rq, dramatiq, bullmq (Python port), celery  (+ the project, see below)
#   bench/.venv-arq    arq 0.28.0, which needs redis<6 (bullmq needs redis>=6.2)
#   bench/.venv-dtasks django-tasks-rq and django-tasks-redis (bench/django_tasks_bench.py)
#   bench/.venv-dtasks-6.1  the same peers and the project on Django 6.1 (django_tasks_bench.py
#                      --django 6.1), with the newest Python 3.13/3.12 found (skipped if none)
# Idempotent: a venv is created only if missing, and pip runs again only when its
# requirements file (or the project's pyproject.toml, or this script) changed since the last
# successful run. --force reinstalls regardless.
# The drivers import bench.* from the repo: throughput.py runs them with cwd=repo and the repo on
# PYTHONPATH; by hand, run `python -m bench.peers.X` from the repo root.
# Usage: bash bench/setup_peers.sh [--force]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
BASE_PYTHON="${BENCH_BASE_PYTHON:-$REPO_DIR/.venv/bin/python}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

if [[ ! -x "$BASE_PYTHON" ]]; then
    echo "setup_peers: $BASE_PYTHON not found; set BENCH_BASE_PYTHON to a Python 3.11 interpreter" >&2
    exit 1
fi

fingerprint() {
    # Everything that should trigger a reinstall when it changes: the given files (missing ones
    # count as "absent"), this script, and the base interpreter's version.
    {
        local f
        for f in "$@" "$BENCH_DIR/setup_peers.sh"; do
            if [[ -f "$f" ]]; then cat "$f"; else echo "absent: $f"; fi
        done
        "$BASE_PYTHON" -c 'import sys; print(sys.version)'
    } | sha256sum | cut -d' ' -f1
}

make_venv() {
    local venv="$1"
    if [[ ! -x "$venv/bin/python" ]]; then
        echo "setup_peers: creating $venv"
        "$BASE_PYTHON" -m venv "$venv"
    fi
}

site_packages() {
    "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

setup_peers_venv() {
    local venv="$BENCH_DIR/.venv-peers"
    local req="$BENCH_DIR/requirements-peers.txt"
    local stamp="$venv/.bench-stamp"
    local want
    want="$(fingerprint "$req" "$REPO_DIR/pyproject.toml")"
    if [[ $FORCE == 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "setup_peers: $venv is up to date"
        return
    fi
    make_venv "$venv"
    # An earlier version of this script put the repo on sys.path with a .pth file; drop it.
    rm -f "$(site_packages "$venv")/mqadmin-bench-repo.pth"
    "$venv/bin/python" -m pip install --quiet -r "$req"
    if [[ -f "$REPO_DIR/pyproject.toml" ]]; then
        # The project and its dependencies, so ours could also run from this venv.
        "$venv/bin/python" -m pip install --quiet -e "$REPO_DIR" ||
            echo "setup_peers: WARNING: pip install -e $REPO_DIR failed (throughput.py puts the repo on PYTHONPATH anyway)" >&2
    else
        echo "setup_peers: no $REPO_DIR/pyproject.toml: not installing the project; throughput.py puts $REPO_DIR on PYTHONPATH"
    fi
    # Report conflicts (e.g. a project pin that fights a peer's pin) without failing the setup.
    "$venv/bin/python" -m pip check || echo "setup_peers: WARNING: pip check reported conflicts in $venv" >&2
    echo "$want" >"$stamp"
}

setup_arq_venv() {
    local venv="$BENCH_DIR/.venv-arq"
    local req="$BENCH_DIR/requirements-arq.txt"
    local stamp="$venv/.bench-stamp"
    local want
    want="$(fingerprint "$req")"
    if [[ $FORCE == 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "setup_peers: $venv is up to date"
        return
    fi
    make_venv "$venv"
    # An earlier version of this script put the repo on sys.path with a .pth file; drop it.
    rm -f "$(site_packages "$venv")/mqadmin-bench-repo.pth"
    "$venv/bin/python" -m pip install --quiet -r "$req"
    "$venv/bin/python" -m pip check || echo "setup_peers: WARNING: pip check reported conflicts in $venv" >&2
    echo "$want" >"$stamp"
}

setup_dtasks_venv() {
    local venv="$BENCH_DIR/.venv-dtasks"
    local req="$BENCH_DIR/requirements-dtasks.txt"
    local stamp="$venv/.bench-stamp"
    local want
    want="$(fingerprint "$req")"
    if [[ $FORCE == 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "setup_peers: $venv is up to date"
        return
    fi
    make_venv "$venv"
    "$venv/bin/python" -m pip install --quiet -r "$req"
    # django-tasks-redis 0.4.0 declares Python>=3.12 and Django>=6.0; its code runs on 3.11 with
    # the backport (the driver aliases django.tasks), so install it alone, without those pins.
    "$venv/bin/python" -m pip install --quiet --no-deps --ignore-requires-python django-tasks-redis==0.4.0
    echo "$want" >"$stamp"
}

find_python312() {
    # The newest Python 3.13 or 3.12: on PATH first, then among pyenv's versions (not its shims).
    local v p version
    for v in 3.13 3.12; do
        p="$(command -v "python$v" 2>/dev/null || true)"
        if [[ -n "$p" && "$p" != */.pyenv/shims/* ]] && "$p" -c '' 2>/dev/null; then
            echo "$p"
            return
        fi
        if command -v pyenv >/dev/null 2>&1; then
            version="$(pyenv versions --bare 2>/dev/null | grep -E "^${v//./\\.}(\.[0-9]+)?$" | sort -V | tail -1 || true)"
            p="$(pyenv root)/versions/$version/bin/python$v"
            if [[ -n "$version" && -x "$p" ]]; then
                echo "$p"
                return
            fi
        fi
    done
}

setup_dtasks61_venv() {
    local venv="$BENCH_DIR/.venv-dtasks-6.1"
    local req="$BENCH_DIR/requirements-dtasks-6.1.txt"
    local stamp="$venv/.bench-stamp"
    local python want
    python="$(find_python312)"
    if [[ -z "$python" ]]; then
        echo "setup_peers: no Python 3.12/3.13 found: skipping $venv (django_tasks_bench.py --django 6.1)"
        return
    fi
    want="$(fingerprint "$req" "$REPO_DIR/pyproject.toml"; "$python" -c 'import sys; print(sys.version)')"
    if [[ $FORCE == 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "setup_peers: $venv is up to date"
        return
    fi
    [[ -x "$venv/bin/python" ]] || { echo "setup_peers: creating $venv with $python"; "$python" -m venv "$venv"; }
    # The project first (it allows Django 6.1), then the pinned peers and Django 6.1 itself.
    "$venv/bin/python" -m pip install --quiet -e "$REPO_DIR" -r "$req"
    "$venv/bin/python" -m pip check || echo "setup_peers: WARNING: pip check reported conflicts in $venv" >&2
    echo "$want" >"$stamp"
}

setup_peers_venv
setup_arq_venv
setup_dtasks_venv
setup_dtasks61_venv

echo "setup_peers: installed versions"
"$BENCH_DIR/.venv-peers/bin/python" -m pip list 2>/dev/null | grep -iE '^(rq|dramatiq|bullmq|celery|kombu|redis|hiredis) '
"$BENCH_DIR/.venv-arq/bin/python" -m pip list 2>/dev/null | grep -iE '^(arq|redis|hiredis) '
"$BENCH_DIR/.venv-dtasks/bin/python" -m pip list 2>/dev/null | grep -iE '^(django|django-tasks|django-tasks-rq|django-tasks-redis|django-rq|rq|redis) '
if [[ -x "$BENCH_DIR/.venv-dtasks-6.1/bin/python" ]]; then
    "$BENCH_DIR/.venv-dtasks-6.1/bin/python" -m pip list 2>/dev/null | grep -iE '^(django|django-tasks|django-tasks-rq|django-tasks-redis|django-rq|rq|redis) '
fi
