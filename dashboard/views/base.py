"""The base of every view: a ``pn.viewable.Viewer`` over a model, refreshed by the session on new ticks."""

from __future__ import annotations

from typing import Callable, Optional

import panel as pn
import param

from ..models import Selection
from ..state import LiveState
from .common import ensure_css


class View(pn.viewable.Viewer):
    """A page of the dashboard. Subclasses set ``model_class`` and implement ``_build`` and ``_update``.

    ``_build`` creates the Panel components once; ``_update`` pushes the current tick's frames into them
    (called on construction and by :meth:`refresh` whenever the model picked up a new tick).
    """

    model_class = None
    title = ""

    def __init__(self, state: Optional[LiveState] = None, selection: Optional[Selection] = None,
                 model=None, **params):
        super().__init__(**params)
        ensure_css()
        if model is None:
            if state is None:
                raise ValueError(f"{type(self).__name__} needs a LiveState (or a model)")
            model = self.model_class(state, selection)
        self.model = model
        self._layout = self._build()
        self._update()

    @property
    def state(self) -> LiveState:
        return self.model.state

    @property
    def selection(self) -> Selection:
        return self.model.selection

    def refresh(self, force: bool = False) -> bool:
        """Re-render if a new tick was published (or ``force``); returns whether it re-rendered."""
        changed = self.model.sync()
        if changed or force:
            self._update()
        return changed or force

    def retarget(self, state: LiveState) -> None:
        """Render ``state`` from now on (the session switched source); views that keep no per-state widgets
        (Snapshot, Settings) use this instead of being rebuilt, so their messages stay on screen."""
        self.model.state = state
        self.model.sync()
        self._update()

    def fold(self) -> list[tuple[pn.layout.ListLike, int]]:
        """Where the first screen (1280×720) ends: ``(container, k)`` pairs whose children after the first ``k``
        lie below it. Nothing by default."""
        return []

    def defer_below_fold(self) -> Optional[Callable[[], None]]:
        """Take the children below the fold (:meth:`fold`) out of their containers, so that a new page's first
        document holds only what the first screen shows; returns the function that puts them back (or None when
        nothing was taken). The components stay built and updated; only their Bokeh models wait."""
        held = []
        for box, k in self.fold():
            if len(box.objects) > k:
                held.append((box, list(box.objects)))
                box.objects = box.objects[:k]
        if not held:
            return None

        def restore() -> None:
            for box, objects in held:
                box.objects = objects
        return restore

    def _build(self) -> pn.viewable.Viewable:
        raise NotImplementedError

    def _update(self) -> None:
        raise NotImplementedError

    def __panel__(self) -> pn.viewable.Viewable:
        return self._layout


def no_data(state: LiveState) -> str:
    if state.error:
        return f"**No data yet.** The source failed: `{state.error}`"
    return "**Waiting for the first tick…**"


__all__ = ["View", "no_data", "param"]
