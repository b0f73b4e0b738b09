"""scheduler.safe_io: the limits one by one (exactly at and just over each), the server's data directories, the
read time limit, and the dashboard's Settings and upload paths refusing what they must without an error state."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
import zipfile
from pathlib import Path

import pytest
import yaml

import hostile_inputs as H
from kai_objects import kai_snapshot_doc, kai_zip_bytes, small_cluster
from scheduler import safe_io
from scheduler.errors import KaidashError, SnapshotError, SourceError
from scheduler.safe_io import DataDirs, InputLimitError, Limits, PathRefusedError, server_reads
from scheduler.snapshot_io import dumps_snapshot, load_snapshot, loads_snapshot, snapshot_to_dict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "small-cluster.yaml"


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_loader(request, monkeypatch):
    """The test runs with both YAML loaders: libyaml's parser (used when PyYAML has it) and PyYAML's own."""
    if request.param == "pure-python":
        monkeypatch.setattr(safe_io, "_LOADER", safe_io._PyLoader)
    elif safe_io._CParser is None:
        pytest.skip("PyYAML is built without libyaml here")
    return request.param


# ---------------------------------------------------------------------------------------------- nesting

@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.usefixtures("yaml_loader")
def test_nesting_limit_is_exact_and_the_same_for_json_and_yaml(fmt):
    limits = Limits(max_depth=10)
    ok = '{"a": ' + _nest(9) + "}"          # the mapping is level 1, nine lists below it: 10 levels
    assert safe_io.parse_document(ok, "ok", fmt, limits) == {"a": json.loads(_nest(9))}
    with pytest.raises(InputLimitError) as info:
        safe_io.parse_document('{"a": ' + _nest(10) + "}", "deep." + fmt, fmt, limits)
    assert info.value.limit == "max_depth" and info.value.path == "deep." + fmt
    assert "nested more than 10 levels" in str(info.value)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
@pytest.mark.usefixtures("yaml_loader")
def test_nesting_far_beyond_the_interpreter_stack_is_the_limit_error(fmt):
    with pytest.raises(InputLimitError, match="nested more than 100 levels"):
        safe_io.parse_document(_nest(200_000), "x", fmt)


# ---------------------------------------------------------------------------------------------- YAML aliases

@pytest.mark.usefixtures("yaml_loader")
def test_anchors_and_aliases_within_the_budget_read_as_if_expanded():
    shared = ("version: 1\nnodes:\n- {name: a, gpus: 0, cpu_millis: 1000, memory_bytes: 1000, pods: 10,"
              " labels: &lab {zone: z1, pool: p}}\n- {name: b, gpus: 0, cpu_millis: 1000, memory_bytes: 1000,"
              " pods: 10, labels: *lab}\nqueues: [{name: q, gpu: &g {quota: 2, limit: 4}}, {name: r, gpu: *g}]\n"
              "jobs: []\n")
    expanded = shared.replace("&lab ", "").replace("*lab", "{zone: z1, pool: p}").replace("&g ", "").replace(
        "*g", "{quota: 2, limit: 4}")
    assert snapshot_to_dict(loads_snapshot(shared)) == snapshot_to_dict(loads_snapshot(expanded))
    assert loads_snapshot(shared).nodes[1].labels == {"zone": "z1", "pool": "p"}


@pytest.mark.usefixtures("yaml_loader")
def test_alias_budget_counts_what_each_alias_expands_to():
    # l0 = [lol x5] (6 nodes); l1 = 5 x *l0 (5 x 6 = 30 added); l2 = 5 x *l1 (l1 is 31 nodes: 155 added);
    # use: *l2 (l2 is 156 nodes): 30 + 155 + 156 = 341 nodes added by aliases in all.
    text = "bomb:\n" + H._laughs(3, 5, "  ") + "\nuse: *l2\n"
    assert safe_io.parse_yaml(text, "t", Limits(max_alias_nodes=341))["use"][0][0] == ["lol"] * 5
    with pytest.raises(InputLimitError) as info:
        safe_io.parse_yaml(text, "bomb.yaml", Limits(max_alias_nodes=340))
    assert info.value.limit == "max_alias_nodes" and "bomb.yaml" in str(info.value) and "*l2" in str(info.value)


@pytest.mark.usefixtures("yaml_loader")
def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(SnapshotError, match="refers to a node that contains it"):
        safe_io.parse_yaml("a: &x [1, *x]\n", "loop.yaml")


@pytest.mark.parametrize("text,words", [
    ("a: " + "9" * 5000 + "\n", "unreadable value"),
    ("a: 2001-13-45\n", "unreadable value"),
    ("a: !!python/object:os.system ls\n", "not valid YAML"),
    ("a: &x 1\nb: &x 2\nc: *y\n", "not valid YAML"),
    ("a: 1\n---\nb: 2\n", "expected a single document"),
])
@pytest.mark.usefixtures("yaml_loader")
def test_yaml_oddities_are_snapshot_errors(text, words):
    with pytest.raises(SnapshotError, match=words):
        safe_io.parse_yaml(text, "odd.yaml")


def test_json_integer_with_too_many_digits_is_a_snapshot_error():
    with pytest.raises(SnapshotError, match="not valid JSON") as info:
        safe_io.parse_json('{"a": ' + "1" * 5000 + "}", "big.json")
    assert "set_int_max_str_digits" not in str(info.value)


# ---------------------------------------------------------------------------------------------- zips

def test_zip_limits_from_the_headers_are_exact(tmp_path):
    data = kai_zip_bytes(kai_snapshot_doc(small_cluster()))
    size = zipfile.ZipFile(io.BytesIO(data)).infolist()[0].file_size
    ok = safe_io.SafeZip(data, "k.zip", Limits(max_member_bytes=size))
    assert json.loads(ok.read("snapshot.json"))["rawObjects"]
    with pytest.raises(InputLimitError) as info:
        safe_io.SafeZip(data, "k.zip", Limits(max_member_bytes=size - 1)).read("snapshot.json")
    assert info.value.limit == "max_member_bytes" and info.value.path == "k.zip:snapshot.json"


def test_zip_member_count_and_table_of_contents(tmp_path):
    many = H.many_members_zip(tmp_path, members=50).read_bytes()
    assert len(safe_io.SafeZip(many, "m.zip", Limits(max_members=51)).names) == 51
    with pytest.raises(InputLimitError, match="51 members, over the limit of 50"):
        safe_io.SafeZip(many, "m.zip", Limits(max_members=50))
    with pytest.raises(InputLimitError, match="table of contents"):
        safe_io.SafeZip(many, "m.zip", Limits(max_central_directory_bytes=1000))


def test_lying_zip_header_is_capped_while_streaming(tmp_path):
    path = H.zip_bomb(tmp_path, inflated_bytes=64 * 2**20, lying=True)
    with pytest.raises(SnapshotError, match="truncated or corrupt"):
        safe_io.open_zip(path).read("snapshot.json")


def _flip_local_header(data: bytes, *, flags: int | None = None, method: int | None = None) -> bytes:
    """Rewrite the general-purpose flags / compression method of the first member in both headers."""
    out = bytearray(data)
    central = out.find(b"PK\x01\x02")
    if flags is not None:
        struct.pack_into("<H", out, 6, flags)
        struct.pack_into("<H", out, central + 8, flags)
    if method is not None:
        struct.pack_into("<H", out, 8, method)
        struct.pack_into("<H", out, central + 10, method)
    return bytes(out)


@pytest.mark.parametrize("change,words", [({"flags": 1}, "encrypted"), ({"method": 99}, "compression")])
def test_encrypted_or_unknown_compression_members_are_snapshot_errors(change, words):
    data = _flip_local_header(kai_zip_bytes(kai_snapshot_doc(small_cluster())), **change)
    with pytest.raises(SnapshotError, match=words):
        safe_io.SafeZip(data, "odd.zip", Limits()).read("snapshot.json")


# ---------------------------------------------------------------------------------------------- files

def test_file_size_limit_is_exact(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"x" * 1000)
    assert len(safe_io.read_bytes(path, Limits(max_file_bytes=1000))) == 1000
    with pytest.raises(InputLimitError) as info:
        safe_io.read_bytes(path, Limits(max_file_bytes=999))
    assert info.value.limit == "max_file_bytes" and info.value.path == str(path)


def test_limits_from_the_environment():
    assert Limits.from_env({}).max_file_bytes == 512 * 2**20
    assert Limits.from_env({"KAIDASH_MAX_INPUT_MIB": "2048"}).max_member_bytes == 2048 * 2**20
    with pytest.raises(SourceError, match="KAIDASH_MAX_INPUT_MIB"):
        Limits.from_env({"KAIDASH_MAX_INPUT_MIB": "lots"})


def test_directory_is_refused(tmp_path):
    with pytest.raises(PathRefusedError, match="a directory"):
        safe_io.read_bytes(tmp_path)


# ---------------------------------------------------------------------------------------------- server paths

def test_data_dirs_allow_inside_and_refuse_outside(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "s.yaml").write_text("x")
    (tmp_path / "secret.yaml").write_text("x")
    (data / "escape.yaml").symlink_to(tmp_path / "secret.yaml")
    dirs = DataDirs([data])
    assert dirs.check(data / "sub" / "s.yaml") == (data / "sub" / "s.yaml").resolve()
    for outside in (tmp_path / "secret.yaml", data / ".." / "secret.yaml", data / "escape.yaml", "/etc/passwd"):
        with pytest.raises(PathRefusedError, match="outside the data directories"):
            dirs.check(outside)


def test_the_opened_file_is_checked_against_the_data_dirs(tmp_path, monkeypatch):
    """A name that resolved inside a data directory but opens a file outside it (swapped in between)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "s.yaml").write_text("x")
    outside = tmp_path / "outside.yaml"
    outside.write_text("x")
    real_open = os.open
    monkeypatch.setattr(safe_io.os, "open", lambda p, flags: real_open(outside, flags))
    monkeypatch.setattr(safe_io.os, "stat", lambda p: os.lstat(outside))
    with server_reads(DataDirs([data])):
        with pytest.raises(PathRefusedError, match="outside the data directories"):
            safe_io.read_bytes(data / "s.yaml")


