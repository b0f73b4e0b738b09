"""Writes the seed corpus (tests/fuzz/corpus/): small valid inputs for each target and small hostile ones.

    python tests/fuzz/make_corpus.py

Deterministic; the files are committed. Each file is ``<target byte><file bytes>`` (see ``targets.py``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

import hostile_inputs as H  # noqa: E402
from kai_objects import kai_snapshot_doc, kai_zip_bytes, small_cluster  # noqa: E402
import yaml  # noqa: E402

YAML, JSON, ZIP, KAI_JSON, FAIRSHARE = (bytes([i]) for i in range(5))


def seeds() -> dict[str, bytes]:
    example = (ROOT / "examples" / "small-cluster.yaml").read_bytes()
    kai = kai_snapshot_doc(small_cluster())
    out = {
        "valid-snapshot.yaml": YAML + example,
        "valid-snapshot.json": JSON + json.dumps(yaml.safe_load(example)).encode(),
        "valid-kai.zip": ZIP + kai_zip_bytes(kai),
        "valid-kai-snapshot.json": KAI_JSON + json.dumps(kai, separators=(",", ":")).encode(),
        "valid-fairshare.yaml": FAIRSHARE + (ROOT / "examples" / "fairshare-worked-example.yaml").read_bytes(),
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out["laughs.yaml"] = YAML + H.billion_laughs_snapshot(tmp, levels=6, fanout=8).read_bytes()
        out["laughs-fairshare.yaml"] = FAIRSHARE + H.billion_laughs_fairshare(tmp, levels=6, fanout=8).read_bytes()
        out["deep.json"] = JSON + H.deep_snapshot(tmp, depth=150).read_bytes()
        out["deep-kai.zip"] = ZIP + H.deep_kai_zip(tmp, depth=150).read_bytes()
        out["bomb.zip"] = ZIP + H.zip_bomb(tmp, inflated_bytes=10 * 2**20).read_bytes()
        out["lying.zip"] = ZIP + H.zip_bomb(tmp, inflated_bytes=2**20, lying=True, name="l.zip").read_bytes()
        out["chain-fairshare.yaml"] = FAIRSHARE + H.queue_chain_fairshare(tmp, depth=120).read_bytes()
        many = tmp / "many.zip"
        with zipfile.ZipFile(many, "w") as zf:
            zf.writestr("snapshot.json", "{}")
            for i in range(40):
                zf.writestr(f"m{i}", b"")
        out["members.zip"] = ZIP + many.read_bytes()
    return out


def main() -> None:
    corpus = HERE / "corpus"
    corpus.mkdir(exist_ok=True)
    for name, data in seeds().items():
        (corpus / name).write_bytes(data)
        print(f"{name}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
