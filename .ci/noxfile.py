"""The Python x Django matrix: ``nox -f .ci/noxfile.py`` (or ``bash .ci/matrix.sh``).

Session ``matrix`` runs, on each supported (Python, Django) combination, three suites:

* ``tasks``  - the Django Tasks backend suite (``tests/tasks``), Django's own behaviour
  cases included (tests/tasks/test_django_conformance.py);
* ``host``   - the app inside a host project (``tests/host --ds=tests.hostproject.settings``);
* ``wheel``  - the built wheel in a brand-new ``startproject`` project (.ci/wheel-project.sh,
  with this combination's interpreter and Django).

Session ``full`` runs the whole suite on the oldest and on the newest combination (slow:
not selected by default).  A combination whose interpreter is missing is *skipped* by nox
(never passed); .ci/matrix.sh turns nox's report into the table of docs/compatibility.md.
Each session's virtualenv is kept (``--envdir``, reused with ``-r``), so a rerun only
checks the installed packages.  Every suite's outcome and duration goes to
``$MQ_MATRIX_RESULTS/<session>.json`` when that variable is set.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).resolve().parent.parent

nox.options.sessions = ["matrix"]
nox.options.error_on_missing_interpreters = False
nox.options.default_venv_backend = "venv"

#: Django minor release -> the requirement that installs its newest patch release.
DJANGO = {
    "5.2": "Django>=5.2,<5.3",
    "6.0": "Django>=6.0,<6.1",
    "6.1": "Django>=6.1,<6.2",
}

#: The supported combinations (Django 6 needs Python 3.12 or later).
COMBINATIONS = [
    ("3.11", "5.2"),
    ("3.12", "5.2"),
    ("3.12", "6.0"),
    ("3.12", "6.1"),
    ("3.13", "5.2"),
    ("3.13", "6.0"),
    ("3.13", "6.1"),
]
OLDEST, NEWEST = COMBINATIONS[0], COMBINATIONS[-1]

PYTEST = ["python", "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]


#: The extras every session installs: the tests' own and the development project's (``site``:
#: mqadmin/settings.py, which the suites run with, logs in through django-axes).
EXTRAS = "test,site"


#: Tries of one install: a download cut short (seen once: a Django wheel whose hash did not
#: match, which pip does not retry by itself) should not fail the whole run.
INSTALL_TRIES = 3


def install(session: nox.Session, django: str, extras: str = EXTRAS) -> None:
    """The project (editable) with its test extras, on the wanted Django release."""
    for attempt in range(1, INSTALL_TRIES + 1):
        try:
            session.install("-e", f"{ROOT}[{extras}]", DJANGO[django])
            break
        except CommandFailed:
            if attempt == INSTALL_TRIES:
                raise
            session.warn(f"pip failed (try {attempt} of {INSTALL_TRIES}); trying again")
            time.sleep(5 * attempt)
    found = session.run("python", "-c", "import django; print(django.get_version())", silent=True)
    # (None under --install-only, which runs no command.)
    if found is not None and not found.strip().startswith(django):
        session.error(f"wanted Django {django}, installed {found.strip()}")


class Results:
    """Each suite's outcome and duration, written after every suite (a failure stops)."""

    def __init__(self, session: nox.Session, python: str, django: str) -> None:
        self.python, self.django = python, django
        folder = os.environ.get("MQ_MATRIX_RESULTS")
        self.path = Path(folder) / f"{python}-{django}.json" if folder else None
        self.suites: dict[str, dict[str, object]] = {}
        self.session = session

    def run(self, suite: str, *args: str, env: dict[str, str] | None = None) -> None:
        started = time.monotonic()
        self.suites[suite] = {"result": "FAILED", "seconds": None}
        self._write()
        try:
            self.session.run(*args, env=env, external=args[0] == "bash")
        finally:
            self.suites[suite]["seconds"] = round(time.monotonic() - started, 1)
            self._write()
        self.suites[suite]["result"] = "PASSED"
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"python": self.python, "django": self.django, "suites": self.suites}
        self.path.write_text(json.dumps(data, indent=1))


@nox.session
@nox.parametrize(("python", "django"), COMBINATIONS, ids=[f"{p}-{d}" for p, d in COMBINATIONS])
def matrix(session: nox.Session, django: str) -> None:
    """tests/tasks, tests/host and the wheel-in-a-new-project check on one combination."""
    python = str(session.python)
    started = time.monotonic()
    install(session, django)
    results = Results(session, python, django)
    results.suites["install"] = {
        "result": "PASSED",
        "seconds": round(time.monotonic() - started, 1),
    }
    chosen = session.posargs or ["tasks", "host", "wheel"]
    session.chdir(ROOT)
    # Two workers (pytest-xdist, in the test extra): the matrix is the longest part of a CI
    # run, and each suite spends most of its time waiting on Redis and the servers.
    if "tasks" in chosen:
        results.run("tasks", *PYTEST, "-n", "2", "tests/tasks")
    if "host" in chosen:
        results.run("host", *PYTEST, "-n", "2", "tests/host", "--ds=tests.hostproject.settings")
    if "wheel" in chosen:
        venv_bin = Path(session.bin)
        results.run(
            "wheel",
            "bash",
            str(ROOT / ".ci" / "wheel-project.sh"),
            env={
                # Builds the wheel with this session's interpreter and installs it, with
                # this Django release, into a fresh virtualenv of the same Python.
                "MQ_BUILD_PYTHON": str(venv_bin / "python"),
                "MQ_PROJECT_PYTHON": str(venv_bin / "python"),
                "MQ_DJANGO": DJANGO[django],
            },
        )


@nox.session
@nox.parametrize(("python", "django"), [OLDEST, NEWEST], ids=["oldest", "newest"])
def full(session: nox.Session, django: str) -> None:
    """The whole suite (pytest defaults of pyproject.toml) on the oldest or newest combination."""
    # ``docs``: tests/docs builds the documentation site as `make test` does.
    install(session, django, f"{EXTRAS},docs")
    session.chdir(ROOT)
    # No -x: one run of the whole suite reports every failure, not just the first.
    session.run(*[arg for arg in PYTEST if arg != "-x"], *session.posargs)
