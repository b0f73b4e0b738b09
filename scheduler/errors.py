"""Error types, one per layer, each naming the object and field at fault."""

from __future__ import annotations


class KaidashError(Exception):
    """Base class of every error kaidash raises on purpose."""


class SnapshotError(KaidashError):
    """A snapshot (file or object) is invalid.

    ``problems`` is a list of ``(path, message)`` pairs; ``path`` names the object and field,
    e.g. ``jobs[train-a].tasks[train-a-0].gpu``.
    """

    def __init__(self, problems: list[tuple[str, str]] | str, message: str | None = None):
        if isinstance(problems, str):
            problems = [(problems, message or "invalid")]
        self.problems = list(problems)
        super().__init__(problem_text("invalid snapshot", self.problems))

    @property
    def path(self) -> str:
        """Path of the first problem."""
        return self.problems[0][0]


MAX_LINE = 400
"""Characters of one problem line in the message (a value quoted from a hostile file can be megabytes)."""
MAX_LINES = 100
"""Problem lines in the message; ``problems`` keeps every one."""


def _clip(line: str) -> str:
    line = line.replace("\n", "\\n")
    return line if len(line) <= MAX_LINE else f"{line[:MAX_LINE]}… ({len(line) - MAX_LINE:,} more characters)"


def problem_text(head: str, problems: list[tuple[str, str]]) -> str:
    """``head: path: message`` on one line for one problem; else the head, then one indented line each (at
    most :data:`MAX_LINES`, each at most :data:`MAX_LINE` characters)."""
    lines = [_clip(f"{path}: {msg}") for path, msg in problems]
    if len(lines) == 1:
        return f"{head}: {lines[0]}"
    more = f"\n  ... and {len(lines) - MAX_LINES:,} more" if len(lines) > MAX_LINES else ""
    return f"{head} ({len(lines)} problems):\n  " + "\n  ".join(lines[:MAX_LINES]) + more


class SourceError(KaidashError):
    """A data source (kube, KAI zip, trace, Prometheus) could not deliver."""


class EngineError(KaidashError):
    """The engine was asked to do something impossible (a bug or an inconsistent snapshot)."""
