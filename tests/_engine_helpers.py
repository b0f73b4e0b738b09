"""Small builders shared by the engine tests."""

from scheduler.fairshare import compute_fair_share
from scheduler.session import Session
from scheduler.snapshot_io import loads_snapshot


def session_from_yaml(text: str) -> Session:
    snap = loads_snapshot(text)
    return Session(snap, compute_fair_share(snap))


def tid(session: Session, name: str) -> int:
    return session.task_index[name]
