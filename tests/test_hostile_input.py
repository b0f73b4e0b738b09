"""Hostile and broken input through the ``kaidash`` command line (issue 19).

Every input class gives exit code 1 and one clear line naming the file and the limit (or the option and the
reason), never a traceback. Each command runs in its own process under an address-space cap
(:data:`MAX_GIB`) and a wall-clock cap (:data:`TIMEOUT_S`): these are bounds a hostile input must stay inside
(the old code took 4.2 GB for the zip bomb and never finished the billion laughs), not performance targets
(those are in ``bench/hostile_input.py`` and docs/snapshot-format.md).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import hostile_inputs as H

ROOT = Path(__file__).resolve().parents[1]
MAX_GIB = 1.5
TIMEOUT_S = 120


def kaidash(*argv: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = TIMEOUT_S):
    """``python -m scheduler.cli argv`` in a child process limited to ``MAX_GIB`` of address space."""
    cap = int(MAX_GIB * 2**30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full_env.pop("KAIDASH_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "scheduler.cli", *argv], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout, preexec_fn=limit)


def one_line_error(result, *words: str) -> str:
    """Exit 1, no traceback, exactly one line on stderr holding every word; returns that line."""
    err = result.stderr
    assert "Traceback" not in err, err[-3000:]
    assert result.returncode == 1, (result.returncode, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    return {
        "laughs": H.billion_laughs_snapshot(d),
        "laughs_fs": H.billion_laughs_fairshare(d),
        "bomb": H.zip_bomb(d),                                        # 2 MiB -> 2 GiB
        "lying": H.zip_bomb(d, inflated_bytes=2**30, lying=True, name="lying.zip"),
        "ratio": H.zip_bomb(d, inflated_bytes=200 * 2**20, name="ratio.zip"),   # under the size cap, 1000:1
        "many": H.many_members_zip(d),
        "deep_json": H.deep_snapshot(d, fmt="json"),
        "deep_yaml": H.deep_snapshot(d, fmt="yaml"),
        "deep_zip": H.deep_kai_zip(d),
        "chain": H.queue_chain_snapshot(d),
        "chain_fs": H.queue_chain_fairshare(d),
        "dir": d,
    }


# ---------------------------------------------------------------------------------------------- billion laughs

@pytest.mark.parametrize("argv", [("snapshot", "validate"), ("schedule",)])
def test_billion_laughs_snapshot_stops_at_the_alias_budget(inputs, argv):
    one_line_error(kaidash(*argv, str(inputs["laughs"])), "laughs.yaml", "YAML aliases expand to more than 100,000",
                   "line 14")


def test_billion_laughs_fairshare_stops_at_the_alias_budget(inputs):
    one_line_error(kaidash("fairshare", str(inputs["laughs_fs"])), "laughs-fairshare.yaml",
                   "YAML aliases expand to more than 100,000")


# ---------------------------------------------------------------------------------------------- zip bombs

@pytest.mark.parametrize("argv", [("snapshot", "validate"), ("schedule",), ("snapshot", "import", "-o", "{out}")])
def test_zip_bomb_is_refused_from_its_header(inputs, argv):
    argv = [a.format(out=inputs["dir"] / "out.yaml") for a in argv]
    cmd = [*argv[:2], str(inputs["bomb"]), *argv[2:]] if argv[0] == "snapshot" else [argv[0], str(inputs["bomb"])]
    one_line_error(kaidash(*cmd), "bomb.zip:snapshot.json", "inflates to 2,048 MiB", "512 MiB limit on a zip member")
    assert not (inputs["dir"] / "out.yaml").exists()


def test_zip_bomb_with_a_lying_header_stops_at_the_declared_size(inputs):
    one_line_error(kaidash("snapshot", "validate", str(inputs["lying"])), "lying.zip:snapshot.json",
                   "truncated or corrupt")


def test_zip_member_over_the_compression_ratio(inputs):
    one_line_error(kaidash("snapshot", "validate", str(inputs["ratio"])), "ratio.zip:snapshot.json",
                   "over 200:1", "compression ratio")


def test_zip_with_too_many_members(inputs):
    one_line_error(kaidash("snapshot", "validate", str(inputs["many"])), "many.zip", "20,001 members",
                   "limit of 1,000")


def test_size_limit_follows_the_environment(inputs, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 300_000)   # 3 MB
    one_line_error(kaidash("snapshot", "validate", str(big), env={"KAIDASH_MAX_INPUT_MIB": "1"}), "big.yaml",
                   "over the 1 MiB limit on an input file", "KAIDASH_MAX_INPUT_MIB")


# ---------------------------------------------------------------------------------------------- nesting

@pytest.mark.parametrize("key,argv", [("deep_json", ("snapshot", "validate")), ("deep_yaml", ("schedule",)),
                                      ("deep_zip", ("snapshot", "validate"))])
def test_deep_nesting_is_the_nesting_limit_not_a_recursion_error(inputs, key, argv):
    one_line_error(kaidash(*argv, str(inputs[key])), inputs[key].name, "nested more than 100 levels")


def test_nesting_within_the_limit_is_read(tmp_path):
    path = H.deep_snapshot(tmp_path, depth=90, fmt="yaml")   # a 90-deep label value: a field error, not a limit
    result = kaidash("snapshot", "validate", str(path))
    line = one_line_error(result, "nodes[n0].labels.a", "label keys and values must be strings")
    assert "nested" not in line


# ---------------------------------------------------------------------------------------------- queue chains

@pytest.mark.parametrize("argv,key", [(("snapshot", "validate"), "chain"), (("schedule",), "chain"),
                                      (("fairshare",), "chain_fs")])
def test_queue_chain_3000_deep_is_the_same_clear_error_everywhere(inputs, argv, key):
    one_line_error(kaidash(*argv, str(inputs[key])), "queues[q100].parent", "queue tree deeper than 100 levels",
                   "top-level queue 'q0'", "reaches level 3000")


def test_queue_chain_at_the_limit_works_everywhere(tmp_path):
    chain = H.queue_chain_snapshot(tmp_path, depth=100)
    assert kaidash("snapshot", "validate", str(chain)).stdout.startswith("ok: 1 nodes, 100 queues, 1 jobs")
    out = kaidash("schedule", str(chain), "--format", "json")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["jobs"]["j"]["status"] == "binding"   # the deepest queue's job runs
    fs = kaidash("fairshare", str(H.queue_chain_fairshare(tmp_path, depth=100)), "--format", "json")
    assert fs.returncode == 0, fs.stderr[-2000:]
    assert json.loads(fs.stdout)["fair_share"]["q99"]["gpu"] == 5   # each level passes its request of 5 down


# ---------------------------------------------------------------------------------------------- special files

def test_device_file_is_refused():
    one_line_error(kaidash("snapshot", "validate", "/dev/zero"), "/dev/zero", "a character device",
                   "not a regular file")


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)
    one_line_error(kaidash("schedule", str(fifo), timeout=60), "cluster.yaml", "named pipe")


def test_non_utf8_file_is_a_clear_error(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"version: 1\nnodes:\n- name: n\xe9ud\n")
    one_line_error(kaidash("snapshot", "validate", str(path)), "latin1.yaml", "not UTF-8")


# ---------------------------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("argv", [("snapshot", "generate", "--nodes", "2"),
                                  ("snapshot", "import", str(ROOT / "examples" / "small-cluster.yaml"))])
def test_output_in_a_missing_directory_is_refused_before_the_work(tmp_path, argv):
    out = tmp_path / "no" / "such" / "dir" / "out.yaml"
    one_line_error(kaidash(*argv, "-o", str(out)), f"-o {out}", "does not exist")


def test_output_in_an_unwritable_directory_is_refused(tmp_path):
    one_line_error(kaidash("snapshot", "generate", "--nodes", "2", "-o", "/proc/kaidash-out.yaml"),
                   "-o /proc/kaidash-out.yaml", "cannot write in /proc")


def test_simulate_out_is_checked_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = kaidash("simulate", "--scenario", "1", "--nodes", "4", "--hours", "1", "--out", str(blocker / "frames"))
    one_line_error(result, f"--out {blocker / 'frames'}", "cannot create the directory")
    assert result.stdout == ""   # nothing ran


# ---------------------------------------------------------------------------------------------- other commands

def test_fairshare_without_total_is_an_error(tmp_path):
    path = tmp_path / "no-total.yaml"
    path.write_text("queues:\n- {name: a, gpu: {quota: 2, request: 4}}\n")
    one_line_error(kaidash("fairshare", str(path)), "total: required", "at least one of gpu, cpu, memory")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_capture_from_an_unreachable_api_server_is_one_plain_line(tmp_path):
    port = _closed_port()
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    line = one_line_error(kaidash("snapshot", "capture", "--kubeconfig", str(cfg), "-o", str(tmp_path / "c.yaml")),
                          f"cannot reach the API server at 127.0.0.1:{port}: connection refused", "nodes, pods")
    assert "HTTPSConnectionPool" not in line and "Max retries" not in line


def test_debug_prints_the_traceback_as_well(tmp_path):
    result = kaidash("snapshot", "validate", str(tmp_path / "missing.yaml"), "--debug")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("kaidash snapshot: error: invalid snapshot:")


# ---------------------------------------------------------------------------------------------- servers

def _free_port() -> int:
    return _closed_port()


def test_serve_on_a_busy_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        one_line_error(kaidash("serve", "--port", str(port)), f"cannot listen on 127.0.0.1:{port}",
                       "address already in use")


@pytest.mark.parametrize("snapshot,words", [
    ("missing.yaml", ("missing.yaml", "no such file")),
    ("broken.yaml", ("broken.yaml", "not valid YAML")),
    ("/etc/passwd", ("/etc/passwd", "outside the data directories", "--data-dir")),
])
def test_serve_checks_its_snapshot_before_starting(tmp_path, snapshot, words):
    (tmp_path / "broken.yaml").write_text("nodes: [\n")
    path = snapshot if snapshot.startswith("/") else str(tmp_path / snapshot)
    one_line_error(kaidash("serve", "--port", str(_free_port()), "--snapshot", path, "--data-dir", str(tmp_path)),
                   *words)


def test_serve_checks_the_prometheus_url_before_starting():
    one_line_error(kaidash("serve", "--port", str(_free_port()), "--prometheus", "localhost:9090"),
                   "--prometheus localhost:9090", "expected http://HOST:PORT")


def _non_loopback_address():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))   # no packet is sent; picks the outgoing interface
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_exporter_listens_on_loopback_by_default():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli", "exporter", "--port", str(port), "--nodes", "2"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert f"serving http://127.0.0.1:{port}/metrics" in line, line
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        other = _non_loopback_address()
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=2).close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_loaders_stay_responsive_while_a_fifo_has_no_writer(tmp_path):
    """The library path too: reading a FIFO returns (refused) instead of blocking in open()."""
    from scheduler.errors import KaidashError
    from scheduler.snapshot_io import load_snapshot

    fifo = tmp_path / "s.json"
    os.mkfifo(fifo)
    outcome = []

    def read() -> None:
        try:
            load_snapshot(fifo)
        except KaidashError as exc:
            outcome.append(str(exc))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "load_snapshot blocked on a FIFO"
    assert outcome and "named pipe" in outcome[0]


def test_serve_listens_on_loopback_by_default():
    from scheduler.cli import build_parser

    parser, _ = build_parser()
    assert parser.parse_args(["serve"]).address == "127.0.0.1"
    assert parser.parse_args(["exporter"]).host == "127.0.0.1"