def test_default_data_dir_is_the_working_directory_but_never_the_root(tmp_path, monkeypatch):
    monkeypatch.delenv("KAIDASH_DATA_DIRS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert DataDirs.from_env().dirs == [tmp_path.resolve()]
    monkeypatch.chdir("/")
    with pytest.raises(PathRefusedError, match="none configured"):
        DataDirs.from_env().check("/etc/passwd")


@pytest.mark.parametrize("name", ["passwd", "kai.zip"])
def test_server_reads_refuse_paths_outside_the_data_dirs(tmp_path, name):
    target = "/etc/passwd" if name == "passwd" else tmp_path / "kai.zip"
    if name == "kai.zip":
        target.write_bytes(kai_zip_bytes(kai_snapshot_doc(small_cluster())))
        assert load_snapshot(target).nodes           # readable outside a server
    with server_reads(DataDirs([ROOT / "examples"])):
        with pytest.raises(PathRefusedError, match=f"{target}: outside the data directories"):
            load_snapshot(target)
        assert load_snapshot(EXAMPLE).nodes           # inside: read


def test_server_reads_give_up_after_the_time_limit(monkeypatch):
    release = threading.Event()
    slow = safe_io._read_regular

    def hung(*args):
        release.wait(30)                               # a read stuck on a dead network filesystem
        return slow(*args)

    monkeypatch.setattr(safe_io, "_read_regular", hung)
    try:
        with server_reads(DataDirs([ROOT]), timeout_s=0.2):
            with pytest.raises(SourceError, match="reading took longer than 0.2 s"):
                load_snapshot(EXAMPLE)
    finally:
        release.set()


# ---------------------------------------------------------------------------------------------- dashboard hooks

@pytest.fixture
def served_loop(monkeypatch):
    """A live loop serving the example snapshot, the way ``kaidash serve`` would (data dir: examples/)."""
    pytest.importorskip("panel")
    from dashboard.feeds import Feed
    from dashboard.loop import LiveLoop, MetricsReader
    from dashboard.options import SourceOptions

    monkeypatch.setenv("KAIDASH_DATA_DIRS", str(ROOT / "examples"))
    loop = LiveLoop(SourceOptions(source="snapshot", snapshot=str(EXAMPLE)), feed=Feed(load_snapshot(EXAMPLE), "ex"))
    loop.metrics = MetricsReader(simulated=False)
    before = loop.step()
    assert before is not None
    return loop, before


@pytest.mark.parametrize("path,words", [("/etc/passwd", "outside the data directories"),
                                        ("/dev/zero", "outside the data directories"),
                                        ("", "needs --snapshot FILE")])
def test_settings_refuse_a_bad_snapshot_path_and_keep_serving(served_loop, path, words):
    from dashboard.views.settings import SettingsView

    loop, before = served_loop
    view = SettingsView(loop.state, loop=loop)
    view.options.param.update(source="snapshot", snapshot=path)
    view.apply()
    msg = view.message.object
    assert 'data-apply="refused"' in msg and words in msg
    assert loop.state.source_status != "error" and loop.state.error in ("", None)
    assert loop.state.tick is before and loop.options.snapshot == str(EXAMPLE)


def test_settings_refuse_a_device_inside_a_data_dir(served_loop, monkeypatch):
    from dashboard.views.settings import SettingsView

    loop, before = served_loop
    monkeypatch.setenv("KAIDASH_DATA_DIRS", "/dev")
    view = SettingsView(loop.state, loop=loop)
    view.options.param.update(source="snapshot", snapshot="/dev/zero")
    view.apply()
    assert "a character device" in view.message.object and loop.state.tick is before


def test_settings_apply_a_good_snapshot_path(served_loop, tmp_path, monkeypatch):
    from dashboard.views.settings import SettingsView

    loop, before = served_loop
    (tmp_path / "two.yaml").write_text(dumps_snapshot(load_snapshot(EXAMPLE)))
    monkeypatch.setenv("KAIDASH_DATA_DIRS", os.pathsep.join([str(ROOT / "examples"), str(tmp_path)]))
    view = SettingsView(loop.state, loop=loop)
    view.options.param.update(source="snapshot", snapshot=str(tmp_path / "two.yaml"))
    view.apply()
    assert "Applied" in view.message.object
    assert loop.state.tick is not before and loop.state.source_label == "snapshot two.yaml"


def test_upload_of_hostile_files_is_refused_and_the_state_stays(served_loop, tmp_path):
    from dashboard.views.snapshot import SnapshotView

    loop, before = served_loop
    view = SnapshotView(loop.state, loop=loop)
    cases = [("laughs.yaml", H.billion_laughs_snapshot(tmp_path).read_bytes(), "YAML aliases expand"),
             ("bomb.zip", H.zip_bomb(tmp_path).read_bytes(), "limit on a zip member"),
             ("deep.json", H.deep_snapshot(tmp_path).read_bytes(), "nested more than 100 levels")]
    for name, data, words in cases:
        assert view.import_file(name, data) is False
        assert words in view.message.object, view.message.object
        assert loop.state.tick is before


def test_loop_on_a_refused_path_is_an_error_line_not_a_crash(monkeypatch):
    """``panel serve dashboard/app.py`` with KAIDASH_SNAPSHOT outside the data directories: the loop reports it."""
    pytest.importorskip("panel")
    from dashboard.loop import LiveLoop
    from dashboard.options import SourceOptions

    monkeypatch.setenv("KAIDASH_DATA_DIRS", str(ROOT / "examples"))
    loop = LiveLoop(SourceOptions(source="snapshot", snapshot="/etc/passwd"))
    assert loop.step() is None
    assert "outside the data directories" in loop.state.error


def test_every_refusal_is_a_kaidash_error():
    assert issubclass(PathRefusedError, KaidashError) and issubclass(InputLimitError, SnapshotError)
