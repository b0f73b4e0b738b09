"""GPU prices: what one GPU-hour of each GPU model costs, from a small YAML file or the command line.

```yaml
currency: USD
default_gpu_hour: 2.0          # models no key matches
gpu_hour:                      # a key matches when it is a substring of the node's GPU model (case-insensitive);
  H100: 4.0                    # the longest matching key wins ("A100-SXM4-80GB" before "A100")
  A100-SXM4-80GB: 2.5
  A100: 2.0
  L4: 0.8
```

:data:`EXAMPLE_PRICES` are **examples** for trying kaidash, round numbers in roughly the order of public on-demand
cloud list prices: not quotes, not a claim about what any GPU costs you. Put your own (amortised purchase,
power, or internal chargeback rate) in the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from ..errors import KaidashError


class PriceError(KaidashError):
    """A price file or option is invalid; ``problems`` are ``(path, message)`` pairs naming the key."""

    def __init__(self, problems: list[tuple[str, str]] | str, message: str | None = None):
        if isinstance(problems, str):
            problems = [(problems, message or "invalid")]
        self.problems = list(problems)
        super().__init__("invalid GPU prices:\n  " + "\n  ".join(f"{p}: {m}" for p, m in self.problems))

EXAMPLE_PRICES: dict[str, float] = {"H200": 4.5, "H100": 4.0, "A100-SXM4-80GB": 2.5, "A100": 2.0, "L40S": 1.5,
                                    "L4": 0.8, "T4": 0.4}
"""Example price per GPU-hour by model substring (see the module doc: examples, not claims)."""

EXAMPLE_DEFAULT = 2.0


@dataclass
class GpuPrices:
    """Price per GPU-hour by GPU model (substring match, longest key wins), else ``default_gpu_hour``."""

    gpu_hour: dict[str, float] = field(default_factory=lambda: dict(EXAMPLE_PRICES))
    default_gpu_hour: float = EXAMPLE_DEFAULT
    currency: str = "USD"
    source: str = "examples"

    def __post_init__(self) -> None:
        problems = []
        for key, value in self.gpu_hour.items():
            if not _price_ok(value):
                problems.append((f"gpu_hour.{key}", f"expected a price >= 0, got {value!r}"))
        if not _price_ok(self.default_gpu_hour):
            problems.append(("default_gpu_hour", f"expected a price >= 0, got {self.default_gpu_hour!r}"))
        if problems:
            raise PriceError(problems)
        self._keys = sorted(((k.lower(), float(v)) for k, v in self.gpu_hour.items()), key=lambda kv: -len(kv[0]))
        self._cache: dict[Optional[str], float] = {}

    def price(self, gpu_model: Optional[str]) -> float:
        """Price per GPU-hour of ``gpu_model`` (``None``: the default)."""
        if gpu_model not in self._cache:
            model = (gpu_model or "").lower()
            self._cache[gpu_model] = next((v for k, v in self._keys if k and k in model), self.default_gpu_hour)
        return self._cache[gpu_model]

    def matched_key(self, gpu_model: Optional[str]) -> Optional[str]:
        """The configured key that prices ``gpu_model`` (None: the default price)."""
        model = (gpu_model or "").lower()
        return next((k for k, _ in self._keys if k and k in model), None)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "(dict)") -> "GpuPrices":
        """From a mapping with ``gpu_hour``, ``default_gpu_hour`` and ``currency``; unknown keys are errors."""
        if not isinstance(doc, Mapping):
            raise PriceError(source, f"expected a mapping, got {type(doc).__name__}")
        unknown = set(doc) - {"gpu_hour", "default_gpu_hour", "currency"}
        if unknown:
            raise PriceError([(f"{source}.{k}", "unknown key (allowed: gpu_hour, default_gpu_hour, currency)")
                                 for k in sorted(unknown)])
        table = doc.get("gpu_hour", {}) or {}
        if not isinstance(table, Mapping):
            raise PriceError(f"{source}.gpu_hour", "expected a mapping of GPU model to price per GPU-hour")
        return cls(gpu_hour={str(k): v for k, v in table.items()},
                   default_gpu_hour=doc.get("default_gpu_hour", EXAMPLE_DEFAULT if not table else 0.0),
                   currency=str(doc.get("currency", "USD")), source=source)

    @classmethod
    def load(cls, path: str | Path) -> "GpuPrices":
        """From a YAML (or JSON) file; errors name the file and the key."""
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise PriceError(str(path), f"cannot read the price file: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise PriceError(str(path), f"not valid YAML: {exc}") from exc
        return cls.from_dict(doc or {}, source=str(path))

    def with_overrides(self, pairs: list[str]) -> "GpuPrices":
        """``["H100=3.2", "default=1.5"]`` (a command line's ``--gpu-hour``) applied on top of these prices."""
        table, default = dict(self.gpu_hour), self.default_gpu_hour
        for item in pairs:
            key, sep, value = item.partition("=")
            try:
                price = float(value)
            except ValueError:
                price = math.nan
            if not sep or not key.strip() or not _price_ok(price):
                raise PriceError(f"--gpu-hour {item}", "expected MODEL=PRICE with a price >= 0, e.g. H100=3.2")
            if key.strip().lower() == "default":
                default = price
            else:
                table[key.strip()] = price
        return GpuPrices(table, default, self.currency, self.source + " + command line")


def _price_ok(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value >= 0)


__all__ = ["GpuPrices", "PriceError", "EXAMPLE_PRICES", "EXAMPLE_DEFAULT"]
