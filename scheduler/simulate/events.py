"""The simulator's event queue: job arrivals and job completions, ordered by time.

A completion can be cancelled (the job was evicted before it finished). Rather than searching the heap, each
completion carries the *run id* of the run it ends; a cancelled run simply gets a new id, and a popped
completion whose id no longer matches is dropped (lazy deletion).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator

ARRIVAL = "arrival"
COMPLETION = "completion"


@dataclass(frozen=True)
class Event:
    """One event: ``kind`` is :data:`ARRIVAL` (``payload`` = the Job) or :data:`COMPLETION`
    (``payload`` = the job key, ``run_id`` = the run it ends)."""

    time: float
    kind: str
    payload: Any
    run_id: int = 0


class EventQueue:
    """A time-ordered queue of arrivals and completions with cancellable completions.

    Events at the same time come out in the order they were pushed (a sequence number breaks ties), so a
    simulation is deterministic for a given input order.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Event]] = []
        self._seq = itertools.count()
        self._live_run: dict[str, int] = {}   # job key -> run id of its scheduled completion
        self._run_ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._heap)

    def push_arrival(self, time: float, job: Any) -> None:
        """Schedule ``job`` to arrive at ``time``."""
        self._push(Event(float(time), ARRIVAL, job))

    def schedule_completion(self, time: float, job_key: str) -> int:
        """Schedule the end of the current run of ``job_key`` at ``time``; replaces any earlier one.

        Returns the run id.
        """
        run_id = next(self._run_ids)
        self._live_run[job_key] = run_id
        self._push(Event(float(time), COMPLETION, job_key, run_id))
        return run_id

    def cancel_completion(self, job_key: str) -> bool:
        """Forget the scheduled completion of ``job_key`` (evicted: its run ended early). True if one existed."""
        return self._live_run.pop(job_key, None) is not None

    def has_completion(self, job_key: str) -> bool:
        return job_key in self._live_run

    def next_time(self) -> float:
        """Time of the next live event, ``inf`` when there is none."""
        self._drop_cancelled_head()
        return self._heap[0][0] if self._heap else math.inf

    def pop_until(self, time: float) -> Iterator[Event]:
        """Pop, in time order, every live event with ``event.time <= time``."""
        while True:
            self._drop_cancelled_head()
            if not self._heap or self._heap[0][0] > time:
                return
            event = heapq.heappop(self._heap)[2]
            if event.kind == COMPLETION:
                del self._live_run[event.payload]
            yield event

    def _push(self, event: Event) -> None:
        heapq.heappush(self._heap, (event.time, next(self._seq), event))

    def _drop_cancelled_head(self) -> None:
        heap = self._heap
        while heap:
            event = heap[0][2]
            if event.kind != COMPLETION or self._live_run.get(event.payload) == event.run_id:
                return
            heapq.heappop(heap)
