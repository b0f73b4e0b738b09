"""A quiet server log: a browser closing its page is not an error.

When a tab closes (or reloads) while its messages are still in flight, Bokeh's server logs an ``ERROR`` with a
traceback for every message that arrives after the session detached (``assert self._session is not None`` in
``bokeh/server/connection.py``), a ``WARNING`` for every reply it could not send, and asyncio an ``ERROR``
("Task exception was never retrieved") for every write to the closed websocket. An ordinary hour of
browsing produced 154 such tracebacks. :func:`quiet_closed_sessions` installs a filter that turns exactly these
records into one ``DEBUG`` line each (logger ``kaidash.sessions``); every other error still gets logged as
it was.
"""

from __future__ import annotations

import logging
import traceback

SESSIONS_LOG = logging.getLogger("kaidash.sessions")

_HANDLER_LOGGER = "bokeh.server.protocol_handler"
_WS_LOGGER = "bokeh.server.views.ws"
_ASYNCIO_LOGGER = "asyncio"
_CLOSED_ERRORS = ("WebSocketClosedError", "StreamClosedError")
_CLOSED_PHRASES = ("connection was closed", "WebSocketClosedError", "Stream is closed")


def is_closed_session_noise(record: logging.LogRecord) -> bool:
    """True for the log records Bokeh writes when a page goes away mid-conversation."""
    if record.name == _WS_LOGGER and record.levelno <= logging.WARNING:
        return any(p in record.getMessage() for p in _CLOSED_PHRASES)
    exc = record.exc_info[1] if record.exc_info else None
    if record.name == _ASYNCIO_LOGGER:     # "Task exception was never retrieved" for a write to a closed socket
        return exc is not None and type(exc).__name__ in _CLOSED_ERRORS
    if record.name == _HANDLER_LOGGER and exc is not None:
        tb = record.exc_info[2]
        if type(exc).__name__ in _CLOSED_ERRORS:
            return True
        if isinstance(exc, AssertionError) and tb is not None:
            last = traceback.extract_tb(tb)[-1]
            return last.filename.replace("\\", "/").endswith("bokeh/server/connection.py") and last.name == "session"
    return False


class ClosedSessionFilter(logging.Filter):
    """Drops closed-session noise from Bokeh's loggers, keeping a one-line DEBUG note of it."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if is_closed_session_noise(record):
            self.dropped += 1
            SESSIONS_LOG.debug("message for a closed session ignored (%s)", record.getMessage().splitlines()[0])
            return False
        return True


_FILTER = ClosedSessionFilter()


def quiet_closed_sessions() -> ClosedSessionFilter:
    """Install the filter on Bokeh's protocol-handler and websocket loggers (idempotent); returns it."""
    for name in (_HANDLER_LOGGER, _WS_LOGGER, _ASYNCIO_LOGGER):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    return _FILTER


__all__ = ["quiet_closed_sessions", "is_closed_session_noise", "ClosedSessionFilter"]
