"""The ``fastbag`` command as a Unix tool: per-file errors, one-line warnings and argument errors, closed
pipes, Ctrl-C and SIGTERM, and the ``--step`` spelling.

Bags are written here with :class:`fastbag.Writer` (times chosen to the nanosecond), and damaged by cutting
their bytes; signals and pipes are checked on a real ``python -m fastbag`` process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import fastbag
from conftest import DATA, NO_DATA
from fastbag.cli import main

REPO = Path(__file__).resolve().parents[1]
FLOAT64 = ("std_msgs/Float64", "float64 data\n", "fdb28210bfa9d7c91146260178d9a584")
#: 2024-05-03 13:00:15.796545476 UTC: the hundredths round up (.80) but truncate to .79.
LATE = 1714741215796545476


def write_floats(path: Path, times: list[int] | np.ndarray, topic: str = "/x") -> Path:
    """A ROS1 bag with one std_msgs/Float64 topic, message k (value k) received at ``times[k]``."""
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection(topic, *FLOAT64)
        for k, t in enumerate(times):
            writer.write(connection, int(t), np.float64(k).tobytes())
    return path


def run_fastbag(*args: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fastbag", *args], cwd=REPO, **options)


def stderr_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


# -- fastbag info -------------------------------------------------------------------------------------------

def test_info_reports_each_file_and_fails_at_the_end(tmp_path, capsys):
    empty = tmp_path / "empty.bag"
    empty.write_bytes(b"")
    good = write_floats(tmp_path / "good.bag", [10**9, 2 * 10**9])
    missing = tmp_path / "missing.bag"
    assert main(["info", str(empty), str(good), str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"path:        {good}\n")  # the good bag after the bad one is described
    assert "messages:    2" in captured.out.splitlines()
    errors = captured.err.splitlines()
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"fastbag: {empty}: ") and "file is empty" in errors[0]
    assert errors[1] == f"fastbag: {missing}: No such file or directory"
    assert all(line.count(str(tmp_path)) == 1 for line in errors), errors  # each names its file once
    # JSON: one document, the report of one bag or a list of several's, the errors on stderr
    assert main(["info", "--json", str(empty), str(good)]) == 1
    captured = capsys.readouterr()
    assert [report["messages"] for report in json.loads(captured.out)] == [2]
    assert captured.err.startswith(f"fastbag: {empty}: ")
    assert main(["info", "--json", str(good), str(empty), str(good)]) == 1
    assert [report["path"] for report in json.loads(capsys.readouterr().out)] == [str(good), str(good)]
    assert main(["info", "--json", str(good)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["messages"] == 2
    with fastbag.open(good) as bag:  # the text's compressed and uncompressed sizes, as the JSON has them too
        stored, decompressed = bag.compression_sizes["none"]
    assert report["compression_sizes"] == {"none": {"stored": stored, "decompressed": decompressed}} and stored > 0
    assert main(["info", str(good), str(good)]) == 0  # all readable: success, a blank line between reports
    assert capsys.readouterr().out.count(f"\n\npath:        {good}\n") == 1


def test_info_start_and_end_show_one_instant(tmp_path, capsys):
    path = write_floats(tmp_path / "late.bag", [LATE - 60_123_456_789, LATE])
    assert main(["info", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # both forms truncated to the hundredth: .79 beside .79 (the epoch seconds were rounded to .80)
    assert "start:       May 03 2024 12:59:15.67 (1714741155.67)" in lines
    assert "end:         May 03 2024 13:00:15.79 (1714741215.79)" in lines
    from fastbag.viz.info import _stamp

    assert _stamp(LATE // 10_000_000 * 10_000_000) == "May 03 2024 13:00:15.79 (1714741215.79)"  # exact
    assert _stamp(-1) == "Dec 31 1969 23:59:59.99 (-0.01)"  # before 1970: both floored the same way


# -- warnings ---------------------------------------------------------------------------------------------

def test_warnings_are_one_fastbag_line(tmp_path, capsys):
    path = write_floats(tmp_path / "whole.bag", np.arange(1, 201) * 10**9)
    cut = tmp_path / "cut.bag"
    cut.write_bytes(path.read_bytes()[:-3000])  # the index and the end of the chunk lost: opens with a warning
    before = warnings.showwarning, signal.getsignal(signal.SIGTERM)
    assert main(["info", str(cut)]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"fastbag: warning: {cut}: ") and "rebuilt the index by scanning" in lines[0]
    assert "cli.py" not in err and "FastbagWarning" not in err
    assert "problems:" in out
    assert (warnings.showwarning, signal.getsignal(signal.SIGTERM)) == before  # restored for the caller
    with pytest.warns(fastbag.FastbagWarning):  # the library's warnings are untouched outside the command
        fastbag.open(cut).close()


# -- pipes and signals ----------------------------------------------------------------------------------

def test_a_closed_pipe_ends_quietly(tmp_path):
    path = write_floats(tmp_path / "a.bag", [10**9, 2 * 10**9])
    process = run_fastbag("info", "--json", *[str(path)] * 200, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    process.stdout.close()  # the reader is gone before anything is written (as `| head` once it has its line)
    err = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=120) == 141
    assert err == ""


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 143, "fastbag: terminated; complete before the interrupt: none"),
    (signal.SIGINT, 130, "fastbag: interrupted; complete before the interrupt: none")])
def test_an_interrupted_export_leaves_no_partial_file(tmp_path, sig, code, said):
    pytest.importorskip("pyarrow.parquet")
    path = write_floats(tmp_path / "long.bag", np.arange(1, 20001) * 10**6)
    out = tmp_path / "out"
    # one message a part: seconds of work, a temporary file open the whole time
    process = run_fastbag("export", str(path), str(out), "--step", "1", "--no-progress",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out.is_dir() and any(f.name.endswith(".partial") for f in out.iterdir())):
        assert process.poll() is None and time.monotonic() < deadline, "the export ended before it was interrupted"
        time.sleep(0.01)
    assert process.poll() is None, "the export ended before it was interrupted"
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    assert process.returncode == code, err
    # (a fresh install also says, on stderr, that it compiles its kernels, and when that is done)
    assert [line for line in err.strip().splitlines() if "kernels" not in line] == [said], err
    # neither a half-written file nor a hidden .partial, nor the folder the export made for them
    assert not out.exists()


def test_version_and_a_recordings_metadata_file(tmp_path, capsys):
    """``--version``; ``info`` of a rosbag2 recording's metadata.yaml describes its directory."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"fastbag {fastbag.__version__}\n"
    recording = DATA / "db3" / "MichaelGrupp__evo__test__data__tf_example"
    if not recording.exists():
        pytest.skip(NO_DATA)
    assert main(["info", str(recording / "metadata.yaml")]) == 0
    assert capsys.readouterr().out.startswith(f"path:        {recording}\nformat:      rosbag2\n")


