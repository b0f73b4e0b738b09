"""Scheduling actions, registered by name and run in the order a cycle lists them.

An action is a callable ``action(session) -> None`` that asks the session for jobs, nodes and fits and
records its decisions through :class:`scheduler.session.Statement`. ``allocate`` lives here; reclaim,
preempt, consolidation and stale-gang eviction register themselves the same way::

    from scheduler.actions import register_action
    register_action("reclaim", reclaim)

Action modules listed in :data:`ACTION_MODULES` are imported on first use, so adding an action is one
module plus one line there.
"""

from __future__ import annotations

import importlib
from typing import Callable

from ..errors import EngineError
from ..model import ACTIONS as KNOWN_ACTIONS

Action = Callable[[object], None]

_REGISTRY: dict[str, Action] = {}

ACTION_MODULES = [
    "scheduler.actions.allocate",
    "scheduler.actions.consolidation",
    "scheduler.actions.reclaim",
    "scheduler.actions.preempt",
    "scheduler.actions.stalegangeviction",
]
_loaded = False


def register_action(name: str, action: Action) -> None:
    """Make ``action`` runnable under ``name``."""
    _REGISTRY[name] = action


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for path in ACTION_MODULES:
        try:
            importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name != path:
                raise


def get_action(name: str) -> Action | None:
    """The action registered as ``name``; None for a KAI action this build does not implement yet;
    :class:`EngineError` for a name KAI does not have."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in KNOWN_ACTIONS:
        return None
    raise EngineError(f"unknown action {name!r} (known: {', '.join(sorted(set(KNOWN_ACTIONS) | set(_REGISTRY)))})")


def registered_actions() -> list[str]:
    """Names of the actions that can run."""
    _load()
    return sorted(_REGISTRY)
