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


def problem_text(head: str, problems: list[tuple[str, str]]) -> str:
    """``head: path: message`` on one line for one problem; else the head, then one indented line each."""
    lines = [f"{path}: {msg}" for path, msg in problems]
    if len(lines) == 1:
        return f"{head}: {lines[0]}"
    return f"{head} ({len(lines)} problems):\n  " + "\n  ".join(lines)


class SourceError(KaidashError):
    """A data source (kube, KAI zip, trace, Prometheus) could not deliver."""


class EngineError(KaidashError):
    """The engine was asked to do something impossible (a bug or an inconsistent snapshot)."""
