"""Parsing of Kubernetes scalar formats: quantities, RFC 3339 times, Go durations, KAI label values.

Every parser raises :class:`BadField` with the field path and a message; the converters turn that into a
:class:`~scheduler.sources.warnings.SourceWarning` for the one object at fault.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Optional

from kubernetes.utils.quantity import parse_quantity


class BadField(Exception):
    """One field of one object is malformed; ``field`` is its path inside the object."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def as_list(value: Any, fld: str) -> list:
    """``value`` as a list (``None``: empty); anything else is a :class:`BadField` at ``fld``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadField(fld, f"expected a list, got {type(value).__name__}")
    return value


def as_mapping(value: Any, fld: str) -> dict:
    """``value`` as a mapping (``None``: empty); anything else is a :class:`BadField` at ``fld``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadField(fld, f"expected a mapping, got {type(value).__name__}")
    return value


@lru_cache(maxsize=4096)
def _parse_quantity_text(text: str) -> Optional[float]:
    """Cached: clusters repeat the same few quantity strings ("1", "8Gi") across thousands of pods."""
    try:
        num = float(parse_quantity(text))
    except (ValueError, TypeError, ArithmeticError):
        return None
    return num


def quantity(value: Any, field: str) -> float:
    """A Kubernetes quantity (``"500m"``, ``"64Gi"``, ``8``) as a float in base units."""
    if isinstance(value, bool) or value is None:
        raise BadField(field, f"expected a quantity, got {value!r}")
    if isinstance(value, str):
        num = _parse_quantity_text(value)
    elif isinstance(value, (int, float)):
        num = float(value)
    else:
        num = None
    if num is None:
        raise BadField(field, f"not a Kubernetes quantity: {value!r}")
    if math.isnan(num) or math.isinf(num) or num < 0:
        raise BadField(field, f"quantity must be a finite non-negative number, got {value!r}")
    return num


def number(value: Any, field: str, *, minimum: Optional[float] = None, allow_minus_one: bool = False) -> float:
    """A JSON number (not a string, not a boolean), optionally bounded below; ``-1`` allowed when asked."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadField(field, f"expected a number, got {type(value).__name__} {value!r}")
    num = float(value)
    if math.isnan(num) or math.isinf(num):
        raise BadField(field, f"expected a finite number, got {value!r}")
    if allow_minus_one and num == -1:
        return num
    if minimum is not None and num < minimum:
        hint = " (-1 means unlimited)" if allow_minus_one else ""
        raise BadField(field, f"must be >= {minimum:g}{hint}, got {value!r}")
    return num


def integer(value: Any, field: str, *, minimum: Optional[int] = None) -> int:
    """A JSON integer (``3`` or ``3.0``), bounded below when asked."""
    num = number(value, field)
    if num != int(num):
        raise BadField(field, f"expected a whole number, got {value!r}")
    if minimum is not None and num < minimum:
        raise BadField(field, f"must be >= {minimum}, got {value!r}")
    return int(num)


def timestamp(value: Any, field: str) -> float:
    """An RFC 3339 time (``2026-01-01T00:00:00Z``) as seconds since the epoch."""
    if not isinstance(value, str) or not value:
        raise BadField(field, f"expected an RFC 3339 time, got {value!r}")
    text = value.strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise BadField(field, f"not an RFC 3339 time: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration(value: Any, field: str) -> float:
    """A Go duration string (``"5m"``, ``"1h30m"``, ``"-1s"``; ``d``/``w`` as KAI's str2duration allows) in seconds."""
    if not isinstance(value, str) or not value.strip():
        raise BadField(field, f"expected a duration such as '5m' or '1h30m', got {value!r}")
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(body) or pos == 0:
        raise BadField(field, f"not a duration (e.g. '5m', '1h30m'): {value!r}")
    return sign * total


def gpu_memory_label_mib(value: Any, field: str) -> float:
    """KAI's reading of the ``nvidia.com/gpu.memory`` node label.

    MiB; a value of at least 1 TiB expressed in MiB is taken as bytes; the result is floored to a multiple of
    100 MiB (``pkg/scheduler/api/node_info/node_info.go``, kai-semantics §e.2).
    """
    try:
        raw = float(str(value).strip())
    except ValueError:
        raise BadField(field, f"expected a whole number of MiB, got {value!r}") from None
    if math.isnan(raw) or math.isinf(raw) or raw <= 0:
        raise BadField(field, f"expected a positive number of MiB, got {value!r}")
    mib = raw / 2**20 if raw >= 2**20 else raw
    return float(int(mib // 100) * 100)
