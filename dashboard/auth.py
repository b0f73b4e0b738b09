"""Who can see what: Panel's built-in authentication wired into ``kaidash serve``, and per-user queue scopes.

* Authentication is Panel's own: basic auth (one shared password, or a JSON file of user → password) or OAuth
  (``generic`` OIDC, or a built-in provider). :func:`add_auth_arguments` adds the flags, :func:`serve_kwargs`
  turns flags and environment (``KAIDASH_*``, else Panel's ``PANEL_*``) into ``pn.serve`` keyword arguments.
* Authorisation is optional: an :class:`AccessMap` (YAML, ``--access-map FILE``) maps users and groups to the
  queues they may see; a department (a parent queue) grants its whole subtree; ``"*"`` grants everything.
  :meth:`AccessMap.authorize` is Panel's ``authorize_callback`` (users with no grant get Panel's
  "unauthorized" page). For a permitted user, :class:`ScopedState` stands between the process's
  :class:`~dashboard.state.LiveState` and that session's views: the one place where ticks are filtered
  (queues, their jobs, GPU slices, decisions, explanations, DCGM rows, history).

Access map format::

    users:                      # user name as the login provides it (basic auth name, OIDC email / claim)
      alice: [llm]              # a leaf queue
      bob@example.com: [research]   # a department: research and every queue below it
      carol: "*"                # everything (and the Settings / Snapshot pages)
    groups:                     # OIDC ``groups`` claim of the user info
      ml-platform: "*"
    default: []                 # everyone else: nothing (refused); "*" would let every login see everything

No Panel import at module level (the filtering is plain data; the CLI imports this without the UI stack).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import secrets
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

import pandas as pd

from scheduler.errors import SourceError
from scheduler.scoping import HIDDEN_JOB, Redactor

from .state import HistoryRecord, LiveState, Tick, TickHistory

log = logging.getLogger("kaidash.auth")

ALL = "*"
Grant = Union[str, frozenset]       # ALL, or a frozenset of queue names as written in the map


# ------------------------------------------------------------------------------------------- access map

class AccessMap:
    """Users and groups → queues (or departments) they may see."""

    def __init__(self, users: Optional[Mapping[str, Any]] = None, groups: Optional[Mapping[str, Any]] = None,
                 default: Any = (), source: str = "access map"):
        self.source = source
        self.users = {str(k): _grant(v, f"{source}: users.{k}") for k, v in (users or {}).items()}
        self.groups = {str(k): _grant(v, f"{source}: groups.{k}") for k, v in (groups or {}).items()}
        self.default = _grant(default, f"{source}: default")

    @classmethod
    def from_dict(cls, doc: Any, source: str = "access map") -> "AccessMap":
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise SourceError(f"{source}: expected a mapping with users / groups / default, got {type(doc).__name__}")
        unknown = set(doc) - {"users", "groups", "default"}
        if unknown:
            raise SourceError(f"{source}: unknown key {sorted(unknown)[0]!r} (expected users, groups, default)")
        for key in ("users", "groups"):
            if doc.get(key) is not None and not isinstance(doc[key], dict):
                raise SourceError(f"{source}: {key} must map names to a list of queues or \"*\"")
        return cls(doc.get("users"), doc.get("groups"), doc.get("default", []), source)

    @classmethod
    def load(cls, path: Union[str, Path]) -> "AccessMap":
        """Read a YAML (or JSON) access map; errors name the file and the entry."""
        import yaml

        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise SourceError(f"access map {path}: cannot read: {exc}") from exc
        except yaml.YAMLError as exc:
            raise SourceError(f"access map {path}: not valid YAML: {exc}") from exc
        return cls.from_dict(doc, f"access map {path}")

    def grant(self, user: Optional[str], groups: Iterable[str] = ()) -> Grant:
        """Everything ``user`` (with ``groups``) may see: :data:`ALL` or the queue names granted."""
        grants = []
        if user is not None and user in self.users:
            grants.append(self.users[user])
        grants += [self.groups[g] for g in groups or () if g in self.groups]
        if not grants:
            grants = [self.default]
        if any(g == ALL for g in grants):
            return ALL
        return frozenset().union(*grants)

    def authorize(self, user_info: Optional[dict], request_path: str = "") -> bool:
        """Panel's ``authorize_callback``: may this login open the dashboard at all?"""
        user, groups = user_and_groups(user_info)
        return self.grant(user, groups) != frozenset()