def test_an_unknown_topic_to_export_is_a_wrong_argument(tmp_path, capsys):
    path = write_floats(tmp_path / "a.bag", [10**9, 2 * 10**9])
    assert main(["export", str(path), str(tmp_path / "out"), "--topics", "/nope", "--no-progress"]) == 2
    assert stderr_lines(capsys) == [f"fastbag: no topic '/nope' in {path}; topics: /x"]
    assert main(["export", str(path), str(tmp_path / "out"), "--topics", "/x", "--no-progress"]) == 0
    assert stderr_lines(capsys)[-1] == f"2 messages of 1 topic written to {tmp_path / 'out'}"


# -- bad arguments ---------------------------------------------------------------------------------------------

GAP = "argument --gap-factor: must be a positive number, not "
FORMAT = "argument -o/--output: cannot write '{tmp}/%s': matplotlib writes no %r images"


@pytest.mark.parametrize(("args", "said"), [
    (["info", "--aes-key", "zz", "{bag}"], "argument --aes-key: 'zz' is not hexadecimal"),
    (["info", "--aes-key", "00ff", "{bag}"], "argument --aes-key: an AES key is 32 hex digits, not 4"),
    (["plot", "{bag}", "/x", "-o", "{tmp}/x.xyz"], FORMAT % ("x.xyz", "xyz")),
    (["timeline", "{bag}", "-o", "{tmp}/t.jpgg"], FORMAT % ("t.jpgg", "jpgg")),
    (["timeline", "{bag}", "--gap-factor", "0", "-o", "{tmp}/t.png"], GAP + "0.0"),
    (["timeline", "{bag}", "--gap-factor", "-1", "-o", "{tmp}/t.png"], GAP + "-1.0"),
    (["demo", "--seconds", "-1"], "argument --seconds: a length in seconds is 0 or more, not -1.0"),
    (["demo", "--seconds", "nan"], "argument --seconds: a length in seconds is 0 or more, not nan"),
    (["bench", "--jobs", "imu-1m", "imu-1m-dbx"], "argument --jobs: no job 'imu-1m-dbx'; jobs: imu-1m "),
    (["export", "{bag}", "{tmp}/out", "--step", "0"], "argument --step: step must be at least 1 message, not 0"),
    (["export", "{bag}", "{tmp}/out", "--step", "abc"], "argument --step: step must be a number of messages or a "
                                                        "size like '256 MB', not 'abc'"),
    (["export", "{bag}", "{tmp}/out", "--format", "npz", "--compression", "zstd"],
     "argument --compression: npz compression is one of none, deflate, gzip, not 'zstd'"),
    (["plot", "{bag}", "/x", "-o", "{tmp}"], "argument -o/--output: cannot write {tmp}: it is a folder; name "
                                             "the image's file"),
    (["demo", "-o", "{tmp}/demo.mcap"], "argument -o/--output: the demo writes a ROS 1 bag, named .bag, not "
                                        "'{tmp}/demo.mcap'"),
], ids=["aes-not-hex", "aes-short", "plot-format", "timeline-format", "gap-0", "gap-negative", "demo-negative",
        "demo-nan", "bench-unknown-job", "export-step-0", "export-step-text", "export-codec", "plot-into-folder",
        "demo-not-bag"])
