#!/usr/bin/env bash
# Install what the browser tests (tests/browser/) need: Debian's chromium and the
# Playwright Python package in the project's virtualenv.
#
# Playwright is used only as a driver for that system chromium (the tests launch it
# with executable_path=/usr/bin/chromium).  `playwright install` is deliberately NOT
# run: it downloads browser builds from a CDN, which this project does not rely on.
#
# Usage: bash scripts/install-browser-deps.sh   (needs root, or sudo, for apt-get)
set -euo pipefail

cd "$(dirname "$0")/.."

VENV_PY="${VENV_PY:-.venv/bin/python}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$VENV_PY" ]; then
    echo "no virtualenv at $VENV_PY: run 'make venv' first" >&2
    exit 1
fi

if [ -x "$CHROMIUM" ]; then
    echo "chromium already installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "apt-get not found: install chromium with your package manager" \
            "(or set CHROMIUM=/path/to/chromium for the tests via MQ_CHROMIUM)" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    echo "installing chromium with apt-get"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
fi

echo "installing the playwright Python package into $VENV_PY"
"$VENV_PY" -m pip install --quiet playwright

"$VENV_PY" - <<'PY'
import playwright
from importlib.metadata import version
print(f"playwright {version('playwright')} ready (driver only; browser: system chromium)")
PY
