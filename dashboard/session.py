"""What one browser session looks at: the process's shared live state, or a private source of its own.

Exploring is private by default: importing a snapshot or applying Settings gives *this* session its own
:class:`~dashboard.state.LiveState` (a static tick, or a private :class:`~dashboard.loop.LiveLoop` thread that
stops with the session) while every other session keeps the shared live view. Switching the *shared* source
needs the ``source-admin`` role of the access map (``dashboard.auth``); it then happens for every session and
is announced to each of them (:meth:`LiveState.announce`).

No Panel import: the dashboard subscribes with :meth:`SessionSource.on_change` and rebuilds its views.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from scheduler.model import Snapshot

from .feeds import Feed
from .loop import LiveLoop, MetricsReader, publish_snapshot
from .options import SourceOptions
from .state import LiveState

log = logging.getLogger("kaidash.session")

ONLY_YOU = "only you see this"


class SessionSource:
    """The source of one session's views, shared or private, and the switches between them.

    ``scope`` wraps any state this session reads (a restricted user's :class:`dashboard.auth.ScopedState`), so
    a private source shows that user no more than the shared one would.
    """

    def __init__(self, shared: LiveState, shared_loop: Optional[LiveLoop] = None, may_change_shared: bool = False,
                 user: str = "", scope: Optional[Callable[[LiveState], LiveState]] = None):
        self.shared = shared
        self.shared_loop = shared_loop
        self.may_change_shared = bool(may_change_shared and shared_loop is not None)
        self.user = user
        self._scope = scope or (lambda state: state)
        self._private: Optional[LiveState] = None
        self._private_loop: Optional[LiveLoop] = None
        self.private_label = ""
        self._listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------------------------ reading

    @property
    def state(self) -> LiveState:
        """The state this session's views render."""
        return self._private if self._private is not None else self.shared

    @property
    def private(self) -> bool:
        return self._private is not None

    @property
    def shared_options(self) -> SourceOptions:
        return self.shared_loop.options if self.shared_loop is not None else SourceOptions()

    @property
    def options(self) -> SourceOptions:
        """The options of what this session looks at (its private loop's, else the shared loop's)."""
        if self._private_loop is not None:
            return self._private_loop.options
        return self.shared_options

    def on_change(self, callback: Callable[[], None]) -> None:
        """``callback()`` after every switch (the dashboard rebuilds its views)."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        for cb in list(self._listeners):
            cb()

    # ------------------------------------------------------------------------------------ private

    def use_snapshot(self, snapshot: Snapshot, label: str) -> LiveState:
        """This session shows ``snapshot`` (scheduled once, static); nobody else is affected."""
        self._stop_private()
        state = LiveState()
        publish_snapshot(state, snapshot, label, MetricsReader(), insight=True)
        self._set_private(state, f"{label} ({ONLY_YOU})")
        return self.state

    def use_options(self, options: SourceOptions, feed: Optional[Feed] = None) -> LiveState:
        """This session runs its own loop on ``options`` (ticks until the session ends or goes back);
        ``feed``: one already built from them (a snapshot file read and checked before switching)."""
        self._stop_private()
        state = LiveState(period_s=options.period_s)
        loop = LiveLoop(options, state=state, feed=feed, publish_metrics=False)
        loop.step()
        if not loop.feed or not getattr(loop.feed, "static", True):
            loop.start()
        self._private_loop = loop
        self._set_private(state, f"{options.label()} ({ONLY_YOU})")
        return self.state

    def back_to_shared(self) -> None:
        """Drop the private source; show the shared live state again."""
        if self._private is None:
            return
        self._stop_private()
        self._private = None
        self.private_label = ""
        self._changed()

    def _set_private(self, state: LiveState, label: str) -> None:
        self._private = self._scope(state)
        self.private_label = label
        self._changed()

    def _stop_private(self) -> None:
        if self._private_loop is not None:
            self._private_loop.stop()
            self._private_loop = None
        detach = getattr(self._private, "detach", None)
        if callable(detach):
            detach()

    def close(self) -> None:
        """Session end: stop the private loop, if any."""
        self._stop_private()

    # ------------------------------------------------------------------------------------ shared

    def _require_role(self) -> None:
        if not self.may_change_shared:
            raise PermissionError("switching the shared source needs the source-admin role of the access map "
                                  "(--access-map); your changes apply to your session only")

    def share_snapshot(self, snapshot: Snapshot, label: str) -> None:
        """Every session shows ``snapshot`` from now on (``source-admin`` only); announced to all."""
        self._require_role()
        self.shared_loop.use_snapshot(snapshot, label)
        self._announce(label)

    def share_options(self, options: SourceOptions, feed: Optional[Feed] = None) -> None:
        """The shared loop restarts on ``options`` (``source-admin`` only); announced to all."""
        self._require_role()
        self.shared_loop.switch(options, feed=feed)
        self._announce(options.label())

    def share_configured(self) -> None:
        """The shared loop goes back to the options it was started with (``source-admin`` only)."""
        self._require_role()
        self.shared_loop.switch(self.shared_loop.options)
        self._announce(self.shared_loop.options.label())

    def _announce(self, label: str) -> None:
        self.shared_loop.step()
        who = self.user or "an administrator"
        self.shared_loop.state.announce(f"{who} switched the shared source for everyone to: {label}", by=who)
        log.info("shared source switched to %s by %s", label, who)
        if self._private is not None:
            self.back_to_shared()
        else:
            self._changed()


__all__ = ["SessionSource", "ONLY_YOU"]
