"""Where the dashboard's data comes from: the same options as ``kaidash serve``'s flags, as a param model.

The server passes them to ``dashboard/app.py`` through environment variables (``KAIDASH_SOURCE`` ...), so
``panel serve dashboard/app.py`` and ``kaidash serve`` behave the same; ``panel serve ... --args --source kube``
works too. No Panel import.
"""

from __future__ import annotations

import argparse
import os
from typing import Mapping, Optional, Sequence

import param

ENV_PREFIX = "KAIDASH_"
SOURCES = ("sim", "kube", "snapshot", "trace")
FIELDS = ("source", "context", "snapshot", "trace", "prometheus", "period_s", "seed", "nodes", "sim_step_s", "prices",
          "demo_extensions")
"""The options carried by ``KAIDASH_*`` variables and set by flags."""


class SourceOptions(param.Parameterized):
    """The live loop's source, metrics and period (the CLI flags of ``kaidash serve``)."""

    source = param.Selector(default="sim", objects=list(SOURCES),
                            doc="sim: embedded synthetic cluster; kube: live cluster (read-only); "
                                "snapshot: a file (ours or a KAI zip); trace: Alibaba GPU trace replay")
    context = param.String(default="", label="Kube context",
                           doc="kubeconfig context for --source kube (empty: current/in-cluster)")
    snapshot = param.String(default="", label="Snapshot file",
                            doc="snapshot file (YAML/JSON, or a KAI /get-snapshot zip)")
    trace = param.String(default="alibaba", doc="trace to replay for --source trace")
    prometheus = param.String(default="", label="Prometheus URL",
                              doc="Prometheus URL for real DCGM data (empty: simulated/none)")
    period_s = param.Number(default=2.0, bounds=(0.1, 3600), label="Loop period (s)", doc="live loop period, seconds")
    seed = param.Integer(default=7, doc="seed of the synthetic scenario (sim)")
    nodes = param.Integer(default=64, bounds=(1, 10_000), doc="nodes in the synthetic scenario (sim)")
    demo_extensions = param.Boolean(default=False, label="Demo extensions",
                                    doc="sim: add the topology (rack gangs), MIG and DRA pools to the synthetic cluster")
    sim_step_s = param.Number(default=30.0, bounds=(0.0, None), label="Simulated seconds per tick",
                              doc="cluster seconds simulated per tick (sim, trace); 0 = the period")

    prices = param.String(default="", label="GPU price file",
                          doc="price per GPU-hour by GPU model (YAML, docs/cost.md); empty: the example prices")

    def label(self) -> str:
        """One line describing the source, for the overview and the page header."""
        if self.source == "sim":
            extra = " + topology, MIG and DRA pools" if self.demo_extensions else ""
            return f"simulated cluster ({self.nodes} nodes{extra}, seed {self.seed})"
        if self.source == "kube":
            return f"kube context {self.context or '(current)'} — read-only shadow scheduling"
        if self.source == "snapshot":
            return f"snapshot {os.path.basename(self.snapshot) or '(none)'}"
        return f"trace {self.trace}"

    def to_env(self) -> dict[str, str]:
        """Environment variables carrying these options to ``dashboard/app.py``."""
        out = {}
        for name in FIELDS:
            out[ENV_PREFIX + name.upper()] = str(getattr(self, name))
        return out

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "SourceOptions":
        """Options from ``KAIDASH_*`` environment variables (defaults where unset)."""
        env = os.environ if env is None else env
        opts = cls()
        kwargs = {}
        for name, p in opts.param.objects("existing").items():
            key = ENV_PREFIX + name.upper()
            if name == "name" or key not in env or env[key] == "":
                continue
            raw = env[key]
            if isinstance(p, param.Boolean):
                kwargs[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(p, param.Integer):
                kwargs[name] = int(raw)
            elif isinstance(p, param.Number):
                kwargs[name] = float(raw)
            else:
                kwargs[name] = raw
        if "source" not in kwargs and kwargs.get("snapshot"):
            kwargs["source"] = "snapshot"
        opts.param.update(**kwargs)
        return opts

    @classmethod
    def from_args(cls, argv: Sequence[str], base: Optional["SourceOptions"] = None) -> "SourceOptions":
        """Options from ``kaidash serve``-style flags (e.g. ``panel serve app.py --args --source kube``)."""
        parser = argparse.ArgumentParser(add_help=False)
        add_source_arguments(parser)
        ns, _ = parser.parse_known_args(list(argv))
        return cls.from_namespace(ns, base)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace, base: Optional["SourceOptions"] = None) -> "SourceOptions":
        opts = cls(**{k: v for k, v in (base.param.values().items() if base else []) if k != "name"})
        kwargs = {}
        for name in FIELDS:
            value = getattr(ns, name, None)
            if value is not None:
                kwargs[name] = value
        if getattr(ns, "trace", None) and getattr(ns, "source", None) is None:
            kwargs["source"] = "trace"
        if getattr(ns, "snapshot", None) and getattr(ns, "source", None) is None:
            kwargs["source"] = "snapshot"
        opts.param.update(**kwargs)
        return opts


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The source flags shared by ``kaidash serve`` and ``panel serve dashboard/app.py --args``."""
    parser.add_argument("--source", choices=SOURCES, default=None,
                        help="sim (default: embedded synthetic cluster), kube (live cluster, read-only), "
                             "snapshot (with --snapshot), trace (with --trace)")
    parser.add_argument("--context", default=None, help="kubeconfig context for --source kube")
    parser.add_argument("--snapshot", default=None, metavar="FILE",
                        help="serve a snapshot file (ours, YAML/JSON, or a KAI /get-snapshot zip); static")
    parser.add_argument("--trace", default=None, choices=["alibaba"], help="replay the Alibaba GPU trace")
    parser.add_argument("--prometheus", default=None, metavar="URL", help="Prometheus with dcgm-exporter series")
    parser.add_argument("--period", dest="period_s", type=float, default=None, metavar="S",
                        help="live loop period in seconds (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the synthetic scenario (default 7)")
    parser.add_argument("--nodes", type=int, default=None, help="nodes in the synthetic scenario (default 64)")
    parser.add_argument("--demo-extensions", dest="demo_extensions", action="store_const", const=True, default=None,
                        help="sim: add a topology-labelled H100 pool with rack gangs, a MIG-sliced A100 pool and "
                             "DRA pods (snapshot 1.2) to the synthetic cluster")
    parser.add_argument("--prices", default=None, metavar="FILE",
                        help="price per GPU-hour by GPU model, YAML (docs/cost.md); default: example prices")
    parser.add_argument("--sim-step", dest="sim_step_s", type=float, default=None, metavar="S",
                        help="cluster seconds simulated per tick in sim/trace mode (default 30)")
