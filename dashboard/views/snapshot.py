"""Snapshot: import (our YAML/JSON, a KAI /get-snapshot zip) and switch the app to it; export the current
snapshot in our format and every view's table as CSV or Parquet."""

from __future__ import annotations

import html
import io
import os
import tempfile
from typing import Callable, Optional

import pandas as pd
import panel as pn

from scheduler.errors import KaidashError
from scheduler.snapshot_io import dumps_snapshot, load_snapshot

from .. import models as M
from ..auth import may_import
from ..models import ViewModel
from .base import View

TABLES: dict[str, Callable] = {"queues": lambda t: M.queue_table(t, "gpu"), "jobs": M.jobs_table,
                               "pending": M.pending_table, "gpus": M.gpu_table, "gpu_slices": M.slices_table,
                               "next_cycle": M.overlay_table}   # what KAI would do: apart from the observed


def load_uploaded(filename: str, data: bytes):
    """A snapshot from uploaded bytes; the file name's extension picks the format (``.zip`` = KAI)."""
    suffix = os.path.splitext(filename or "")[1].lower() or ".yaml"
    if suffix not in (".yaml", ".yml", ".json", ".zip"):
        raise ValueError(f"{filename}: expected a .yaml, .yml, .json or KAI .zip snapshot")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, os.path.basename(filename) or f"upload{suffix}")
        with open(path, "wb") as fh:
            fh.write(data)
        return load_snapshot(path)


class SnapshotView(View):
    """Import a snapshot (the live loop switches to it) and export what is on screen."""

    model_class = ViewModel
    title = "Snapshot"

    def __init__(self, state=None, selection=None, model=None, loop=None, **params):
        self.loop = loop
        super().__init__(state, selection, model, **params)

    def _build(self):
        self.upload = pn.widgets.FileInput(accept=".yaml,.yml,.json,.zip", multiple=False, name="snapshot-file",
                                           disabled=not may_import(self.state))
        self.load_btn = pn.widgets.Button(name="Load and switch the dashboard to it", button_type="primary")
        self.load_btn.on_click(lambda e: self.import_file())
        self.back_btn = pn.widgets.Button(name="Back to the configured source", button_type="default",
                                          button_style="outline")
        self.back_btn.on_click(lambda e: self._back())
        self.message = pn.pane.HTML("", sizing_mode="stretch_width")
        self.current = pn.pane.HTML("", sizing_mode="stretch_width")
        downloads = [pn.widgets.FileDownload(callback=lambda f=f: self._snapshot_text(f),
                                             filename=f"kaidash-snapshot.{f}", label=f"Snapshot ({f.upper()})",
                                             button_type="success", button_style="outline", width=200)
                     for f in ("yaml", "json")]
        table_rows = []
        for name in TABLES:
            table_rows.append(pn.Row(
                pn.pane.HTML(f"<b>{name}</b>", width=110),
                pn.widgets.FileDownload(callback=lambda n=name: self._table_bytes(n, "csv"), filename=f"{name}.csv",
                                        label="CSV", button_style="outline", width=90),
                pn.widgets.FileDownload(callback=lambda n=name: self._table_bytes(n, "parquet"),
                                        filename=f"{name}.parquet", label="Parquet", button_style="outline",
                                        width=110)))
        return pn.Column(
            pn.Card(pn.Column(pn.pane.HTML('<div class="kd-muted">Our snapshot format (YAML/JSON, docs/snapshot-format.md)'
                                           ' or the zip KAI\'s scheduler serves at <code>/get-snapshot</code>. The '
                                           'dashboard then shows that snapshot (static) until you go back.</div>'),
                              self.upload, pn.Row(self.load_btn, self.back_btn), self.message),
                    title="Import", sizing_mode="stretch_width", collapsible=False),
            pn.Card(pn.Column(self.current, pn.Row(*downloads), pn.pane.HTML("<b>Tables</b> (as the views show them)"),
                              *table_rows),
                    title="Export", sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    # ---------------------------------------------------------------------------------------- import

    def import_file(self, filename: Optional[str] = None, data: Optional[bytes] = None) -> bool:
        """Load the uploaded (or given) file and switch the live loop to it; errors name the field."""
        filename = filename or self.upload.filename
        if not may_import(self.state):   # refused before a byte is parsed (a restricted user's session)
            self.message.object = ('<div class="kd-banner" data-import="refused">Importing a snapshot replaces '
                                   'what everyone sees; your access covers some queues only.</div>')
            return False
        data = data if data is not None else self.upload.value
        if not data:
            self.message.object = '<div class="kd-banner">Choose a file first.</div>'
            return False
        try:
            snap = load_uploaded(filename, data)
        except (KaidashError, ValueError, OSError) as exc:
            self.message.object = (f'<div class="kd-banner" data-import="error">Could not import {html.escape(filename or "")}:'
                                   f'<pre style="white-space:pre-wrap;margin:4px 0 0">{html.escape(str(exc))}</pre></div>')
            return False
        label = f"imported {filename}"
        if self.loop is not None:
            self.loop.use_snapshot(snap, label)
            self.loop.step()
        else:
            from ..loop import publish_snapshot

            publish_snapshot(self.state, snap, label)
        self.model.sync()
        jobs = len(snap.jobs)
        self.message.object = (f'<div class="kd-explain" data-import="ok">Imported <b>{html.escape(filename)}</b>: '
                               f'{len(snap.nodes)} nodes, {len(snap.queues)} queues, {jobs} jobs. Every view now '
                               f'shows it.</div>')
        self._update()
        return True

    def _back(self) -> None:
        if self.loop is not None:
            self.loop.switch(self.loop.options)
            self.loop.step()
            self.model.sync()
            self.message.object = '<div class="kd-explain">Back to the configured source.</div>'
            self._update()

    # ---------------------------------------------------------------------------------------- export

    def _snapshot_text(self, fmt: str):
        tick = self.model.tick
        if tick is None:
            return io.StringIO("")
        return io.StringIO(dumps_snapshot(tick.snapshot, fmt))

    def _table_bytes(self, name: str, fmt: str):
        df: pd.DataFrame = TABLES[name](self.model.tick)
        buf = io.BytesIO()
        if fmt == "csv":
            buf.write(df.to_csv(index=False).encode())
        else:
            df.to_parquet(buf, index=False)
        buf.seek(0)
        return buf

    def _update(self):
        st = self.state
        tick = self.model.tick
        if tick is None:
            self.current.object = '<div class="kd-muted">Nothing loaded yet.</div>'
            return
        s = tick.snapshot
        self.current.object = (f'<div class="kd-explain">Current: <b>{html.escape(st.source_label)}</b> · '
                               f'{len(s.nodes)} nodes, {len(s.queues)} queues, {len(s.jobs)} jobs · tick {tick.index}'
                               f'</div>')
