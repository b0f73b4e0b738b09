"""deploy/Dockerfile, checked statically (no Docker engine runs on the development or CI machines).

A small parser turns the Dockerfile into instructions the way Docker reads them (comments, line
continuations, JSON and shell forms); the checks then say what the image must be: pinned base, non-root user,
port 5006, a health check on /healthz, and ``kaidash serve`` as its command.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import pytest

from scheduler.cli import COMMAND_MODULES

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` in order; raises ``ValueError`` on a line Docker would reject."""
    out = []
    pending = ""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # comments inside a continuation are dropped by Docker
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if not full:
            continue
        word, _, rest = full.partition(" ")
        if word.upper() not in INSTRUCTIONS:
            raise ValueError(f"line {lineno}: unknown instruction {word!r}")
        out.append((word.upper(), rest.strip()))
    if pending:
        raise ValueError("file ends inside a line continuation")
    return out


def exec_form(arguments: str) -> list[str]:
    """The JSON (exec) form of CMD/ENTRYPOINT as a list; raises ``ValueError`` for the shell form."""
    value = json.loads(arguments)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not an exec-form list: {arguments}")
    return value


def base_image_problems(instructions: list[tuple[str, str]]) -> list[str]:
    """A base image must name a tag other than ``latest``, or a digest."""
    problems = []
    for word, args in instructions:
        if word != "FROM":
            continue
        image = [a for a in args.split() if not a.startswith("--")][0]
        if "@sha256:" in image:
            continue
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        if not tag:
            problems.append(f"FROM {image}: no tag (means latest); pin a version tag or a digest")
        elif tag == "latest":
            problems.append(f"FROM {image}: the latest tag moves; pin a version tag or a digest")
    return problems


def final_user(instructions: list[tuple[str, str]]) -> str | None:
    users = [args for word, args in instructions if word == "USER"]
    return users[-1] if users else None


def is_non_root(user: str | None) -> bool:
    if user is None:
        return False
    name = user.split(":")[0]
    return name not in ("root", "0")


@pytest.fixture(scope="module")
def instructions():
    return parse_dockerfile(DOCKERFILE.read_text())


def _args(instructions, word) -> list[str]:
    return [a for w, a in instructions if w == word]


def test_dockerfile_parses_into_known_instructions(instructions):
    words = [w for w, _ in instructions]
    assert words[0] == "FROM" and words.count("FROM") == 1
    for required in ("USER", "EXPOSE", "HEALTHCHECK", "ENTRYPOINT", "CMD"):
        assert words.count(required) >= 1, required


def test_parser_rejects_what_docker_rejects():
    with pytest.raises(ValueError, match="unknown instruction 'RUNN'"):
        parse_dockerfile("FROM python:3.11-slim\nRUNN echo hi\n")
    with pytest.raises(ValueError, match="continuation"):
        parse_dockerfile("FROM python:3.11-slim\nRUN echo \\\n")
    assert parse_dockerfile("FROM a:1\nRUN a \\\n  # note\n  && b\n") == [("FROM", "a:1"), ("RUN", "a  && b")]


def test_base_image_is_python_311_slim_and_pinned(instructions):
    assert _args(instructions, "FROM")[0].split()[0].startswith("python:3.11-slim")
    assert base_image_problems(instructions) == []


@pytest.mark.parametrize("line, ok", [
    ("FROM python:latest", False),
    ("FROM python", False),
    ("FROM registry.local:5000/python", False),
    ("FROM registry.local:5000/python:3.11-slim", True),
    ("FROM python:3.11-slim@sha256:" + "0" * 64, True),
    ("FROM --platform=linux/amd64 python:3.11-slim", True),
])
def test_base_image_check_catches_unpinned_images(line, ok):
    assert (base_image_problems(parse_dockerfile(line)) == []) is ok


def test_image_runs_as_a_numeric_non_root_user(instructions):
    user = final_user(instructions)
    assert is_non_root(user)
    uid = user.split(":")[0]
    assert uid.isdigit(), "a numeric uid lets Kubernetes' runAsNonRoot verify it"
    created = " ".join(_args(instructions, "RUN"))
    assert re.search(rf"useradd\b[^&]*--uid {uid}\b", created), "USER must be a uid the image creates"
    # Nothing runs as root after the switch except what the base image defines.
    words = [w for w, _ in instructions]
    assert "RUN" not in words[words.index("USER"):]


@pytest.mark.parametrize("text, ok", [
    ("FROM a:1\n", False), ("FROM a:1\nUSER root\n", False), ("FROM a:1\nUSER 0:0\n", False),
    ("FROM a:1\nUSER 10001\nUSER root\n", False), ("FROM a:1\nUSER root\nUSER 10001:10001\n", True),
])
def test_non_root_check(text, ok):
    assert is_non_root(final_user(parse_dockerfile(text))) is ok


def test_exposes_5006_and_health_checks_healthz(instructions):
    assert _args(instructions, "EXPOSE") == ["5006"]
    health = _args(instructions, "HEALTHCHECK")[0]
    options, _, command = health.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    assert "http://127.0.0.1:5006/healthz" in " ".join(exec_form(command))


def test_entrypoint_is_kaidash_serve_on_all_interfaces(instructions):
    entrypoint = exec_form(_args(instructions, "ENTRYPOINT")[-1])
    cmd = exec_form(_args(instructions, "CMD")[-1])
    assert entrypoint + cmd == ["kaidash", "serve", "--address", "0.0.0.0", "--port", "5006"]


def test_kaidash_is_the_installed_console_script_and_serve_a_declared_subcommand():
    """The ENTRYPOINT exists once the package is pip-installed, and `serve` is one of its subcommands."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["kaidash"] == "scheduler.cli:main"
    assert "dashboard.serve_command" in COMMAND_MODULES


@pytest.mark.skipif(not (ROOT / "dashboard" / "serve_command.py").exists(),
                    reason="`kaidash serve` is not built yet (dashboard/serve_command.py, issue 6)")
def test_cmd_parses_with_the_real_kaidash_cli(instructions):
    from scheduler.cli import build_parser

    parser, handlers = build_parser()
    args = parser.parse_args(exec_form(_args(instructions, "CMD")[-1]))
    assert args.command == "serve" and "serve" in handlers


def test_dockerignore_keeps_what_the_install_needs():
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    needed = ["pyproject.toml", "README.md", "scheduler/cli.py", "dashboard/__init__.py", "examples/small-cluster.yaml"]
    for path in needed:
        assert (ROOT / path).exists(), path
        hits = [p for p in patterns if fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.split("/")[0], p)]
        assert not hits, f"{path} would be left out of the build context by {hits}"
    for path in ("tests/test_deploy_dockerfile.py", ".git/HEAD"):
        assert any(fnmatch.fnmatch(path.split("/")[0], p) for p in patterns), path