def _grant(value: Any, where: str) -> Grant:
    if value == ALL:
        return ALL
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        return frozenset(value)
    raise SourceError(f"{where}: expected a list of queue names or \"*\", got {value!r}")


def user_and_groups(user_info: Optional[dict]) -> tuple[Optional[str], list[str]]:
    """The user name and groups of Panel's ``user_info`` (``user`` key, else the usual OIDC claims)."""
    info = user_info or {}
    user = info.get("user") or info.get("email") or info.get("preferred_username") or info.get("login")
    groups = info.get("groups") or []
    if isinstance(groups, str):
        groups = [groups]
    return (str(user) if user else None), [str(g) for g in groups]


def expand(granted: Grant, queues) -> Optional[frozenset]:
    """Queue names visible under ``granted`` in a snapshot's ``queues``: each granted queue and every queue
    below it. ``None`` means everything (no filtering)."""
    if granted == ALL:
        return None
    children: dict[Optional[str], list[str]] = {}
    for q in queues:
        children.setdefault(q.parent, []).append(q.name)
    out: set[str] = set()
    todo = [q for q in granted]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        todo.extend(children.get(name, []))
    names = {q.name for q in queues}
    return frozenset(out & names)


# ------------------------------------------------------------------------------------------- filtering

def scope_tick(tick: Optional[Tick], granted: Grant) -> Optional[Tick]:
    """The part of ``tick`` a user granted ``granted`` may see (the tick itself for :data:`ALL`).

    Kept: every node (capacity is not a secret), the permitted queues (a permitted queue whose parent is not
    permitted becomes a root), their jobs and tasks, their decisions, explanations and evictions, and DCGM rows
    of GPUs with no other queue's pod (pod, namespace, job and queue of other queues' slices are blanked).
    GPUs held by hidden queues' pods show as free in the GPU grid.
    """
    if tick is None or granted == ALL:
        return tick
    visible = expand(granted, tick.scheduled.queues) or frozenset()
    redact = Redactor(tick.scheduled, visible)   # names of hidden queues, jobs, pods in what is left
    snapshot = scope_snapshot(tick.snapshot, visible)
    result = tick.result
    if result is not None:
        scheduled = scope_snapshot(result.snapshot, visible) if result.snapshot is not None else None
        job_keys = {j.key for j in (scheduled or snapshot).jobs}
        task_names = {t.name for j in (scheduled or snapshot).jobs for t in j.tasks}
        fields = {"snapshot": scheduled}
        for name, keep in (("fair_share", visible), ("queue_stats", visible)):
            if hasattr(result, name):
                fields[name] = {k: v for k, v in getattr(result, name).items() if k in keep}
        if hasattr(result, "jobs"):
            fields["jobs"] = {k: redact.value(v) for k, v in result.jobs.items() if k in job_keys}
        if hasattr(result, "tasks"):
            fields["tasks"] = {k: v for k, v in result.tasks.items() if k in task_names}
        if hasattr(result, "evicted"):
            fields["evicted"] = [redact.value(e) if not e.preemptor or e.preemptor in job_keys else
                                 dataclasses.replace(e, preemptor=HIDDEN_JOB, message=HIDDEN_CAUSE)
                                 for e in result.evicted if e.job in job_keys]
        result = dataclasses.replace(result, **fields) if dataclasses.is_dataclass(result) else None
    else:
        job_keys = {j.key for j in snapshot.jobs}
    explanations = {k: redact.explanation(v) for k, v in (tick.explanations or {}).items() if k in job_keys}
    return dataclasses.replace(tick, snapshot=snapshot, result=result, explanations=explanations,
                               gpu_frame=scope_gpu_frame(tick.gpu_frame, visible))


def scope_snapshot(snap, visible: frozenset):
    """A shallow copy of ``snap`` with only the ``visible`` queues and their jobs (objects shared, not copied)."""
    queues = [q if q.parent is None or q.parent in visible else dataclasses.replace(q, parent=None)
              for q in snap.queues if q.name in visible]
    return dataclasses.replace(snap, queues=queues, jobs=[j for j in snap.jobs if j.queue in visible],
                               usage={k: v for k, v in snap.usage.items() if k in visible})


HIDDEN_FRAME_COLUMNS = ("task", "pod", "namespace", "job", "queue", "dcgm_pod")
HIDDEN_CAUSE = "evicted for a job of a queue you cannot see"
HIDDEN_EVIDENCE = "flag raised; its evidence names pods of a queue you cannot see"


