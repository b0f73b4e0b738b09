"""How numbers read on screen: one place for the units and formats every view uses (no Panel import).

* GPUs: integers as integers (``420``), fractions with up to two decimals (``3.5``, ``0.25``);
* utilisation and shares: percent with one decimal (``73.4 %``);
* memory: GiB (``48 GiB``, ``0.5 GiB``), never raw bytes;
* CPU: cores (``12.5 cores``), not millicores;
* waits and ages: hours and minutes (:func:`dashboard.frames.format_duration`: ``13h53m``);
* moments: clock time (``03:12:05``), with the date when it is not today (``2026-01-01 00:30``).
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Optional

from .frames import format_duration

GIB = 2 ** 30


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def number(x, digits: int = 2) -> str:
    """``420``, ``3.5``, ``1,234.25``; ``–`` when missing, ``∞`` for infinity."""
    if _missing(x):
        return "–"
    x = float(x)
    if math.isinf(x):
        return "∞"
    if abs(x - round(x)) < 10 ** -(digits + 1):
        return f"{round(x):,}"
    return f"{x:,.{digits}f}".rstrip("0").rstrip(".")


def gpus(x) -> str:
    """A GPU count: whole numbers without decimals."""
    return number(x, 2)


def percent(x, of: Optional[float] = None) -> str:
    """``x`` percent (or ``x / of`` as a percentage): ``73.4 %``."""
    if _missing(x) or (of is not None and (_missing(of) or of == 0)):
        return "–"
    value = 100.0 * x / of if of is not None else float(x)
    return f"{value:.1f} %"


def gib(nbytes) -> str:
    """Bytes as GiB: ``48 GiB``, ``0.5 GiB``."""
    if _missing(nbytes):
        return "–"
    return f"{number(float(nbytes) / GIB, 1)} GiB"


def mib_as_gib(mib) -> str:
    """MiB (DCGM's unit) as GiB."""
    return "–" if _missing(mib) else gib(float(mib) * 2 ** 20)


def cores(millis) -> str:
    """Millicores as cores: ``12.5 cores``."""
    return "–" if _missing(millis) else f"{number(float(millis) / 1000.0, 1)} cores"


def resource(x, resource_name: str) -> str:
    """A quantity of a KAI resource in its unit: GPUs, cores, GiB."""
    if resource_name == "memory":
        return gib(x)
    if resource_name == "cpu":
        return cores(x)
    return gpus(x)


RESOURCE_SCALE = {"gpu": (1.0, "GPUs"), "cpu": (1000.0, "cores"), "memory": (float(GIB), "GiB")}
"""Divide a resource's raw quantity (GPUs, millicores, bytes) by the scale to show it in the unit."""


CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def money(x, currency: str = "USD", per: str = "") -> str:
    """An amount with its currency: ``$1,234``, ``$12.50/h``, ``CHF 3.20/day``; ``–`` when missing."""
    if _missing(x):
        return "–"
    x = float(x)
    amount = f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"
    sign = CURRENCY_SIGNS.get(currency)
    text = f"{sign}{amount}" if sign else f"{currency} {amount}"
    return f"{text}/{per}" if per else text


def wait(seconds) -> str:
    """A wait or an age in hours and minutes: ``42s``, ``4m05s``, ``13h53m``, ``2d04h``."""
    return format_duration(seconds)


def clock(ts, now: Optional[float] = None) -> str:
    """A moment as local clock time; with the date when it is not the same day as ``now``."""
    if _missing(ts):
        return "–"
    when = _dt.datetime.fromtimestamp(float(ts))
    today = _dt.datetime.fromtimestamp(now).date() if now is not None else _dt.date.today()
    return when.strftime("%H:%M:%S") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def tick(tick) -> str:
    """A published tick as a person counts it: "tick 1 at 18:43:05" for the first (``Tick.number``, not the
    0-based index), "no tick yet" before it."""
    if tick is None:
        return "no tick yet"
    return f"tick {tick.number:,} at {clock(tick.wall_time)}"


__all__ = ["number", "gpus", "percent", "gib", "money", "mib_as_gib", "cores", "resource", "wait", "clock", "tick",
           "RESOURCE_SCALE", "GIB"]
