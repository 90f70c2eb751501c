#!/usr/bin/env bash
# Install what the browser tests (tests/browser/) need: Debian's chromium and the
# Playwright Python package in the project's virtualenv.
#
# Playwright is used only as a driver for that system chromium (the tests launch it
# with executable_path=/usr/bin/chromium).  `playwright install` is deliberately NOT
# run: it downloads browser builds from a CDN, which this project does not rely on.
#
# Usage: bash .ci/install-browser-deps.sh          (needs root, or sudo, for apt-get)
#        bash .ci/install-browser-deps.sh --axe-only  (only axe-core, through npm; no root:
#                                                      .ci/test-all.sh runs this when a
#                                                      chromium is present)
set -euo pipefail

AXE_ONLY=0
if [ "${1:-}" = "--axe-only" ]; then
    AXE_ONLY=1
fi

cd "$(dirname "$0")/.."

VENV_PY="${VENV_PY:-.venv/bin/python}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$VENV_PY" ]; then
    echo "no virtualenv at $VENV_PY: run 'make venv' first" >&2
    exit 1
fi

if [ "$AXE_ONLY" = 1 ]; then
    :
elif [ -x "$CHROMIUM" ]; then
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

if [ "$AXE_ONLY" = 0 ]; then
    echo "installing the playwright Python package into $VENV_PY"
    "$VENV_PY" -m pip install --quiet playwright
fi

# axe-core (MPL-2.0) for the accessibility checks, from the npm registry through npm
# itself (npm verifies the package's integrity); only axe.min.js and its licence are
# kept, in tests/browser/vendor/ (git-ignored).  No CDN is used.
AXE_VERSION="${AXE_VERSION:-4.10.3}"
AXE_DIR="tests/browser/vendor"
if [ -f "$AXE_DIR/axe.min.js" ] && head -c 40 "$AXE_DIR/axe.min.js" | grep -q "axe v$AXE_VERSION"; then
    echo "axe-core $AXE_VERSION already in $AXE_DIR"
elif command -v npm >/dev/null 2>&1; then
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack "axe-core@$AXE_VERSION" --silent >/dev/null \
        && tar xzf "axe-core-$AXE_VERSION.tgz" package/axe.min.js package/LICENSE)
    mkdir -p "$AXE_DIR"
    cp "$tmp/package/axe.min.js" "$AXE_DIR/axe.min.js"
    cp "$tmp/package/LICENSE" "$AXE_DIR/axe-core.LICENSE"
    rm -rf "$tmp"
    echo "axe-core $AXE_VERSION installed in $AXE_DIR"
else
    echo "npm not found: the accessibility tests will be skipped (install npm and rerun)" >&2
fi

if [ "$AXE_ONLY" = 1 ]; then
    exit 0
fi
"$VENV_PY" - <<'PY'
import playwright
from importlib.metadata import version
print(f"playwright {version('playwright')} ready (driver only; browser: system chromium)")
PY
