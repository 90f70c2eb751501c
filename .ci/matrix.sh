#!/usr/bin/env bash
# The supported Python x Django matrix (.ci/noxfile.py), with its result table.
#
#   bash .ci/matrix.sh                     # every combination: tasks, host, wheel
#   bash .ci/matrix.sh --write-docs        # ... and the table into docs/compatibility.md
#   bash .ci/matrix.sh -s "matrix(3.13-6.1)"   # extra arguments go to nox
#
# Interpreters: python3.11/3.12/3.13 found on PATH or as pyenv versions (pyenv's shims are
# skipped: they fail for a version that is not the active one); each found one is linked into
# var/matrix/bin, which nox sees first.  A combination whose interpreter is missing is
# reported SKIPPED (nox skips it), never passed.  The virtualenvs live in var/matrix/nox and
# are reused between runs (pip only checks what is installed).  Exit status: non-zero when a
# combination failed.  Each combination's suites and durations are in var/matrix/results/.
# The whole matrix runs in MQ_MATRIX_JOBS streams at once (default 2; 1: one after another).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
WORK="$ROOT/var/matrix"
BIN="$WORK/bin"
RESULTS="$WORK/results"
write_docs=0
if [ "${1:-}" = "--write-docs" ]; then
  write_docs=1
  shift
fi
mkdir -p "$BIN" "$RESULTS"
rm -f "$RESULTS"/*.json "$WORK"/report*.json

# -- interpreters -----------------------------------------------------------------------
find_python() {  # $1 = 3.12 -> the path of a real python3.12, or nothing
  local v="$1" p d
  IFS=: read -ra dirs <<<"$PATH"
  for d in "${dirs[@]}"; do
    case "$d" in */.pyenv/shims) continue ;; esac
    p="$d/python$v"
    if [ -x "$p" ] && [ "$(dirname "$p")" != "$BIN" ] && "$p" -c '' 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    local version
    version="$(pyenv versions --bare 2>/dev/null | grep -E "^${v//./\\.}(\.[0-9]+)?$" | sort -V | tail -1 || true)"
    if [ -n "$version" ]; then
      p="$(pyenv root)/versions/$version/bin/python$v"
      [ -x "$p" ] && echo "$p"
    fi
  fi
}
rm -f "$BIN"/python3.*
for v in 3.11 3.12 3.13; do
  p="$(find_python "$v")"
  if [ -n "$p" ]; then
    ln -s "$p" "$BIN/python$v"
    echo "python$v: $p"
  else
    echo "python$v: not found (its combinations will be SKIPPED)"
  fi
done
PATH_NO_SHIMS="$(echo "$PATH" | tr : '\n' | grep -v '/\.pyenv/shims$' | paste -sd: -)"

# -- nox ----------------------------------------------------------------------------------
NOX="$ROOT/.venv/bin/nox"
if [ ! -x "$NOX" ]; then
  # Not in the development virtualenv: a small one of its own.
  [ -x "$WORK/tools/bin/nox" ] || { python3 -m venv "$WORK/tools" && "$WORK/tools/bin/pip" install --quiet nox; }
  NOX="$WORK/tools/bin/nox"
fi

run_nox() {  # $1 = the report file; the rest goes to nox
  local report="$1"
  shift
  PATH="$BIN:$PATH_NO_SHIMS" MQ_MATRIX_RESULTS="$RESULTS" "$NOX" -f .ci/noxfile.py \
    --envdir "$WORK/nox" -r --report "$report" "$@"
}

HOSTPY="$ROOT/.venv/bin/python"
[ -x "$HOSTPY" ] || HOSTPY=python3
started=$(date +%s)
rc=0
# The whole matrix (`-s matrix`, the default) runs its combinations in MQ_MATRIX_JOBS streams
# at once (2 by default): each combination spends much of its time in pip and waiting on its
# servers, so two streams keep both cores busy.  Every combination has its own virtualenv,
# results file, embedded Redis (a pytest temp directory), in-memory test database and
# wheel-project directory, so the streams share nothing but the pip cache.  Each stream's
# lines are prefixed with its number; the reports are merged in the noxfile's order.
jobs="${MQ_MATRIX_JOBS:-2}"
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "matrix: MQ_MATRIX_JOBS must be a whole number of streams, 1 or more (got '$jobs')" >&2
  exit 2
