"""Builders of hostile and broken inputs, one per class of issue 19, shared by the tests and the benchmark.

Each builder writes one file into a directory and returns its path:

- :func:`billion_laughs_snapshot` / :func:`billion_laughs_fairshare`: YAML aliases nested ``levels`` deep with
  ``fanout`` aliases each (9 x 9 expands to 9**9 = 387 million strings), in node labels / a fair-share quota;
- :func:`zip_bomb`: a KAI zip whose ``snapshot.json`` inflates from a few MiB to ``inflated_bytes``
  (``lying=True``: the zip headers claim a small member, the data is large);
- :func:`many_members_zip`: a zip with thousands of members;
- :func:`deep_snapshot`: a JSON or YAML snapshot nested ``depth`` levels (in a node label), and
  :func:`deep_kai_zip` the same inside a zip's ``snapshot.json``;
- :func:`queue_chain_snapshot` / :func:`queue_chain_fairshare`: a queue tree that is one chain ``depth`` deep.
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from pathlib import Path

import yaml

NODE = {"name": "n0", "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000, "memory_bytes": 2**36, "pods": 110}


def _laughs(levels: int, fanout: int, indent: str) -> str:
    """``l0: &l0 [lol, ...]`` then ``lK: &lK [*lK-1, ...]``: each level multiplies the expansion by ``fanout``."""
    lines = [f"{indent}l0: &l0 [" + ", ".join(["lol"] * fanout) + "]"]
    for k in range(1, levels):
        lines.append(f"{indent}l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * fanout) + "]")
    return "\n".join(lines)


def billion_laughs_snapshot(directory: Path, levels: int = 9, fanout: int = 9) -> Path:
    """A snapshot whose first node's labels hold the alias bomb."""
    text = (f"version: 1\nnodes:\n- name: n0\n  gpus: 0\n  cpu_millis: 1000\n  memory_bytes: 1000\n  pods: 10\n"
            f"  labels:\n{_laughs(levels, fanout, '    ')}\nqueues:\n- name: q\njobs: []\n")
    path = Path(directory) / "laughs.yaml"
    path.write_text(text)
    return path


def billion_laughs_fairshare(directory: Path, levels: int = 9, fanout: int = 9) -> Path:
    """A fair-share calculator input whose extra top-level key defines the bomb and a quota uses it."""
    text = (f"total: {{gpu: 8}}\nbomb:\n{_laughs(levels, fanout, '  ')}\n"
            f"queues:\n- {{name: a, gpu: {{quota: *l{levels - 1}, request: 4}}}}\n")
    path = Path(directory) / "laughs-fairshare.yaml"
    path.write_text(text)
    return path


def _raw_zip_entry(name: str, crc: int, compressed: bytes, declared_size: int) -> tuple[bytes, bytes]:
    """A deflated local file header + data and its central directory record (sizes as declared)."""
    fname = name.encode()
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(compressed), declared_size,
                        len(fname), 0) + fname + compressed
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(compressed),
                          declared_size, len(fname), 0, 0, 0, 0, 0, 0) + fname
    return local, central


def zip_bomb(directory: Path, inflated_bytes: int = 2**31, lying: bool = False, name: str = "bomb.zip") -> Path:
    """A KAI-looking zip: ``snapshot.json`` = ``{"rawObjects": {"pods": [`` + spaces, deflated at ~1000:1.

    ``lying=True`` declares an uncompressed size of 1 KiB in the headers (the data still inflates to
    ``inflated_bytes``), so only a streaming cap can stop it.
    """
    head = b'{"rawObjects": {"pods": ['
    chunk = b" " * (1 << 24)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    # After a full flush the compressor starts afresh, so one compressed chunk can be repeated as is.
    first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    block = comp.compress(chunk) + comp.flush(zlib.Z_FULL_FLUSH)
    full, rest = divmod(inflated_bytes - len(head), len(chunk))
    crc = zlib.crc32(head)
    for _ in range(full):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(chunk[:rest], crc)
    compressed = first + block * full + comp.compress(chunk[:rest]) + comp.flush()
    declared = 1024 if lying else inflated_bytes
    if declared >= 2**32:
        raise ValueError("use fewer than 4 GiB (no zip64 in this builder)")
    local, central = _raw_zip_entry("snapshot.json", crc, compressed, declared)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local), 0)
    path = Path(directory) / name
    path.write_bytes(local + central + eocd)
    return path


def many_members_zip(directory: Path, members: int = 20_000) -> Path:
    """A zip with ``members`` tiny members besides ``snapshot.json`` (a central-directory bomb)."""
    path = Path(directory) / "many.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("snapshot.json", '{"rawObjects": {}}')
        for i in range(members):
            zf.writestr(f"m{i}", b"")
    return path


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_snapshot(directory: Path, depth: int = 5000, fmt: str = "json") -> Path:
    """A snapshot whose node label value is a list nested ``depth`` levels (JSON, or YAML flow style)."""
    path = Path(directory) / f"deep.{fmt}"
    node = json.dumps(NODE)[:-1] + ', "labels": {"a": ' + _nested(depth) + "}}"
    text = '{"version": 1, "nodes": [' + node + '], "queues": [{"name": "q"}], "jobs": []}'
    path.write_text(text)
    return path


def deep_kai_zip(directory: Path, depth: int = 5000) -> Path:
    """A KAI zip whose ``snapshot.json`` nests a pod's labels ``depth`` levels."""
    text = '{"rawObjects": {"pods": [{"metadata": {"name": "p", "labels": ' + _nested(depth) + "}}]}}"
    path = Path(directory) / "deep.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("snapshot.json", text)
    return path


def queue_chain_snapshot(directory: Path, depth: int = 3000, fmt: str = "yaml") -> Path:
    """A valid snapshot whose queues form one chain ``depth`` deep, with a one-GPU job in the deepest queue."""
    queues = [{"name": "q0", "gpu": {"quota": 1}}]
    queues += [{"name": f"q{i}", "parent": f"q{i - 1}", "gpu": {"quota": 1}} for i in range(1, depth)]
    doc = {"version": 1, "time": 0, "nodes": [NODE], "queues": queues,
           "jobs": [{"name": "j", "queue": f"q{depth - 1}", "tasks": [{"name": "t", "gpu": 1}]}]}
    path = Path(directory) / f"chain.{fmt}"
    path.write_text(json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc, sort_keys=False))
    return path


def queue_chain_fairshare(directory: Path, depth: int = 3000) -> Path:
    """A fair-share calculator input with a queue chain ``depth`` deep."""
    queues = [{"name": "q0", "parent": None, "gpu": {"quota": 1, "request": 5}}]
    queues += [{"name": f"q{i}", "parent": f"q{i - 1}", "gpu": {"quota": 1, "request": 5}} for i in range(1, depth)]
    path = Path(directory) / "chain-fairshare.yaml"
    path.write_text(yaml.safe_dump({"total": {"gpu": 10}, "queues": queues}, sort_keys=False))
    return path
