"""Panel views, one per page of the dashboard; each is a ``pn.viewable.Viewer`` over a model of
:mod:`dashboard.models` and renders alike in a served app and in Jupyter (``pn.extension(); QueuesView(state)``).
"""

from .gpus import GpusView
from .overview import OverviewView
from .pending import PendingView
from .queues import QueuesView
from .settings import SettingsView
from .snapshot import SnapshotView
from .timeline import TimelineView
from .whatif import WhatIfView

__all__ = ["OverviewView", "QueuesView", "GpusView", "PendingView", "WhatIfView", "TimelineView", "SnapshotView",
           "SettingsView"]