fi
if [ "$jobs" -gt 1 ] && { [ "$#" -eq 0 ] || [ "$*" = "-s matrix" ]; }; then
  mapfile -t combos < <("$NOX" -f .ci/noxfile.py -l --json -s matrix 2>/dev/null \
    | "$HOSTPY" -c 'import json, sys; print("\n".join(s["session"] for s in json.load(sys.stdin)))')
  if [ "${#combos[@]}" -eq 0 ]; then
    echo "matrix: nox listed no combination (nox -f .ci/noxfile.py -l --json -s matrix failed)" >&2
    exit 1
  fi
  pids=()
  for ((i = 0; i < jobs; i++)); do
    mine=()
    for ((k = i; k < ${#combos[@]}; k += jobs)); do mine+=("${combos[k]}"); done
    [ "${#mine[@]}" -gt 0 ] || continue
    (run_nox "$WORK/report-$i.json" -s "${mine[@]}" 2>&1 | sed -u "s/^/[matrix $((i + 1))] /") &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  "$HOSTPY" - "$WORK" "${combos[@]}" <<'EOF'
import json, sys
from pathlib import Path
work, order = Path(sys.argv[1]), sys.argv[2:]
sessions = []
for part in sorted(work.glob("report-*.json")):
    sessions += json.loads(part.read_text())["sessions"]
    part.unlink()
rank = {name: i for i, name in enumerate(order)}
sessions.sort(key=lambda s: rank.get(s["signatures"][0], len(order)))
(work / "report.json").write_text(json.dumps({"sessions": sessions}, indent=1))
EOF
else
  run_nox "$WORK/report.json" "$@" || rc=$?
fi
elapsed=$(($(date +%s) - started))

# -- the table ----------------------------------------------------------------------------
TABLE="$WORK/table.md"
"$HOSTPY" - "$WORK/report.json" "$RESULTS" "$elapsed" >"$TABLE" <<'EOF'
import json, sys
from pathlib import Path
report = json.loads(Path(sys.argv[1]).read_text()) if Path(sys.argv[1]).exists() else {"sessions": []}
results = Path(sys.argv[2])
print("| Python | Django | install | tasks | host | wheel | combination |")
print("|---|---|---|---|---|---|---|")
for s in report["sessions"]:
    if not s["name"] == "matrix":
        continue
    # "matrix(3.13-6.1)": nox's report names the combination in the signature.
    python, django = s["signatures"][0].partition("(")[2].rstrip(")").split("-")
    status = {"success": "PASSED", "failed": "FAILED", "skipped": "SKIPPED"}.get(s["result"], s["result"].upper())
    path = results / f"{python}-{django}.json"
    suites = json.loads(path.read_text())["suites"] if path.exists() else {}
    cells = []
    for name in ("install", "tasks", "host", "wheel"):
        got = suites.get(name)
        if got is None:
            cells.append("SKIPPED (no interpreter)" if status == "SKIPPED" else "-")
        else:
            cells.append(f"{got['result']} ({got['seconds']:.0f} s)" if got["seconds"] is not None else got["result"])
    if status == "SKIPPED":
        status = f"SKIPPED: python{python} not found"
    print(f"| {python} | {django} | " + " | ".join(cells) + f" | {status} |")
print(f"\nWhole run: {int(sys.argv[3])} s.")
EOF
echo
echo "== the matrix (var/matrix/table.md)"
cat "$TABLE"

if [ "$write_docs" = 1 ]; then
  DOC=docs/compatibility.md
  ROOT="$ROOT" TABLE="$TABLE" "$HOSTPY" - <<'EOF'
import os, platform, subprocess
from datetime import UTC, datetime
from pathlib import Path
doc = Path(os.environ["ROOT"]) / "docs/compatibility.md"
text = doc.read_text()
start, end = "<!-- matrix:start -->", "<!-- matrix:end -->"
head, _, rest = text.partition(start)
_, _, tail = rest.partition(end)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
stamp = datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
table = Path(os.environ["TABLE"]).read_text().rstrip()
doc.write_text(f"{head}{start}\nFrom `bash .ci/matrix.sh --write-docs` at {stamp}, commit {commit} ({platform.machine()}, 2 cores):\n\n{table}\n{end}{tail}")
EOF
  echo "== written into $DOC"
fi
exit "$rc"