def scope_gpu_frame(frame: Optional[pd.DataFrame], visible: frozenset) -> Optional[pd.DataFrame]:
    """The DCGM frame with other queues' slices dropped and any pod name they left on a GPU blanked."""
    if frame is None or "queue" not in frame:
        return frame
    other = frame["queue"].notna() & ~frame["queue"].isin(visible)
    shown = frame[~other].copy()
    if "dcgm_pod" in shown:       # a visible slice's GPU may credit another queue's pod (shared GPU)
        mine = set(frame.loc[~other & frame["pod"].notna(), "pod"]) if "pod" in frame else set()
        shown.loc[~shown["dcgm_pod"].isin(mine), "dcgm_pod"] = None
    if "evidence" in shown and other.any():   # evidence sentences name pods: hide any naming a hidden one
        names = {str(v) for c in ("task", "pod", "job") if c in frame for v in frame.loc[other, c].dropna()}
        if names:
            leaks = shown["evidence"].fillna("").map(lambda e: bool(e) and any(n in e for n in names))
            shown.loc[leaks, "evidence"] = HIDDEN_EVIDENCE
        if "dcgm_pod" in frame:                # a free GPU's DCGM pod named in its evidence
            credited = frame.loc[frame["queue"].isna(), "dcgm_pod"].dropna()
            unseen = {str(p) for p in credited} - set(shown["dcgm_pod"].dropna())
            leaks = shown["evidence"].fillna("").map(lambda e: bool(e) and any(p in e for p in unseen))
            shown.loc[leaks, "evidence"] = HIDDEN_EVIDENCE
    return shown.reset_index(drop=True)


class ScopedHistory:
    """A read-only view of a :class:`TickHistory` showing only the visible queues' series."""

    def __init__(self, base: TickHistory, visible_fn):
        self.base = base
        self._visible = visible_fn

    def __len__(self) -> int:
        return len(self.base)

    def records(self) -> list[HistoryRecord]:
        visible = self._visible()
        return [HistoryRecord(r.time, r.wall_time, r.totals, {q: v for q, v in r.queues.items() if q in visible})
                for r in self.base.records()]

    totals_frame = TickHistory.totals_frame
    queues_frame = TickHistory.queues_frame

    def append(self, rec) -> None:
        raise RuntimeError("a scoped history is read-only: the live loop writes the process's history")

    def clear(self) -> None:
        """Nothing to do: the process's history is not this view's to clear."""


_SCOPED: "OrderedDict[tuple, Tick]" = OrderedDict()
_SCOPED_LOCK = threading.Lock()
_SCOPED_ITEMS = 32


def cached_scope(tick: Optional[Tick], granted: Grant) -> Optional[Tick]:
    """:func:`scope_tick` once per (tick, grant) in the process: sessions of the same team share it."""
    if tick is None or granted == ALL:
        return tick
    key = (id(tick), tick.index, granted)
    with _SCOPED_LOCK:
        if key in _SCOPED:
            _SCOPED.move_to_end(key)
            return _SCOPED[key]
    scoped = scope_tick(tick, granted)
    with _SCOPED_LOCK:
        _SCOPED[key] = scoped
        while len(_SCOPED) > _SCOPED_ITEMS:
            _SCOPED.popitem(last=False)
    return scoped


MIRRORED = ("revision", "source_kind", "source_label", "source_status", "metrics_status", "stale_since",
            "last_tick_wall", "period_s", "errors_total")


class ScopedState(LiveState):
    """One session's window on the process's live state, limited to the queues ``granted``.

    It follows ``base`` (a watcher mirrors every publish) and exposes the filtered tick; the source's detail
    line and error text, which may name any object of the cluster, are replaced by a generic line. Call
    :meth:`detach` when the session ends.
    """

    def __init__(self, base: LiveState, granted: Grant, **params):
        super().__init__(history=TickHistory(1, 1, 0), period_s=base.period_s, **params)
        self.base = base
        self.granted = granted
        self.history = ScopedHistory(base.history, self.visible)
        self._sync()
        self._watcher = base.param.watch(lambda *_: self._sync(), list(MIRRORED) + ["tick", "error",
                                                                                      "source_detail"])

    def visible(self) -> frozenset:
        tick = self.base.tick
        if tick is None:
            return frozenset()
        return expand(self.granted, tick.scheduled.queues) or frozenset()

    def _sync(self) -> None:
        b = self.base
        values = {p: getattr(b, p) for p in MIRRORED}
        values["tick"] = cached_scope(b.tick, self.granted)
        values["error"] = "the source failed (details are shown to administrators)" if b.error else ""
        values["source_detail"] = f"scoped to {len(self.visible())} queue(s)"
        self.param.update(**values)

    def detach(self) -> None:
        """Stop following the process's state (session end)."""
        if self._watcher is not None:
            self.base.param.unwatch(self._watcher)
            self._watcher = None


