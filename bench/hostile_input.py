"""Hostile-input benchmark: what each input class of issue 19 costs the ``kaidash`` CLI (wall time, peak memory).

    python bench/hostile_input.py                     # every case, this checkout
    python bench/hostile_input.py --code /tmp/old     # the same inputs against another copy of the code
    python bench/hostile_input.py --only bomb --timeout 300
    python bench/hostile_input.py --valid --only valid   # what the checks cost on large valid inputs

Each case runs ``python -m scheduler.cli ...`` in its own process (``PYTHONPATH`` = ``--code``) under a
wall-clock ``--timeout`` and an address-space cap (``--max-gib``, so a bomb cannot take the machine down), and
reports: the exit code (``timeout`` / ``killed``), the wall and CPU time, the peak resident memory of that process
(``wait4``'s ``ru_maxrss``) and the last line of stderr, marked ``TRACEBACK`` when stderr holds one. Inputs are
built by ``tests/hostile_inputs.py`` into a temporary directory (the 2 GiB zip bomb takes ~10 s to build).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import hostile_inputs as H  # noqa: E402


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """``(label, kaidash argv)`` for every input class."""
    laughs = H.billion_laughs_snapshot(tmp)
    laughs_fs = H.billion_laughs_fairshare(tmp)
    bomb = H.zip_bomb(tmp)
    lying = H.zip_bomb(tmp, inflated_bytes=2**30, lying=True, name="lying.zip")
    many = H.many_members_zip(tmp)
    deep_json = H.deep_snapshot(tmp, fmt="json")
    deep_yaml = H.deep_snapshot(tmp, fmt="yaml")
    deep_zip = H.deep_kai_zip(tmp)
    chain = H.queue_chain_snapshot(tmp)
    chain_fs = H.queue_chain_fairshare(tmp)
    out = str(tmp / "out.yaml")
    return [
        ("billion laughs: validate", ["snapshot", "validate", str(laughs)]),
        ("billion laughs: schedule", ["schedule", str(laughs)]),
        ("billion laughs: fairshare", ["fairshare", str(laughs_fs)]),
        ("zip bomb 2 GiB: import", ["snapshot", "import", str(bomb), "-o", out]),
        ("zip bomb 2 GiB: validate", ["snapshot", "validate", str(bomb)]),
        ("zip bomb 2 GiB: schedule", ["schedule", str(bomb)]),
        ("zip bomb, lying header (1 GiB): validate", ["snapshot", "validate", str(lying)]),
        ("zip with 20,000 members: validate", ["snapshot", "validate", str(many)]),
        ("deep JSON (5,000): validate", ["snapshot", "validate", str(deep_json)]),
        ("deep YAML (5,000): schedule", ["schedule", str(deep_yaml)]),
        ("deep snapshot.json in zip: import", ["snapshot", "import", str(deep_zip), "-o", out]),
        ("queue chain 3,000: validate", ["snapshot", "validate", str(chain)]),
        ("queue chain 3,000: schedule", ["schedule", str(chain)]),
        ("queue chain 3,000: fairshare", ["fairshare", str(chain_fs)]),
    ]


def legit_cases(tmp: Path, code: Path) -> list[tuple[str, list[str]]]:
    """What the limits cost on large, valid inputs: a 4,000-node KAI zip (``bench.source_convert``'s cluster)
    and a 2,000-node synthetic snapshot in YAML and JSON."""
    import json
    import zipfile

    sys.path.insert(0, str(ROOT))
    from bench.source_convert import make_cluster
    from kai_objects import kai_snapshot_doc

    cluster = make_cluster()
    doc = kai_snapshot_doc({k: list(v.values()) for k, v in cluster.items()})
    kai = tmp / "large-kai.zip"
    with zipfile.ZipFile(kai, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("snapshot.json", json.dumps(doc))
    out = []
    for fmt in ("yaml", "json"):
        path = tmp / f"large.{fmt}"
        subprocess.run([sys.executable, "-m", "scheduler.cli", "snapshot", "generate", "--nodes", "2000", "--seed", "1",
                        "-o", str(path)], cwd=str(code), env=dict(os.environ, PYTHONPATH=str(code)), check=True,
                       stdout=subprocess.DEVNULL)
        out.append((f"valid 2,000-node snapshot ({fmt}, {path.stat().st_size / 2**20:.0f} MiB): validate",
                    ["snapshot", "validate", str(path)]))
    out.insert(0, (f"valid 4,000-node KAI zip ({kai.stat().st_size / 2**20:.0f} MiB): validate",
                   ["snapshot", "validate", str(kai)]))
    return out


def run_case(argv: list[str], code: Path, timeout: float, max_bytes: int) -> dict:
    """Run ``kaidash argv`` once; exit code, wall seconds, peak RSS (MiB), last stderr line, traceback?"""
    env = dict(os.environ, PYTHONPATH=str(code))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))

    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", *argv], cwd=str(code), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    deadline = started + timeout
    status = None
    err = b""
    while True:
        pid, st, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = st
            break
        if time.perf_counter() > deadline:
            proc.send_signal(signal.SIGKILL)
            pid, st, usage = os.wait4(proc.pid, 0)
            status = None
            break
        time.sleep(0.05)
    wall = time.perf_counter() - started
    proc.returncode = 0  # reaped above
    err = proc.stderr.read()
    proc.stderr.close()
    text = err.decode(errors="replace").strip()
    lines = text.splitlines()
    if status is None:
        code_s = "timeout"
    elif os.WIFSIGNALED(status):
        code_s = f"signal {os.WTERMSIG(status)}"
    else:
        code_s = str(os.WEXITSTATUS(status))
    return {"exit": code_s, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "traceback": "Traceback (most recent call last)" in text, "last": lines[-1][:140] if lines else ""}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose scheduler/ runs (default: this one)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    ap.add_argument("--max-gib", type=float, default=8.0, help="address-space cap per case, GiB (default 8)")
    ap.add_argument("--only", default="", help="run the cases whose label contains this text")
    ap.add_argument("--valid", action="store_true", help="also time large valid inputs (what the limits cost)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("| case | exit | wall s | CPU s | peak RSS MiB | stderr (last line) |\n|---|---|---|---|---|---|")
        todo = cases(tmp) + (legit_cases(tmp, args.code.resolve()) if args.valid else [])
        for label, cmd in todo:
            if args.only and args.only not in label:
                continue
            r = run_case(cmd, args.code.resolve(), args.timeout, int(args.max_gib * 2**30))
            last = ("TRACEBACK: " if r["traceback"] else "") + r["last"].replace("|", "/")
            print(f"| {label} | {r['exit']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mib']:.0f} | {last} |",
                  flush=True)


if __name__ == "__main__":
    main()
