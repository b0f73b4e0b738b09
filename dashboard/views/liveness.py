"""Liveness the browser computes: the header's status badge and data age, a red banner when the page cannot be
trusted, and reconnection after a server restart.

The server only sends facts: the wall time of the last good tick (``tick_wall``), its own clock at each
heartbeat (``server_now``, so a skewed browser clock does not matter), the loop period and the source status.
Everything time-dependent runs in the page, so it keeps counting when the server is gone:

* the data age counts up every half second from ``tick_wall``;
* the connection is *lost* when Bokeh reports it closed (``connection_lost``) or when no heartbeat arrived
  for ``silent_after_s``; the data is *stale* when it is older than ``stale_after_s`` (a few periods) or the
  server says the source is failing;
* either way the badge turns red and a red full-width banner says what is wrong and since when;
* once the connection is closed (or silent for four times ``silent_after_s``) the page asks the server's
  ``/healthz`` every 2 s and reloads itself as soon as the server answers (a restarted server has no memory of
  this session, so a reload is the only way back).
"""

from __future__ import annotations

import param
from panel.reactive import ReactiveHTML

STATUS_TEXT = {"ok": "live", "static": "static snapshot", "starting": "starting", "degraded": "degraded",
               "stale": "source failing", "error": "source failing"}


class Liveness(ReactiveHTML):
    """The header's live status (badge, data age, source) and the page-wide red banner."""

    tick_wall = param.Number(default=None, allow_None=True, doc="wall time (server clock) of the last good tick")
    server_now = param.Number(default=0.0, doc="server clock when this heartbeat was sent")
    heartbeat = param.Integer(default=0, doc="increments on every server heartbeat")
    period_s = param.Number(default=2.0)
    stale_after_s = param.Number(default=15.0, doc="data older than this is stale")
    silent_after_s = param.Number(default=15.0, doc="no heartbeat for this long: the connection is lost")
    status = param.String(default="starting", doc="source status (dashboard.state.SOURCE_STATUSES)")
    label = param.String(default="", doc="the source, in words")
    error = param.String(default="", doc="why the source fails, when it does")
    static = param.Boolean(default=False, doc="a fixed snapshot: its data does not age")
    scope = param.String(default="", doc="'private: …' when this session looks at its own source")
    health_path = param.String(default="healthz", doc="probe asked before reloading (relative to the page)")
    reload_after_lost = param.Boolean(default=True, doc="reload the page when the server answers again")

    _template = """
<div id="live" class="kd-live"
     style="display:flex;align-items:center;gap:8px;color:#fff;font-size:14px;white-space:nowrap">
  <span id="badge" class="kd-badge" data-live="badge" role="status" aria-live="polite"
        style="background:#4b5563">starting</span>
  <span id="age" data-live="age">data age –</span>
  <span id="src" data-live="source" style="color:#d1d5db;overflow:hidden;text-overflow:ellipsis;max-width:520px"></span>
  <div id="banner" data-live="banner" role="alert" hidden
       style="position:fixed;top:0;left:0;right:0;z-index:100000;background:#b91c1c;color:#fff;font-weight:600;
              font-size:15px;padding:10px 16px;white-space:normal;box-shadow:0 2px 8px rgba(0,0,0,.5)"></div>
</div>
"""

    _scripts = {
        "render": """
state.offset = (data.server_now || Date.now() / 1000) - Date.now() / 1000
state.last_beat = Date.now()
state.closed_since = null
state.probing = null
state.fmt = (s) => {
  if (s == null || !isFinite(s)) return '–'
  s = Math.max(0, Math.round(s))
  if (s < 60) return s + 's'
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's'
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm'
  return Math.floor(s / 86400) + 'd' + String(Math.floor(s % 86400 / 3600)).padStart(2, '0') + 'h'
}
state.clock = (t) => t == null ? '–' : new Date(t * 1000).toLocaleTimeString([], {hour12: false})
state.probe = () => {
  if (!data.reload_after_lost || state.probing != null) return
  state.probing = setInterval(() => {
    fetch(new URL(data.health_path, window.location.href), {cache: 'no-store'})
      .then((r) => { if (r.status < 500) window.location.reload() })
      .catch(() => {})
  }, 2000)
}
state.update = () => {
  const now = Date.now() / 1000 + state.offset
  const silent_s = (Date.now() - state.last_beat) / 1000
  if (silent_s > 4 * data.silent_after_s) state.probe()
  const lost = state.closed_since != null || silent_s > data.silent_after_s
  const since = state.closed_since != null ? state.closed_since : state.last_beat / 1000
  const age_s = data.tick_wall == null ? null : now - data.tick_wall
  const failing = data.status === 'stale' || data.status === 'error'
  const stale = !data.static && age_s != null && age_s > data.stale_after_s
  let text, colour, msg = null
  if (lost) {
    text = 'disconnected'; colour = '#b91c1c'
    msg = (state.closed_since != null ? 'Connection to the kaidash server lost at ' + state.clock(since) :
           'No message from the kaidash server since ' + state.clock(since)) +
      ': nothing on this page updates. Data age ' + state.fmt(age_s) + ' (last tick ' + state.clock(data.tick_wall) +
      '). ' + (state.probing != null ? 'Reconnecting: the page reloads as soon as the server answers.' : '')
  } else if (failing || stale) {
    text = failing ? 'source failing' : 'stale'; colour = '#b91c1c'
    msg = (stale ? 'Data is ' + state.fmt(age_s) + ' old (last tick ' + state.clock(data.tick_wall) +
      ', one is expected every ' + state.fmt(data.period_s) + '). ' : 'Showing the last good state (tick at ' +
      state.clock(data.tick_wall) + '). ') + (data.error ? 'Source error: ' + data.error : '')
  } else if (data.status === 'degraded') {
    text = 'degraded'; colour = '#b45309'
  } else if (data.static) {
    text = 'static snapshot'; colour = '#1d4ed8'
  } else if (data.status === 'ok') {
    text = 'live'; colour = '#15803d'
  } else {
    text = data.status || 'starting'; colour = '#4b5563'
  }
  badge.textContent = text
  badge.style.background = colour
  badge.dataset.state = lost ? 'disconnected' : (failing || stale) ? 'stale' : data.status
  age.textContent = data.static ? 'loaded ' + state.clock(data.tick_wall) : 'data age ' + state.fmt(age_s)
  age.dataset.ageS = age_s == null ? '' : String(Math.round(age_s))
  src.textContent = (data.scope ? data.scope + ' · ' : '') + (data.label || '')
  if (msg) { banner.textContent = msg; banner.hidden = false } else { banner.hidden = true }
}
try {
  const doc = view.model.document
  doc.on_event('connection_lost', () => {
    if (state.closed_since == null) state.closed_since = Date.now() / 1000
    state.probe(); state.update()
  })
  doc.on_event('client_reconnected', () => { state.closed_since = null; state.last_beat = Date.now(); state.update() })
} catch (e) {}
state.timer = setInterval(state.update, 500)
state.update()
""",
        "heartbeat": """
state.last_beat = Date.now()
state.offset = data.server_now - Date.now() / 1000
state.update()
""",
        "status": "state.update()",
        "tick_wall": "state.update()",
        "remove": "clearInterval(state.timer); if (state.probing != null) clearInterval(state.probing)",
    }

    def beat(self, now: float, **facts) -> None:
        """One heartbeat from the session: the server's clock and whatever facts changed."""
        self.param.update(heartbeat=self.heartbeat + 1, server_now=now, **facts)


def thresholds(period_s: float, refresh_s: float) -> tuple[float, float]:
    """``(stale_after_s, silent_after_s)`` for a loop period and a session refresh interval.

    Data is stale after three periods plus a session refresh and 5 s of slack (a slow tick is not an outage);
    the connection counts as lost after 15 s without a heartbeat (a busy server answers within that)."""
    return 3 * period_s + refresh_s + 5.0, max(15.0, 5 * refresh_s)


__all__ = ["Liveness", "thresholds", "STATUS_TEXT"]
