"""A value per thread, set for the span of a ``with`` block: how a caller hands the engine something (a check, a
listener) that only its own thread's engine runs see (:mod:`scheduler.interrupt`, :mod:`scheduler.progress`)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional


class ThreadSlot:
    """One value per thread, ``None`` where none is set."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> Optional[Any]:
        return getattr(self._local, "value", None)

    @contextmanager
    def holding(self, value: Any) -> Iterator[None]:
        """Run the block with ``value`` set on this thread. Nests: the inner value applies inside, the outer one
        again after."""
        previous = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = previous


__all__ = ["ThreadSlot"]
