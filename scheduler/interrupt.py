"""Cooperative interruption of long engine work.

A caller that may abandon an engine run — the dashboard's what-if worker, when a newer slider position supersedes
the one being computed — installs a check with :func:`interruptible`. The engine calls :func:`checkpoint` where
stopping loses nothing (before each victim scenario of an eviction search, the bulk of a heavy what-if cycle); a
check that raises there abandons the run at once instead of at the end of its cycle. The engine never mutates its
input snapshot, so an abandoned run leaves nothing behind. Checks are per thread: an engine run on another thread
(the live loop's) is not affected.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_local = threading.local()


@contextmanager
def interruptible(check: Callable[[], None]) -> Iterator[None]:
    """Run the block with ``check`` called at every engine :func:`checkpoint` on this thread; ``check`` raises to
    abandon the run (the exception propagates out of the engine call unchanged). Nests: the inner check applies
    inside, the outer one again after."""
    previous = getattr(_local, "check", None)
    _local.check = check
    try:
        yield
    finally:
        _local.check = previous


def checkpoint() -> None:
    """A point where the engine may be abandoned: calls this thread's check, if one is installed."""
    check = getattr(_local, "check", None)
    if check is not None:
        check()


__all__ = ["checkpoint", "interruptible"]