# ------------------------------------------------------------------------------------------- serving

_ACCESS: Optional[AccessMap] = None


def configure_access(access: Optional[AccessMap]) -> None:
    """Install ``access`` for this process: Panel's ``authorize_callback`` and per-session scoping."""
    global _ACCESS
    _ACCESS = access
    import panel as pn

    pn.config.authorize_callback = access.authorize if access is not None else None
    if access is not None:
        _guard_websocket()


def _websocket_user_info(handler) -> dict:
    """The login behind a websocket handshake, from the same signed cookies Panel reads in a session."""
    from panel.config import config
    from panel.io.state import state
    from panel.util import decode_token
    from tornado.web import decode_signed_value

    info: dict = {}
    raw = handler.get_cookie("id_token")
    if raw:
        value = decode_signed_value(config.cookie_secret, "id_token", raw)
        if value is not None:
            try:
                info.update(decode_token(state._decrypt_cookie(value)))
            except Exception:  # noqa: BLE001 — an unreadable token adds nothing; the user name still counts
                pass
    user = handler.current_user
    if isinstance(user, bytes):
        user = user.decode("utf-8", "replace")
    if user and "user" not in info:
        info["user"] = user
    return info


def websocket_refused(handler) -> bool:
    """Whether the access map refuses the login opening this websocket (Panel checks the page only)."""
    if _ACCESS is None or handler.current_user is None:
        return False
    return not _ACCESS.authorize(_websocket_user_info(handler))


def _guard_websocket() -> None:
    """Refuse the ``/ws`` handshake of a login the access map refuses: Bokeh builds a session for any
    authenticated websocket carrying a session token (unsigned by default), so without this a refused user
    could open a live session by hand. Installed once on Panel's ``WSHandler``."""
    from panel.io.server import WSHandler

    if getattr(WSHandler, "_kaidash_guarded", False):
        return
    original = WSHandler.prepare

    async def prepare(self):
        await original(self)
        if not self._finished and websocket_refused(self):
            log.warning("refused a websocket session for %r: no grant in the access map", self.current_user)
            self.set_status(403)
            self.finish()

    WSHandler.prepare = prepare
    WSHandler._kaidash_guarded = True


def may_import(state: Any) -> bool:
    """Whether a session's user may import a snapshot: not one scoped to some queues (checked before parsing)."""
    return not isinstance(state, ScopedState)


def _session_user() -> tuple[Optional[str], list[str], dict]:
    import panel as pn

    info = dict(pn.state.user_info or {})
    if pn.state.user and "user" not in info:
        info["user"] = pn.state.user
    user, groups = user_and_groups(info)
    return user, groups, info


def session_state(base: LiveState) -> tuple[LiveState, bool]:
    """The state a new session's views read, and whether that user may change the source (settings, import).

    Without an access map, or for a user granted everything, it is ``base`` itself. Otherwise a
    :class:`ScopedState` detached again when the session is destroyed.
    """
    if _ACCESS is None:
        return base, True
    import panel as pn

    user, groups, _ = _session_user()
    granted = _ACCESS.grant(user, groups)
    if granted == ALL:
        return base, True
    scoped = ScopedState(base, granted)
    if pn.state.curdoc is not None:
        pn.state.curdoc.on_session_destroyed(lambda ctx: scoped.detach())
    return scoped, False


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """``kaidash serve``'s authentication flags (Panel's own options; each also read from the environment)."""
    g = parser.add_argument_group("authentication (Panel's built-in options)")
    g.add_argument("--basic-auth", default=None, metavar="PASSWORD|FILE",
                   help="one shared password, or a JSON file of user -> password (env KAIDASH_BASIC_AUTH or "
                        "PANEL_BASIC_AUTH)")
    g.add_argument("--cookie-secret", default=None,
                   help="signs login cookies (env KAIDASH_COOKIE_SECRET or PANEL_COOKIE_SECRET); random if unset, "
                        "so a restart logs everyone out")
    g.add_argument("--oauth-provider", default=None,
                   help="generic (any OIDC provider), github, gitlab, google, azure, okta, ... "
                        "(env KAIDASH_OAUTH_PROVIDER or PANEL_OAUTH_PROVIDER)")
    g.add_argument("--oauth-key", default=None, help="OAuth client id (env PANEL_OAUTH_KEY)")
    g.add_argument("--oauth-secret", default=None, help="OAuth client secret (env PANEL_OAUTH_SECRET)")
    g.add_argument("--oauth-redirect-uri", default=None, help="public URL of /login (env PANEL_OAUTH_REDIRECT_URI)")
    g.add_argument("--oauth-extra-params", default=None, metavar="DICT",
                   help="Python dict literal; the generic provider needs AUTHORIZE_URL, TOKEN_URL, USER_URL "
                        "(env PANEL_OAUTH_EXTRA_PARAMS, or PANEL_OAUTH_AUTHORIZE_URL / _TOKEN_URL / _USER_URL)")
    g.add_argument("--oauth-encryption-key", default=None,
                   help="encrypts tokens in cookies (env PANEL_OAUTH_ENCRYPTION; make one with panel oauth-secret)")
    g.add_argument("--oauth-jwt-user", default=None, help="claim to use as the user name (env PANEL_OAUTH_JWT_USER)")
    g.add_argument("--access-map", default=None, metavar="FILE",
                   help="YAML of users / groups -> queues they may see (env KAIDASH_ACCESS_MAP); needs a login")


