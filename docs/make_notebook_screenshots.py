"""Regenerate ``docs/screenshots/notebook-*.png``: one figure from each notebook.

Each notebook is executed with nbclient (from ``notebooks/``, like the tests); the figure chosen below (the value
of the cell whose source contains a marker) is saved as standalone HTML with inline Bokeh resources and
screenshotted with headless Chromium through Playwright::

    python docs/make_notebook_screenshots.py                  # all four
    python docs/make_notebook_screenshots.py fragmentation    # one

Needs ``nbclient``, ``ipykernel`` and ``playwright`` (test extras) and Chromium at ``/usr/bin/chromium``
(``KAIDASH_CHROMIUM`` overrides). Takes a couple of minutes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = os.environ.get("KAIDASH_CHROMIUM", "/usr/bin/chromium")

FIGURES = {
    # notebook: (marker in the source of the cell whose value is the figure, viewport width, height to keep)
    "fair-share": ("hv.Layout(level_plots)", 1300, None),
    "capacity-planning": ('hv.Layout([lines("mean pending jobs"', 1450, 330),
    "fragmentation": ('hv.Layout([curve_plot("frag_pct"', 1350, 440),
    "live-cluster": ("GpusView(state)", 1300, 480),   # the GPU grid, above the node's slice table
}

SAVE = """
import holoviews as _hv, panel as _pn
from bokeh.resources import INLINE as _INLINE
_fig = Out[{count}]
if isinstance(_fig, _hv.core.Dimensioned):
    _hv.save(_fig, {path!r}, backend="bokeh", resources=_INLINE)
else:
    _pn.panel(_fig).save({path!r}, resources=_INLINE)
"""


def figure_html(name: str, marker: str, html: Path) -> None:
    """Execute ``notebooks/<name>.ipynb`` and save the value of the cell containing ``marker`` as HTML."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and marker in c.source]
    if len(cells) != 1:
        raise SystemExit(f"{name}: {len(cells)} cells contain {marker!r} (expected 1)")
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
            if index == cells[0]:
                break
        save = nbformat.v4.new_code_cell(SAVE.format(count=nb.cells[cells[0]].execution_count, path=str(html)))
        nb.cells.append(save)
        client.execute_cell(save, len(nb.cells) - 1)


def screenshot(html: Path, png: Path, width: int, height: int | None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": width, "height": 600}, device_scale_factor=1)
        page.goto(html.as_uri())
        page.wait_for_selector("canvas", timeout=60_000)
        page.wait_for_timeout(2500)   # Bokeh lays out and paints after the canvas appears
        if height:
            page.screenshot(path=str(png), clip={"x": 0, "y": 0, "width": width, "height": height})
        else:
            page.screenshot(path=str(png), full_page=True)
        browser.close()


def main(names: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(FIGURES):
            marker, width, height = FIGURES[name]
            html = Path(tmp) / f"{name}.html"
            figure_html(name, marker, html)
            png = OUT / f"notebook-{name}.png"
            screenshot(html, png, width, height)
            print(f"wrote {png.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
