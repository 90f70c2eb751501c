"""The deployment files under deploy/ only use commands and flags that exist.

deploy/Procfile, deploy/env.example and the systemd units of deploy/systemd/ are the files
docs/deployment.md shows (it includes them as they are) and tells operators to install.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def deployment_files() -> dict[str, str]:
    """File name -> text of every file under deploy/ (the units by their installed names)."""
    files = {
        "Procfile": (DEPLOY / "Procfile").read_text(),
        "env": (DEPLOY / "env.example").read_text(),
    }
    for unit in sorted((DEPLOY / "systemd").iterdir()):
        files[unit.name] = unit.read_text()
    return files


FILES = deployment_files()
SERVICES = sorted(name for name in FILES if name == "Procfile" or name.endswith(".service"))


def manage_invocations(text: str) -> list[list[str]]:
    """Every ``manage.py <command> <args>`` in ``text`` (shell defaults ${X:-d} -> d)."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text.replace("\\\n", " "))
    found = []
    for match in re.finditer(r"manage\.py ([^;|&'\n]+)", text):
        words = shlex.split(match.group(1).split(">")[0])
        found.append(words)
    return found


def test_deploy_holds_every_unit() -> None:
    assert set(FILES) == {
        "Procfile",
        "env",
        "mqadmin-web.service",
        "mqadmin-worker.service",
        "mqadmin-sweepers.service",
        "mqadmin-health.service",
        "mqadmin-health.timer",
    }


@pytest.mark.parametrize("name", SERVICES)
def test_every_manage_py_call_parses(name: str) -> None:
    invocations = manage_invocations(FILES[name])
    assert invocations, f"{name} runs no manage.py command"
    commands = get_commands()
    for words in invocations:
        command, args = words[0], words[1:]
        assert command in commands, f"{name}: unknown command {command}"
        parser = load_command_class(commands[command], command).create_parser("manage.py", command)
        parser.parse_args(args)  # exits (SystemExit) on an unknown flag


def test_health_checks_are_wired_in() -> None:
    procfile = FILES["Procfile"]
    assert "/healthz/" in procfile and "/readyz/" in procfile and "mqhealth --worker" in procfile
    units = FILES
    assert "/readyz/" in units["mqadmin-web.service"]
    assert "mqhealth --worker" in units["mqadmin-worker.service"]
    assert "mqhealth --sweepers" in units["mqadmin-sweepers.service"]
    health = units["mqadmin-health.service"]
    for unit in ("mqadmin-web", "mqadmin-worker", "mqadmin-sweepers"):
        assert f"systemctl restart {unit}.service" in health
    assert "OnUnitActiveSec=30s" in units["mqadmin-health.timer"]


def test_the_deployment_page_shows_every_file() -> None:
    """docs/deployment.md includes each file of deploy/ (mkdocs' snippets), none by a copy."""
    page = (ROOT / "docs" / "deployment.md").read_text()
    shown = set(re.findall(r'^--8<-- "(deploy/[^"]+)"$', page, re.M))
    on_disk = {str(path.relative_to(ROOT)) for path in DEPLOY.rglob("*") if path.is_file()}
    assert shown == on_disk