def test_bad_arguments_are_one_error_line(tmp_path, capsys, args, said):
    if any(a.startswith("{tmp}") for a in args) and args[0] != "export":
        pytest.importorskip("matplotlib")
    path = write_floats(tmp_path / "a.bag", [10**9, 2 * 10**9])
    args = [a.format(bag=path, tmp=tmp_path) for a in args]
    assert main(args) == 2
    lines = stderr_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("fastbag: error: " + said.format(tmp=tmp_path)), lines
    if "matplotlib writes no" in said:  # and what it can write instead
        assert ", png, " in lines[0].split("; suffixes: ")[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bag"]  # checked before anything was written


def test_an_image_named_without_a_suffix_is_a_png_at_that_path(tmp_path):
    """matplotlib adds ``.png`` to a name without a suffix: ``-o /tmp`` wrote ``/tmp.png`` (QA). The PNG is written
    where -o says."""
    pytest.importorskip("matplotlib")
    path = write_floats(tmp_path / "a.bag", [10**9, 2 * 10**9])
    assert main(["plot", str(path), "/x", "data", "-o", str(tmp_path / "plot")]) == 0
    assert main(["timeline", str(path), "-o", str(tmp_path / "timeline")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bag", "plot", "timeline"]
    assert all((tmp_path / name).read_bytes().startswith(b"\x89PNG") for name in ("plot", "timeline"))


def test_file_errors_name_the_path_without_errno_numbers(tmp_path, capsys):
    """One line each, ``PATH: what went wrong``, as ``fastbag info`` says it (not ``[Errno 2] ...: 'PATH'``)."""
    path = write_floats(tmp_path / "a.bag", [10**9, 2 * 10**9])
    (tmp_path / "afile").write_text("")
    assert main(["export", str(tmp_path / "none.bag"), str(tmp_path / "out")]) == 1
    assert main(["export", str(path), str(tmp_path / "afile"), "--no-progress"]) == 1
    lines = stderr_lines(capsys)
    assert lines == [f"fastbag: {tmp_path / 'none.bag'}: No such file or directory",
                     f"fastbag: {tmp_path / 'afile'}: not a folder to export into: a file of that name exists"]
    with pytest.raises(SystemExit) as stopped:  # (argparse's own line, after the usage)
        main(["export", str(path), str(tmp_path / "out"), "--start", "-5"])
    assert stopped.value.code == 2 and stderr_lines(capsys)[-1].endswith(
        "error: argument --start: -5 is before the epoch: times are seconds since 1970, as fastbag info prints them")


def test_a_hex_aes_key_opens_an_encrypted_bag(tmp_path, capsys):
    pytest.importorskip("cryptography")
    key = bytes(range(16))
    path = tmp_path / "enc.bag"
    with fastbag.Writer(path, aes_key=key) as writer:
        connection = writer.add_connection("/x", *FLOAT64)
        for k in range(3):
            writer.write(connection, (k + 1) * 10**9, np.float64(k).tobytes())
    assert main(["info", "--aes-key", key.hex().upper(), str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ["messages:", "3"] in [line.split() for line in out] and any(line.startswith("encryption: ") for line in out)
    assert main(["info", "--aes-key", bytes(16).hex(), str(path)]) == 1  # the wrong key
    assert any(line.split(None, 1)[1].startswith("not available (") for line in capsys.readouterr().out.splitlines()
               if line.startswith("key:"))


# -- --step ---------------------------------------------------------------------------------------------------

def test_step_numbers_are_message_counts_in_python_spelling(tmp_path, monkeypatch, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    import fastbag.convert.export as export_module

    path = write_floats(tmp_path / "a.bag", np.arange(1, 26) * 10**9)
    steps, real_export = [], export_module.export

    def export(*args, step, **options):
        steps.append(step)
        return real_export(*args, step=step, **options)

    monkeypatch.setattr(export_module, "export", export)
    for k, text in enumerate(["10_000", "10000", "1_0", "256 MB"]):
        assert main(["export", str(path), str(tmp_path / f"out{k}"), "--step", text, "--no-progress"]) == 0
        assert len(pq.read_table(tmp_path / f"out{k}" / "x.parquet")) == 25
    capsys.readouterr()
    assert steps == [10_000, 10_000, 10, "256 MB"]
    assert [type(s) for s in steps] == [int, int, int, str]


def test_definitions_for_bags_without_them_are_an_option_of_the_commands(tmp_path, capsys):
    """A rosbag2 recording of a custom type before Iron stores no definitions: fastbag.open(definitions=...)
    decodes it, but the commands had no such option while their errors said to pass definitions=."""
    bag = DATA / "db3" / "ros2__rosbag2__rosbag2_tests__resources__cdr_test"
    schemas = DATA / "mcap" / "ros2__rosbag2__rosbag2_tests__resources__mcap__cdr_test" / "cdr_test_0.mcap"
    if not (bag.exists() and schemas.exists()):
        pytest.skip(NO_DATA)
    pq = pytest.importorskip("pyarrow.parquet")
    from mcap.reader import make_reader

    folder = tmp_path / "ws" / "test_msgs" / "msg"  # a workspace's layout, the type from the MCAP copy's schema
    folder.mkdir(parents=True)
    with schemas.open("rb") as f:
        schema = next(s for s in make_reader(f).get_summary().schemas.values() if s.name == "test_msgs/msg/BasicTypes")
    (folder / "BasicTypes.msg").write_bytes(schema.data)
    assert main(["export", str(bag), str(tmp_path / "none"), "--topics", "/test_topic", "--no-progress"]) == 1
    assert "--definitions DIR" in capsys.readouterr().err  # the error says what a command line can do
    assert main(["export", str(bag), str(tmp_path / "out"), "--topics", "/test_topic", "--no-progress",
                 "--definitions", str(tmp_path / "ws")]) == 0
    capsys.readouterr()
    with fastbag.open(bag, definitions=str(tmp_path / "ws")) as opened:
        expected = opened.read("/test_topic")
    table = pq.read_table(tmp_path / "out" / "test_topic.parquet")
    assert table.column("int32_value").to_pylist() == expected.int32_value.tolist() and len(expected) == 3
    pytest.importorskip("matplotlib")
    assert main(["plot", str(bag), "/test_topic", "int32_value", "--definitions", str(tmp_path / "ws"),
                 "-o", str(tmp_path / "p.png")]) == 0 and (tmp_path / "p.png").stat().st_size > 0
    assert main(["info", str(bag), "--definitions", str(tmp_path / "nowhere")]) == 2
    assert "argument --definitions" in capsys.readouterr().err
