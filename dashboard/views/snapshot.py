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

from .. import display, models as M
from ..auth import may_import
from ..models import ViewModel
from .base import View
from .common import download_button, widget_args

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


UPLOAD_LABEL = "Snapshot file (.yaml, .yml, .json or a KAI .zip)"


class SnapshotView(View):
    """Import a snapshot into this session (or, with the source-admin role, for everyone) and export what is
    on screen."""

    model_class = ViewModel
    title = "Snapshot"

    def __init__(self, state=None, selection=None, model=None, source=None, **params):
        self.source = source
        super().__init__(state, selection, model, **params)

    def _build(self):
        shared_ok = self.source is not None and self.source.may_change_shared
        self.upload = pn.widgets.FileInput(accept=".yaml,.yml,.json,.zip", multiple=False,
                                           # the visible label (Panel 1.9 shows it; "snapshot-file" read as a bug)
                                           **widget_args(label=UPLOAD_LABEL),
                                           disabled=not may_import(self.state))
        self.load_btn = pn.widgets.Button(**widget_args(label="Load into my session", button_type="primary"))
        self.load_btn.on_click(lambda e: self.import_file())
        self.share_btn = pn.widgets.Button(**widget_args(label="Load for everyone (shared source)",
                                                         button_type="danger", button_style="outline",
                                                         visible=shared_ok))
        self.share_btn.on_click(lambda e: self.import_file(shared=True))
        self.back_btn = pn.widgets.Button(**widget_args(label="Back to the shared live view", button_type="primary",
                                                        button_style="outline"))
        self.back_btn.on_click(lambda e: self._back())
        self.share_back_btn = pn.widgets.Button(**widget_args(label="Shared source back to its configured options",
                                                              button_type="danger", button_style="outline",
                                                              visible=shared_ok))
        self.share_back_btn.on_click(lambda e: self._back(shared=True))
        self.message = pn.pane.HTML("", sizing_mode="stretch_width")
        self.current = pn.pane.HTML("", sizing_mode="stretch_width")
        downloads = [download_button(lambda f=f: self._snapshot_text(f), f"kaidash-snapshot.{f}",
                                     f"Snapshot ({f.upper()})", width=200) for f in ("yaml", "json")]
        table_rows = []
        for name in TABLES:
            table_rows.append(pn.Row(
                pn.pane.HTML(f"<b>{name}</b>", width=110),
                download_button(lambda n=name: self._table_bytes(n, "csv"), f"{name}.csv", f"{name} as CSV",
                                width=180),
                download_button(lambda n=name: self._table_bytes(n, "parquet"), f"{name}.parquet",
                                f"{name} as Parquet", width=200)))
        who = ("You hold the <b>source-admin</b> role: <i>Load for everyone</i> switches the shared source for "
               "every session, and each of them is told." if shared_ok else
               "Switching the shared source for everyone needs the <b>source-admin</b> role of the access map.")
        return pn.Column(
            pn.Card(pn.Column(pn.pane.HTML('<div class="kd-muted">Our snapshot format (YAML/JSON, '
                                           'docs/snapshot-format.md) or the zip KAI\'s scheduler serves at '
                                           '<code>/get-snapshot</code>. It '
                                           'opens in <b>your session only</b> (static) until you go back; everyone '
                                           f'else keeps the live view. {who}</div>'),
                              self.upload, pn.Row(self.load_btn, self.back_btn),
                              pn.Row(self.share_btn, self.share_back_btn), self.message),
                    title="Import", sizing_mode="stretch_width", collapsible=False),
            pn.Card(pn.Column(self.current, pn.Row(*downloads), pn.pane.HTML("<b>Tables</b> (as the views show them)"),
                              *table_rows),
                    title="Export", sizing_mode="stretch_width", collapsible=False),
            sizing_mode="stretch_width")

    # ---------------------------------------------------------------------------------------- import

    def import_file(self, filename: Optional[str] = None, data: Optional[bytes] = None, shared: bool = False) -> bool:
        """Load the uploaded (or given) file into this session (``shared``: for everyone); errors name the field."""
        filename = filename or self.upload.filename
        if not may_import(self.state):   # refused before a byte is parsed (a restricted user's session)
            self.message.object = ('<div class="kd-banner" data-import="refused">Importing a snapshot is not '
                                   'available to you: your access covers some queues only.</div>')
            return False
        data = data if data is not None else self.upload.value
        if not data:
            self.message.object = '<div class="kd-banner">Choose a file first.</div>'
            return False
        try:
            snap = load_uploaded(filename, data)
        except (KaidashError, ValueError, OSError) as exc:
            self.message.object = (f'<div class="kd-banner" data-import="error">Could not import '
                                   f'{html.escape(filename or "")}:<pre style="white-space:pre-wrap;margin:4px 0 0">'
                                   f'{html.escape(str(exc))}</pre></div>')
            return False
        label = f"imported {filename}"
        if self.source is None:
            from ..loop import publish_snapshot

            publish_snapshot(self.state, snap, label)
            self.model.sync()
            self._update()
        elif shared:
            try:
                self.source.share_snapshot(snap, label)
            except PermissionError as exc:
                self.message.object = f'<div class="kd-banner">{html.escape(str(exc))}</div>'
                return False
        else:
            self.source.use_snapshot(snap, label)     # the dashboard rebuilds every view on it
        self.message.object = (f'<div class="kd-explain" data-import="ok">Imported <b>{html.escape(filename)}</b>: '
                               f'{len(snap.nodes)} nodes, {len(snap.queues)} queues, {len(snap.jobs)} jobs. '
                               + ("Every session now shows it." if shared else "Every view of your session shows it.")
                               + '</div>')
        return True

    def _back(self, shared: bool = False) -> None:
        if self.source is None:
            return
        if shared:
            try:
                self.source.share_configured()
            except PermissionError as exc:
                self.message.object = f'<div class="kd-banner">{html.escape(str(exc))}</div>'
        else:
            self.source.back_to_shared()

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
                               f'{len(s.nodes)} nodes, {len(s.queues)} queues, {len(s.jobs)} jobs · {display.tick(tick)}'
                               f'</div>')
