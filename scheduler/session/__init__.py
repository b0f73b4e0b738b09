"""One scheduling session: columnar node state, queue accounting and transactional statements.

``Session(snapshot, shares)`` opens a session (``shares`` from :func:`scheduler.fairshare.compute_fair_share`);
``Statement(session)`` records allocate / pipeline / evict with checkpoint / rollback / commit.
"""

from .core import (ACTIVE_ALLOCATED, ALIVE, COUNTS_IN_QUEUE, KIND_FRACTION, KIND_MEMORY, KIND_NONE, KIND_WHOLE,
                   OCCUPIES_NODE, JobInfo, NodeFit, PodSet, Session)
from .statement import Statement

__all__ = ["Session", "Statement", "JobInfo", "PodSet", "NodeFit", "KIND_NONE", "KIND_WHOLE", "KIND_FRACTION",
           "KIND_MEMORY", "OCCUPIES_NODE", "COUNTS_IN_QUEUE", "ACTIVE_ALLOCATED", "ALIVE"]
