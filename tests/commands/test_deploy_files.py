"""The Procfile and the systemd units only use commands and flags that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "Procfile", *sorted((ROOT / "deploy" / "systemd").glob("*.service"))]


def manage_invocations(text: str) -> list[list[str]]:
    """Every ``manage.py <command> <args>`` in ``text`` (shell defaults ${X:-d} -> d)."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text.replace("\\\n", " "))
    found = []
    for match in re.finditer(r"manage\.py ([^;|&'\n]+)", text):
        words = shlex.split(match.group(1).split(">")[0])
        found.append(words)
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_manage_py_call_parses(path: Path) -> None:
    invocations = manage_invocations(path.read_text())
    assert invocations, f"{path.name} runs no manage.py command"
    commands = get_commands()
    for words in invocations:
        name, args = words[0], words[1:]
        assert name in commands, f"{path.name}: unknown command {name}"
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        parser.parse_args(args)  # exits (SystemExit) on an unknown flag


def test_health_checks_are_wired_in() -> None:
    procfile = (ROOT / "Procfile").read_text()
    assert "/healthz/" in procfile and "/readyz/" in procfile and "mqhealth --worker" in procfile
    units = {p.name: p.read_text() for p in (ROOT / "deploy" / "systemd").iterdir()}
    assert "/readyz/" in units["mqadmin-web.service"]
    assert "mqhealth --worker" in units["mqadmin-worker.service"]
    assert "mqhealth --sweepers" in units["mqadmin-sweepers.service"]
    health = units["mqadmin-health.service"]
    for unit in ("mqadmin-web", "mqadmin-worker", "mqadmin-sweepers"):
        assert f"systemctl restart {unit}.service" in health
    assert "OnUnitActiveSec=30s" in units["mqadmin-health.timer"]
