"""The README's Procfile and systemd units only use commands and flags that exist.

They are published as code blocks of README "Deployment" (the repository's top level holds no
deployment files), each headed by the path it is saved under.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]


def deployment_files() -> dict[str, str]:
    """File name -> text of every deployment file README "Deployment" publishes."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Deployment\n") :]
    section = section[: section.index("\n## ", 1)]
    files = {}
    procfile = re.search(r"```procfile\n(.*?)```", section, re.S)
    assert procfile, "README Deployment has no Procfile block"
    files["Procfile"] = procfile.group(1)
    for match in re.finditer(r"`(/etc/[^`]+)`:\n\n```[a-z]*\n(.*?)```", section, re.S):
        files[Path(match.group(1)).name] = match.group(2)
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


def test_readme_publishes_every_unit() -> None:
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
