"""Cooperative interruption of long engine work.

A caller that may abandon an engine run — the dashboard's what-if worker, when a newer slider position supersedes
the one being computed — installs a check with :func:`interruptible`. The engine calls :func:`checkpoint` where
stopping loses nothing (before each victim scenario of an eviction search, the bulk of a heavy what-if cycle); a
check that raises there abandons the run at once instead of at the end of its cycle. The engine never mutates its
input snapshot, so an abandoned run leaves nothing behind. Checks are per thread: an engine run on another thread
(the live loop's) is not affected.
"""

from __future__ import annotations

from typing import Callable, ContextManager

from .thread_slot import ThreadSlot

_check = ThreadSlot()


def interruptible(check: Callable[[], None]) -> ContextManager[None]:
    """Run the block with ``check`` called at every engine :func:`checkpoint` on this thread; ``check`` raises to
    abandon the run (the exception propagates out of the engine call unchanged). Nests: the inner check applies
    inside, the outer one again after."""
    return _check.holding(check)


def checkpoint() -> None:
    """A point where the engine may be abandoned: calls this thread's check, if one is installed."""
    check = _check.get()
    if check is not None:
        check()


__all__ = ["checkpoint", "interruptible"]
