"""The base of every view: a ``pn.viewable.Viewer`` over a model, refreshed by the session on new ticks."""

from __future__ import annotations

from typing import Optional

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
