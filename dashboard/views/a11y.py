"""Accessible names for controls Bokeh and Panel render without one.

A slider's handle (``role="slider"``) carries its value but no name: a screen reader says "slider, 3" without
saying which. A chart is a bare ``<canvas>``. A file input has no label. Bokeh renders these inside shadow
roots that the page's own markup cannot reach, so :class:`AccessibleNames` (an invisible component on every
page) walks the open shadow roots every few seconds and names what is unnamed:

* a slider handle gets its slider's title (``GPU limit``);
* a chart canvas becomes ``role="img"`` named "chart: hover for values" (the numbers are in the tables and
  the GPU grid has a text alternative, a per-node table);
* a file input is named by its ``accept`` list ("snapshot file (.yaml, .yml, .json, .zip)").

Only elements without an ``aria-label`` are touched, so a name set elsewhere wins.
"""

from __future__ import annotations

import param
from panel.reactive import ReactiveHTML


class AccessibleNames(ReactiveHTML):
    """Invisible; names unnamed controls on the page (see the module docstring)."""

    every_ms = param.Integer(default=2000, bounds=(200, None))

    _template = '<div id="a11y" style="display:none" data-a11y="names"></div>'

    _scripts = {
        "render": """
const name_all = () => {
  const walk = (root) => {
    for (const h of root.querySelectorAll('.noUi-handle:not([aria-label])')) {
      const title = root.querySelector('.bk-slider-title')
      if (title) h.setAttribute('aria-label', title.textContent.split(':')[0].trim())
    }
    for (const c of root.querySelectorAll('canvas:not([aria-label])')) {
      c.setAttribute('role', 'img')
      c.setAttribute('aria-label', 'chart: hover for values')
    }
    for (const f of root.querySelectorAll('input[type="file"]:not([aria-label])')) {
      f.setAttribute('aria-label', 'snapshot file (' + (f.accept || 'any').split(',').join(', ') + ')')
    }
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot)
    }
  }
  walk(document)
  a11y.dataset.named = String(Date.now())
}
state.timer = setInterval(name_all, data.every_ms)
setTimeout(name_all, 300)
""",
        "remove": "clearInterval(state.timer)",
    }


__all__ = ["AccessibleNames"]
