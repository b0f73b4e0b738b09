"""What a long engine run is doing right now, for a caller that shows it while it waits.

A heavy what-if cycle spends nearly all its time in one eviction search (a preemptor whose victim scenarios all
fail, each one a full re-placement of its victims), so "computing… 4,000 ms so far" alone leaves a user guessing.
A caller installs a listener with :func:`observing`; the engine wraps every eviction search
(``actions.solver.Solver.solve``) in :func:`searching`, which hands the listener a :class:`Search` holding the
search's live record (its ``tried`` count grows as scenarios are tried) when it starts, and ``None`` when it ends.
The listener keeps the current one and the caller reads it whenever it redraws (the dashboard's what-if status line, every 250 ms): nothing is formatted or copied per scenario.
Listeners are per thread, like :mod:`scheduler.interrupt`'s checks: the live loop's engine runs report nothing.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Optional

from .thread_slot import ThreadSlot

_listener = ThreadSlot()


@dataclass(frozen=True)
class Search:
    """One eviction search as it started: ``action`` (reclaim, preempt, consolidation), the preemptor ``job``
    and the ``pods`` it asks to place; ``record`` is the solver's live record (``tried`` grows while it runs)."""

    action: str
    job: str
    pods: int
    record: Any
    started: float = field(default_factory=time.perf_counter)

    @property
    def tried(self) -> int:
        """Victim scenarios tried so far (simulated or ruled out)."""
        return int(getattr(self.record, "tried", 0))

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def describe(self) -> str:
        """One line, e.g. ``reclaim is searching victims for team/train-7 (38 pods): 412 scenarios tried, 3.1 s``."""
        pods = f" ({self.pods} pods)" if self.pods > 1 else ""
        n = self.tried
        return (f"{self.action} is searching victims for {self.job}{pods}: {n:,} scenario{'s' if n != 1 else ''} "
                f"tried, {self.elapsed_ms() / 1000:.1f} s")


def observing(listener: Callable[[Optional[Search]], None]) -> ContextManager[None]:
    """Run the block with ``listener`` told of every eviction search the engine runs on this thread: a
    :class:`Search` when one starts, ``None`` when it ends. Nests: the inner listener applies inside, the outer
    one again after."""
    return _listener.holding(listener)


def searching(action: str, job: str, pods: int, record: Any) -> ContextManager[None]:
    """The engine's side: the ``with`` block is one eviction search (see the module doc). When nobody listens
    on this thread it costs one thread-local read and a shared do-nothing context."""
    listener = _listener.get()
    if listener is None:
        return _NOTHING
    return _told(listener, Search(action, job, pods, record))


_NOTHING = nullcontext()


@contextmanager
def _told(listener: Callable[[Optional[Search]], None], search: Search) -> Iterator[None]:
    listener(search)
    try:
        yield
    finally:
        listener(None)


__all__ = ["Search", "observing", "searching"]