def _env(env: Mapping[str, str], *names: str) -> Optional[str]:
    return next((env[n] for n in names if env.get(n)), None)


def serve_kwargs(args: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> dict:
    """``pn.serve`` keyword arguments for the flags (flags win over ``KAIDASH_*``, which win over ``PANEL_*``).

    Options Panel reads from its own ``PANEL_*`` variables (key, secret, extra params, encryption key) are
    passed only when given as flags, since Panel refuses a value given both ways.
    """
    import ast

    env = os.environ if env is None else env
    basic = args.basic_auth or _env(env, "KAIDASH_BASIC_AUTH", "PANEL_BASIC_AUTH")
    provider = args.oauth_provider or _env(env, "KAIDASH_OAUTH_PROVIDER", "PANEL_OAUTH_PROVIDER")
    if basic and provider:
        raise SourceError("choose one of --basic-auth and --oauth-provider")
    out: dict = {}
    if not (basic or provider):
        if args.access_map or env.get("KAIDASH_ACCESS_MAP"):
            raise SourceError("--access-map needs a login: add --basic-auth or --oauth-provider")
        return out
    if basic:
        out["basic_auth"] = basic
    else:
        out["oauth_provider"] = provider
        for flag in ("oauth_key", "oauth_secret", "oauth_redirect_uri", "oauth_encryption_key", "oauth_jwt_user"):
            if getattr(args, flag):
                out[flag] = getattr(args, flag)
        if args.oauth_extra_params:
            try:
                extra = ast.literal_eval(args.oauth_extra_params)
            except (ValueError, SyntaxError) as exc:
                raise SourceError(f"--oauth-extra-params: not a Python dict literal: {exc}") from exc
            if not isinstance(extra, dict):
                raise SourceError("--oauth-extra-params: expected a dict, e.g. \"{'AUTHORIZE_URL': '...'}\"")
            out["oauth_extra_params"] = extra
        if provider == "generic":
            given = dict(out.get("oauth_extra_params") or {})
            if not given and env.get("PANEL_OAUTH_EXTRA_PARAMS"):
                given = ast.literal_eval(env["PANEL_OAUTH_EXTRA_PARAMS"])
            missing = [k for k in ("AUTHORIZE_URL", "TOKEN_URL", "USER_URL")
                       if not given.get(k) and not env.get(f"PANEL_OAUTH_{k}")]
            if missing:
                raise SourceError(f"--oauth-provider generic needs {', '.join(missing)} in --oauth-extra-params "
                                  f"(or PANEL_OAUTH_{missing[0]})")
    secret = args.cookie_secret or _env(env, "KAIDASH_COOKIE_SECRET")
    if secret:
        out["cookie_secret"] = secret
    elif not env.get("PANEL_COOKIE_SECRET"):
        log.warning("no --cookie-secret: using a random one (a restart logs everyone out)")
        out["cookie_secret"] = secrets.token_urlsafe(32)
    return out


def access_map_from(args: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> Optional[AccessMap]:
    env = os.environ if env is None else env
    path = args.access_map or env.get("KAIDASH_ACCESS_MAP")
    return AccessMap.load(path) if path else None


__all__ = ["AccessMap", "ScopedState", "ScopedHistory", "scope_tick", "expand", "serve_kwargs", "add_auth_arguments",
           "configure_access", "session_state", "access_map_from", "user_and_groups", "ALL"]
