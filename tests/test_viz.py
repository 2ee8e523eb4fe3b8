"""Looking at a bag: plots, the timeline and notebook views, rendered with Agg on real bags.

What is drawn is checked against an oracle, not against fastbag itself:
plotted values and times against what rosbags decodes from the same file
(the classic rosbag module for format 1.2, a plain record walk for an
unindexed bag, where rosbags cannot read); timelines against rosbags'
receive times; gaps against a bag written here with a known dropout. Every
figure is rendered to PNG and must not be blank.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.image import imread  # noqa: E402
from matplotlib.patches import StepPatch  # noqa: E402
from rosbags.highlevel import AnyReader  # noqa: E402

import fastbag  # noqa: E402
from fastbag.cli import main  # noqa: E402
from fastbag.viz.fields import series  # noqa: E402
from fastbag.viz.plot import MAX_MARKS, plot_timeline, plot_topics  # noqa: E402
from fastbag.viz.timeline import find_gaps  # noqa: E402

from conftest import data_file, open_quietly  # noqa: E402
from rosbags_fixtures import conn_spec, rows, scan_file  # noqa: E402

IMU = "ros1v2/CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__sparkfun_razor.bag"  # bz2 chunks
TURTLES = "ros1v2/cruise-automation__rosbag.js__fixtures__example.bag"         # 9 topics, /tf over MAX_MARKS
ROBOT = "ros1v2/zaki0929__bagfiles__2018__feb13__col.bag"                        # tf, LaserScan, Odometry
IMAGES = "ros1v2/eric-wieser__ros_numpy__test__test.bag"                         # Image, CompressedImage, ...
EMPTY_DEFINITION = "ros1v2/cruise-automation__webviz__packages__webviz-core__public__fixtures__" \
                   "bag-with-empty-message-definition.bag"
LEGACY = "ros1legacy/pbouffard__ccny-ros-pkg-pbouffard__ccny_ground_station__gpsd_viewer__demo__demo@381f1a07.bag"
UNINDEXED = "broken/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_unindexed.bag"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def rosbags_topic(path: Path, topic: str) -> tuple[np.ndarray, list]:
    """(int64 receive times, deserialized messages) of one topic, as rosbags reads them."""
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        got = [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages(connections=conns)]
    return np.array([t for t, _ in got], dtype=np.int64), [m for _, m in got]


def rosbags_times(path: Path) -> dict[str, np.ndarray]:
    """Receive times of every topic, as rosbags reads them."""
    out: dict[str, list[int]] = {}
    with AnyReader([path]) as reader:
        for connection, t, _ in reader.messages():
            out.setdefault(connection.topic, []).append(t)
    return {topic: np.array(times, dtype=np.int64) for topic, times in out.items()}


def rendered(figure) -> np.ndarray:
    """The figure as PNG pixels (Agg); fails when the picture is blank."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=60)
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(io.BytesIO(buffer.getvalue()))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels[..., :3].std() > 0.05, "the picture is blank"
    return pixels


def seconds(times: np.ndarray, t0: int) -> np.ndarray:
    return (times - t0) / 1e9


# -- plots of fields -------------------------------------------------------------------

def test_imu_plot_draws_rosbags_values_against_receive_time():
    path = data_file(IMU)
    times, msgs = rosbags_topic(path, "/imu/data_raw")
    with fastbag.open(path) as bag:
        arr = bag.read("/imu/data_raw")
    ax = arr.plot("linear_acceleration.x", "linear_acceleration.y")
    x_line, y_line = ax.get_lines()
    assert x_line.get_label() == "linear_acceleration.x" and y_line.get_label() == "linear_acceleration.y"
    expected_x = np.array([m.linear_acceleration.x for m in msgs])
    expected_y = np.array([m.linear_acceleration.y for m in msgs])
    assert len(times) > 1000
    np.testing.assert_array_equal(x_line.get_xdata(), seconds(times, int(times[0])))
    np.testing.assert_array_equal(x_line.get_ydata(), expected_x)
    np.testing.assert_array_equal(y_line.get_ydata(), expected_y)
    assert ax.get_title() == "/imu/data_raw (sensor_msgs/Imu)"
    assert ax.get_xlabel().startswith("receive time [s] since ")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["linear_acceleration.x", "linear_acceleration.y"]
    assert ax.figure.canvas.manager is not None  # made through pyplot: a notebook displays it
    limits = ax.dataLim
    assert limits.x0 == 0 and limits.x1 == pytest.approx((times[-1] - times[0]) / 1e9)
    assert limits.y0 == min(expected_x.min(), expected_y.min())
    assert limits.y1 == max(expected_x.max(), expected_y.max())
    rendered(ax.figure)


def test_plot_against_header_stamp():
    path = data_file(IMU)
    _, msgs = rosbags_topic(path, "/imu/data_raw")
    stamps = np.array([m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in msgs], dtype=np.int64)
    with fastbag.open(path) as bag:
        arr = bag.read("/imu/data_raw")
    figure = matplotlib.figure.Figure()
    ax = arr.plot("angular_velocity.z", ax=figure.add_subplot(), stamp="header", t0=int(stamps[0]))
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_xdata(), seconds(stamps, int(stamps[0])))
    np.testing.assert_array_equal(line.get_ydata(), [m.angular_velocity.z for m in msgs])
    assert ax.get_xlabel().startswith("header.stamp [s] since ") and ax.get_ylabel() == "angular_velocity.z"
    rendered(figure)
    with fastbag.open(data_file(ROBOT)) as bag:  # tf2_msgs/TFMessage has no header
        with pytest.raises(ValueError, match="has no header.stamp"):
            bag.read("/tf").plot("transforms", stamp="header")


def test_array_fields_plot_their_length_or_one_element():
    """``transforms`` (variable-size structs) and ``ranges`` as lengths; ``[k]`` as element k; an element no
    message has is refused (NaN where some messages lack it: see the Ragged test)."""
    path = data_file(ROBOT)
    tf_times, tfs = rosbags_topic(path, "/tf")
    _, scans = rosbags_topic(path, "/scan")
    with fastbag.open(path) as bag:
        figure = plot_topics(bag, [("/tf", ["transforms", "transforms[0].transform.translation.x"]),
                                   ("/scan", ["ranges", "ranges[100]"])])
        with pytest.raises(IndexError, match=r"^no message's 'transforms' has an element \[1\]: the longest has 1$"):
            plot_topics(bag, [("/tf", ["transforms[1].transform.translation.x"])])
        t0 = bag.start_time
    tf_ax, scan_ax = figure.axes
    length, first = tf_ax.get_lines()
    assert length.get_label() == "len(transforms)"
    np.testing.assert_array_equal(length.get_xdata(), seconds(tf_times, t0))
    np.testing.assert_array_equal(length.get_ydata(), [len(m.transforms) for m in tfs])
    np.testing.assert_array_equal(first.get_ydata(), [m.transforms[0].transform.translation.x for m in tfs])
    assert max(len(m.transforms) for m in tfs) == 1  # so element 1 is absent everywhere (refused above)
    scan_length, scan_element = scan_ax.get_lines()
    np.testing.assert_array_equal(scan_length.get_ydata(), [len(m.ranges) for m in scans])
    np.testing.assert_array_equal(scan_element.get_ydata(), np.array([m.ranges[100] for m in scans], np.float64))
    assert tf_ax.get_xlabel() == "" and scan_ax.get_xlabel().startswith("receive time [s] since ")
    rendered(figure)


def test_ragged_element_is_nan_where_a_message_is_shorter(tmp_path):
    """A numeric array whose length varies per message (a Ragged): lengths, and element 2 where present."""
    spec = conn_spec("/samples", "std_msgs/Float64MultiArray")
    path = tmp_path / "ragged.bag"
    lengths = [0, 1, 3, 5, 2, 40, 3]
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection(spec.topic, spec.msgtype, spec.msgdef, spec.md5sum)
        for k, n in enumerate(lengths):
            layout = b"\x00\x00\x00\x00" + (0).to_bytes(4, "little")  # no dims, data_offset 0
            values = np.arange(n, dtype=np.float64) + 10 * k
            writer.write(connection, 10**9 + k * 10**8, layout + n.to_bytes(4, "little") + values.tobytes())
    with fastbag.open(path) as bag:
        arr = bag.read("/samples")
    assert not isinstance(arr["data"], np.ndarray)  # really ragged
    y, label = series(arr, "data")
    assert label == "len(data)" and y.tolist() == lengths
    y, label = series(arr, "data[2]")
    expected = [10 * k + 2.0 if n > 2 else np.nan for k, n in enumerate(lengths)]
    np.testing.assert_array_equal(y, expected)
    # an element no message has is a mistake (the plot would be empty), past the longest or of empty ones
    with pytest.raises(IndexError, match=r"^no message's 'data' has an element \[99999999999999999999999\]: "
                                         r"the longest has 40$"):
        series(arr, "data[99999999999999999999999]")
    with pytest.raises(IndexError, match=r"^no message's 'layout.dim' has an element \[0\]: every one is empty$"):
        series(arr, "layout.dim[0].size")
    with pytest.raises(KeyError, match="no field 'nope'"):
        series(arr, "nope")
    with pytest.raises(fastbag.NotFoundError, match=r"^layout.dim is an array in each message: name one "
                                                  r"element of it, as layout.dim\[0\].size$"):
        series(arr, "layout.dim.size")
    with pytest.raises(ValueError, match="not an array"):
        series(arr, "layout.data_offset[0]")


def test_image_bag_plots_per_message_data_length():
    path = data_file(IMAGES)
    _, images = rosbags_topic(path, "/image")
    _, compressed = rosbags_topic(path, "/compressedimage")
    with fastbag.open(path) as bag:
        figure = plot_topics(bag, [("/image", ["data", "height"]), ("/compressedimage", ["data"])])
    image_ax, compressed_ax = figure.axes
    assert image_ax.get_lines()[0].get_ydata().tolist() == [len(m.data) for m in images]
    assert image_ax.get_lines()[1].get_ydata().tolist() == [m.height for m in images]
    assert compressed_ax.get_lines()[0].get_ydata().tolist() == [len(m.data) for m in compressed]
    assert compressed_ax.get_title() == "/compressedimage (sensor_msgs/CompressedImage)"
    rendered(figure)


def test_text_and_struct_fields_say_what_to_pick():
    with fastbag.open(data_file(ROBOT)) as bag:
        scan = bag.read("/scan")
    with pytest.raises(ValueError, match="is text"):
        scan.plot("header.frame_id")
    with pytest.raises(ValueError, match="pick one of header.seq, header.stamp, header.frame_id"):
        scan.plot("header")
    with pytest.raises(ValueError, match="bad field path"):
        scan.plot("ranges[-1]")


def test_an_element_past_a_fixed_size_array_is_an_error(capsys, tmp_path):
    """``float64[9]`` has 9 elements in every message: [20] is a mistake, not NaN. So is an element past the
    end of a variable array (``ranges``, here dense: every scan has 726) in every message."""
    path = data_file(IMU)
    _, imus = rosbags_topic(path, "/imu/data_raw")
    _, odoms = rosbags_topic(data_file(ROBOT), "/odom")
    with fastbag.open(path) as bag:
        imu = bag.read("/imu/data_raw")
    with fastbag.open(data_file(ROBOT)) as bag:
        odom, scan = bag.read("/odom"), bag.read("/scan")
    with pytest.raises(IndexError, match=r"^field 'orientation_covariance' is a fixed-size array of 9 elements: "
                                         r"it has no element \[20\]$"):
        series(imu, "orientation_covariance[20]")
    with pytest.raises(IndexError, match=r"'orientation_covariance' is a fixed-size array of 9 elements"):
        imu.plot("orientation_covariance[9]")
    y, _ = series(imu, "orientation_covariance[8]")
    np.testing.assert_array_equal(y, [m.orientation_covariance[8] for m in imus])
    with pytest.raises(IndexError, match=r"'pose.covariance' is a fixed-size array of 36 elements"):  # in a struct
        series(odom, "pose.covariance[36]")
    np.testing.assert_array_equal(series(odom, "pose.covariance[35]")[0], [m.pose.covariance[35] for m in odoms])
    assert isinstance(scan["ranges"], np.ndarray) and scan["ranges"].shape[1] == 726  # dense, but variable
    with pytest.raises(IndexError, match=r"^no message's 'ranges' has an element \[726\]: the longest has 726$"):
        series(scan, "ranges[726]")
    np.testing.assert_array_equal(series(scan, "ranges[725]")[0], scan["ranges"][:, 725])
    # the command: one line naming the field and its length, exit 2, no picture
    out = tmp_path / "x.png"
    assert main(["plot", str(path), "/imu/data_raw", "orientation_covariance[20]", "-o", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "fastbag: field 'orientation_covariance' is a fixed-size array of 9 elements: it has no element [20]"]
    assert not out.exists()


def test_fixed_and_variable_arrays_of_structs(tmp_path):
    """``Point[3]`` is fixed by the definition; ``float64[]`` of one length in every message is not."""
    definition = ("geometry_msgs/Point[3] corners\nfloat64[] weights\n" + "=" * 80 +
                  "\nMSG: geometry_msgs/Point\nfloat64 x\nfloat64 y\nfloat64 z\n")
    path = tmp_path / "triangles.bag"
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection("/triangles", "test_msgs/Triangle", definition,
                                           "d75522e75d8cb11707d189cca10ea983")
        for k in range(5):
            corners = np.arange(9, dtype=np.float64) + 100 * k
            writer.write(connection, 10**9 + k, corners.tobytes() + (2).to_bytes(4, "little")
                         + np.array([k, -k], np.float64).tobytes())
    with fastbag.open(path) as bag:
        arr = bag.read("/triangles")
    np.testing.assert_array_equal(series(arr, "corners[2].x")[0], [100 * k + 6 for k in range(5)])
    with pytest.raises(IndexError, match=r"^field 'corners' is a fixed-size array of 3 elements"):
        series(arr, "corners[3].x")
    assert isinstance(arr["weights"], np.ndarray) and arr["weights"].shape == (5, 2)
    np.testing.assert_array_equal(series(arr, "weights[1]")[0], [-k for k in range(5)])
    with pytest.raises(IndexError, match=r"^no message's 'weights' has an element \[2\]: the longest has 2$"):
        series(arr, "weights[2]")  # a variable array (dense: every message has 2), past every message's end


# -- the command line ------------------------------------------------------------------

def test_cli_plot_writes_png_svg_and_pdf(tmp_path, capsys):
    path = data_file(IMU)
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"imu{suffix}"
        assert main(["plot", str(path), "/imu/data_raw", "linear_acceleration.x", "linear_acceleration.y",
                     "/imu/mag", "-o", str(out)]) == 0
        assert out.read_bytes()[:len(magic)] == magic
    pixels = imread(tmp_path / "imu.png")
    assert pixels[..., :3].std() > 0.05
    assert main(["plot", str(path), "/imu/data_raw", "linear_acceleration.w", "-o", str(tmp_path / "x.png")]) == 2
    assert "no field 'w' in linear_acceleration" in capsys.readouterr().err
    assert main(["plot", str(path), "linear_acceleration.x", "-o", str(tmp_path / "x.png")]) == 2
    assert "no topic 'linear_acceleration.x'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_cli_plot_and_timeline_without_a_display_or_messages_say_so(tmp_path, capsys, monkeypatch):
    """Without -o and without a display (matplotlib's backend agg), plot and timeline drew nothing, wrote
    nothing and exited 0; a topic without messages gave blank axes, exit 0 (QA). Both now fail saying why."""
    import matplotlib.pyplot as plt

    path = data_file(IMU)
    monkeypatch.setattr(plt, "get_backend", lambda: "agg")
    for args in (["plot", str(path), "/imu/mag"], ["timeline", str(path)]):
        assert main(args) == 2
        assert capsys.readouterr().err.strip() == ("fastbag: error: no window to show the plot in (matplotlib's "
                                                   "backend is agg: no display?): write it to a file with -o "
                                                   "FILE.png (.svg, .pdf)")
    empty = tmp_path / "empty.bag"
    with fastbag.Writer(empty) as writer:
        writer.add_connection("/nothing", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        other = writer.add_connection("/some", "std_msgs/Int32", "int32 data\n", "da5909fbe378aeaf85e547e830cc1bb7")
        writer.write(other, 10**9, (7).to_bytes(4, "little"))
    assert main(["plot", str(empty), "/nothing", "-o", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.strip() == "fastbag: topic /nothing has no messages to plot"
    assert not (tmp_path / "x.png").exists()


def test_default_fields_leave_out_times_and_say_where_they_stop(tmp_path):
    """Named without fields, /odom's 13 numeric fields were cut to 12 without a word (angular.z, the yaw rate,
    left out) in a 10-colour cycle (two lines alike), and a ROS 2 /rosout's absolute ``stamp`` flattened its
    other lines to 0 (QA). Times are left out; a cut is said; more than 10 lines get 20 colours."""
    from fastbag.viz.fields import numeric_fields
    from fastbag.viz.plot import plot_fields

    path = data_file("ros1v2/zaki0929__bagfiles__2018__feb13__col.bag")
    with fastbag.open(path) as bag:
        odom = bag.read("/odom")
    every = numeric_fields(odom)
    assert len(every) == 13 and every[-1] == "twist.twist.angular.z" and not any("stamp" in f for f in every)
    with pytest.warns(fastbag.FastbagWarning, match=r"/odom: drawing the first 12 of its 13 numeric fields \(up "
                      r"to twist.twist.angular.y\); name the fields to draw others"):
        ax = plot_fields(odom)
    colors = [line.get_color() for line in ax.get_lines()]
    assert len(colors) == 12 == len(set(colors))
    with open_quietly(data_file("db3/ros2__rosbag2__rosbag2_py__resources__talker")) as bag:
        log = bag.read("/rosout")
    assert "stamp" in log.fields and numeric_fields(log) == ["level", "line"]


def test_plot_between_times(tmp_path, capsys):
    """plot takes --start/--end as export does (QA: a long recording could only be drawn whole); x starts at
    the start; a window holding none of a topic's messages says so."""
    path = data_file(IMU)
    with fastbag.open(path) as bag:
        times = bag.topic_times("/imu/mag")
        start, end = int(times[10]), int(times[40])
        want = bag.read("/imu/mag", start, end)
        figure = plot_topics(bag, [("/imu/mag", ["magnetic_field.x"])], start=start, end=end, use_pyplot=False)
    x, y = figure.axes[0].get_lines()[0].get_data()
    assert np.array_equal(y, want["magnetic_field"]["x"]) and len(y) == 30
    assert np.allclose(x, (want.time - start) / 1e9)
    seconds, until = (f"{t // 10**9}.{t % 10**9:09d}" for t in (start, end))
    out = tmp_path / "window.png"
    assert main(["plot", str(path), "/imu/mag", "--start", seconds, "--end", until, "-o", str(out)]) == 0
    assert out.stat().st_size > 1000
    assert main(["plot", str(path), "/imu/mag", "--start", "10", "--end", "20", "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == "fastbag: topic /imu/mag has no messages to plot in [start, end)"


def test_cli_plot_stamp_header_and_default_fields(tmp_path):
    path = data_file(IMU)
    out = tmp_path / "mag.png"
    assert main(["plot", str(path), "/imu/mag", "--stamp", "header", "-o", str(out)]) == 0
    rendered_png = imread(out)
    assert rendered_png[..., :3].std() > 0.05
    with fastbag.open(path) as bag:  # no fields named: the numeric ones, header excluded
        figure = plot_topics(bag, [("/imu/mag", []), ("/imu/data_raw", ["orientation.w"])], stamp="header")
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert labels == ["magnetic_field.x", "magnetic_field.y", "magnetic_field.z"]
    stamps = {}
    for topic in ("/imu/mag", "/imu/data_raw"):  # the origin is the earliest first header stamp
        _, msgs = rosbags_topic(path, topic)
        stamps[topic] = np.array([m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in msgs], np.int64)
    t0 = min(int(v[0]) for v in stamps.values())
    np.testing.assert_array_equal(figure.axes[0].get_lines()[0].get_xdata(), seconds(stamps["/imu/mag"], t0))
    np.testing.assert_array_equal(figure.axes[1].get_lines()[0].get_xdata(), seconds(stamps["/imu/data_raw"], t0))
    assert figure.axes[1].get_xlabel().startswith("header.stamp [s] since ")


def test_cli_timeline(tmp_path):
    import matplotlib.pyplot as plt

    out = tmp_path / "timeline.png"
    assert main(["timeline", str(data_file(TURTLES)), "-o", str(out)]) == 0
    assert imread(out)[..., :3].std() > 0.05
    assert not plt.get_fignums()  # saving to a file makes no pyplot figure
    with fastbag.open(data_file(TURTLES)) as bag:
        assert plot_timeline(bag, use_pyplot=False).figure.canvas.manager is None
        assert bag.plot_timeline().figure.canvas.manager is not None


def test_without_matplotlib_the_error_says_what_to_install(tmp_path, monkeypatch, capsys):
    path = data_file(IMU)
    with fastbag.open(path) as bag:
        arr = bag.read("/imu/mag")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'fastbag\[plot\]'"):
        arr.plot("magnetic_field.x")
    assert main(["timeline", str(path), "-o", str(tmp_path / "t.png")]) == 1
    assert "pip install 'fastbag[plot]'" in capsys.readouterr().err
    assert "<svg" in arr._repr_html_()  # notebook views need no matplotlib


def test_import_and_html_views_load_no_matplotlib():
    code = ("import sys, fastbag; b = fastbag.open(sys.argv[1]); b._repr_html_(); b.read('/imu/mag')._repr_html_(); "
            "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(data_file(IMU))], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "False"


# -- the timeline --------------------------------------------------------------------

def test_bag_times_equal_rosbags_receive_times():
    """Per topic and all at once; ROBOT's /tf is recorded on two connections (tf and tf2 types), merged."""
    for name in (TURTLES, TURTLES.replace("example.bag", "example-lz4.bag"), IMU, ROBOT):
        path = data_file(name)
        expected = rosbags_times(path)
        with fastbag.open(path) as bag:
            assert sorted(bag.topics) == sorted(expected)
            every = bag.times_by_topic()
            assert list(every) == list(bag.topics)
            for topic, times in expected.items():
                got = bag.times(topic)
                assert got.dtype == np.int64 and every[topic].dtype == np.int64
                np.testing.assert_array_equal(got, times)
                np.testing.assert_array_equal(every[topic], times)
            middle = bag.start_time + bag.duration // 2
            busiest = max(expected, key=lambda t: len(expected[t]))
            times = expected[busiest]
            np.testing.assert_array_equal(bag.times(busiest, start=middle), times[times >= middle])
            np.testing.assert_array_equal(bag.times(busiest, end=middle), times[times < middle])
            with pytest.raises(KeyError, match="no topic"):
                bag.times("/nope")


def _row_artists(ax, topic: str, kind: str) -> list:
    return [a for a in ax.get_children() if a.get_label() == f"{topic} {kind}"]


def test_timeline_of_a_real_bag_marks_every_message():
    path = data_file(TURTLES)
    expected = rosbags_times(path)
    with fastbag.open(path) as bag:
        ax = bag.plot_timeline()
        t0, span = bag.start_time, bag.duration / 1e9
    topics = sorted(expected)
    assert [t.get_text() for t in ax.get_yticklabels()] == topics
    assert ax.get_ylim() == (len(topics) - 0.5, -0.5)  # the first topic on top
    lo, hi = ax.get_xlim()
    assert lo < 0 and hi > span
    texts = [t.get_text() for t in ax.texts]
    for row, topic in enumerate(topics):
        times = expected[topic]
        assert any(text.endswith(f"{len(times)} msg{'s' if len(times) > 1 else ''}") or
                   f" {len(times)} msgs, " in text for text in texts), (topic, texts)
        if len(times) > MAX_MARKS:  # density-binned
            (patch,) = _row_artists(ax, topic, "density")
            assert isinstance(patch, StepPatch)
            values, edges, baseline = patch.get_data()
            counts, _ = np.histogram(seconds(times, t0), bins=edges)
            np.testing.assert_allclose(baseline - values, 0.7 * counts / counts.max())
            assert edges[0] == 0 and edges[-1] == pytest.approx(span)
        else:
            (marks,) = _row_artists(ax, topic, "messages")
            assert isinstance(marks, LineCollection)
            segments = marks.get_segments()
            np.testing.assert_array_equal([s[0][0] for s in segments], seconds(times, t0))
            assert {(s[0][1], s[1][1]) for s in segments} == {(row - 0.35, row + 0.35)}
    assert len(expected["/tf"]) > MAX_MARKS  # the density path is exercised
    rate = [t for t in texts if t.endswith("1344 msgs")][0]
    assert rate.startswith("62.5 Hz")
    # the title says what the numbers and marks are (QA: mean rates, unlike info's medians; bins for marks)
    assert ax.get_title().splitlines()[1] == (f"right: mean rate, messages, gaps (red: over 5 periods); topics of "
                                              f"more than {MAX_MARKS} messages: messages per time bin")
    rendered(ax.figure)


def test_dropouts_are_gaps_and_bursts_are_not(tmp_path):
    """A 100 Hz topic with a 1.5 s dropout, a topic publishing pairs of messages at once, a steady one."""
    imu, pose, steady = (conn_spec(t, "std_msgs/Int32") for t in ("/imu", "/burst", "/steady"))
    path = tmp_path / "gap.bag"
    t0 = 1_700_000_000 * 10**9
    imu_times = [t0 + k * 10**7 for k in range(300)]
    imu_times += [imu_times[-1] + 1_500_000_000 + k * 10**7 for k in range(300)]
    burst_times = sorted([t0 + k * 10**8 for k in range(60)] * 2)
    steady_times = [t0 + k * 5 * 10**7 for k in range(120)]
    with fastbag.Writer(path, chunk_size=4096) as writer:
        for spec, times in ((imu, imu_times), (pose, burst_times), (steady, steady_times)):
            connection = writer.add_connection(spec.topic, spec.msgtype, spec.msgdef, spec.md5sum)
            for k, t in enumerate(times):
                writer.write(connection, t, k.to_bytes(4, "little"))
    with fastbag.open(path) as bag:
        assert find_gaps(bag.times("/imu")).tolist() == [[imu_times[299], imu_times[300]]]
        assert find_gaps(bag.times("/burst")).size == 0 and find_gaps(bag.times("/steady")).size == 0
        ax = plot_timeline(bag)
        html = bag._repr_html_()
    (gaps,) = _row_artists(ax, "/imu", "gaps")
    (x0, y0), (x1, y1) = gaps.get_paths()[0].get_extents().get_points()
    assert (x0, x1) == (pytest.approx((imu_times[299] - t0) / 1e9), pytest.approx((imu_times[300] - t0) / 1e9))
    assert not _row_artists(ax, "/burst", "gaps") and not _row_artists(ax, "/steady", "gaps")
    assert any(t.get_text().endswith("600 msgs, 1 gap") for t in ax.texts)
    assert html.count('class="gap"') == 1
    rendered(ax.figure)


def test_gap_factor_must_be_positive(tmp_path, capsys):
    """At 0 or below every interval would be a gap: refused, by the library and the command."""
    times = np.array([*range(0, 101, 10), 400], np.int64) * 10**6  # period 36 ms, one 300 ms dropout
    assert find_gaps(times, 5).tolist() == [[100 * 10**6, 400 * 10**6]]
    with fastbag.open(data_file(IMU)) as bag:
        for factor in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="gap factor must be a positive number"):
                find_gaps(times, factor)
            with pytest.raises(ValueError, match="gap factor must be a positive number"):
                bag.plot_timeline(gap_factor=factor)
    out = tmp_path / "t.png"
    assert main(["timeline", str(data_file(IMU)), "--gap-factor", "0", "-o", str(out)]) == 2
    said = "fastbag: error: argument --gap-factor: must be a positive number, not 0.0"
    assert capsys.readouterr().err.splitlines() == [said]
    assert not out.exists()


def test_an_undecodable_topic_is_on_the_timeline():
    path = data_file(EMPTY_DEFINITION)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        with fastbag.open(path) as bag:
            (topic,) = bag.topics
            with pytest.raises(fastbag.DecodeError):
                bag.read(topic)
            times = np.array([m.time for m in bag.messages(raw=True)], dtype=np.int64)
            ax = bag.plot_timeline()
            html = bag._repr_html_()
            t0 = bag.start_time
    (marks,) = _row_artists(ax, topic, "messages")
    np.testing.assert_array_equal([s[0][0] for s in marks.get_segments()], seconds(times, t0))
    assert len(times) == 14
    assert f"<td>{topic}</td>" in html and "<td>14</td>" in html
    rendered(ax.figure)


def test_timeline_of_a_legacy_and_an_unindexed_bag():
    """Format 1.2 (times from the classic rosbag module) and a bag without index (times from a record walk)."""
    from legacy_fixtures import classic_raw

    legacy = data_file(LEGACY)
    expected: dict[str, list[int]] = {}
    for topic, t, _ in classic_raw(legacy):
        expected.setdefault(topic, []).append(t)
    unindexed = data_file(UNINDEXED)
    layout = scan_file(unindexed)
    walked: dict[str, list[int]] = {}
    for topic, t, _ in rows(layout, layout.messages):
        walked.setdefault(topic, []).append(t)
    for path, oracle in ((legacy, expected), (unindexed, walked)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastbag.FastbagWarning)
            with fastbag.open(path) as bag:
                ax = bag.plot_timeline()
                t0 = bag.start_time
        assert [t.get_text() for t in ax.get_yticklabels()] == sorted(oracle)
        for topic, times in oracle.items():
            (marks,) = _row_artists(ax, topic, "messages")
            np.testing.assert_array_equal([s[0][0] for s in marks.get_segments()], seconds(np.array(times), t0))
        rendered(ax.figure)


def test_timeline_of_a_v11_bag_without_definitions(tmp_path):
    """Format 1.1 stores no definitions: nothing decodes without ``definitions=``, the timeline draws anyway."""
    from legacy_fixtures import write_v11

    path = tmp_path / "v11.bag"
    written = [("/chatter", "992ce8a1687cec8c8bd883ec73ca41d1", "std_msgs/String", 10**9 + k * 10**8,
                b"\x02\x00\x00\x00hi") for k in range(20)]
    written += [("/count", "da5909fbe378aeaf85e547e830cc1bb7", "std_msgs/Int32", 10**9 + k * 3 * 10**8 + 7,
                 k.to_bytes(4, "little")) for k in range(5)]
    write_v11(path, written)
    with fastbag.open(path) as bag:
        assert bag.version == "1.1"
        with pytest.raises(fastbag.DecodeError, match="definitions="):
            bag.read("/chatter")
        ax = bag.plot_timeline()
        t0 = bag.start_time
    for topic in ("/chatter", "/count"):
        (marks,) = _row_artists(ax, topic, "messages")
        expected = np.array([t for name, _, _, t, _ in written if name == topic], dtype=np.int64)
        np.testing.assert_array_equal([s[0][0] for s in marks.get_segments()], seconds(expected, t0))
    rendered(ax.figure)


def test_timeline_of_an_empty_bag():
    with fastbag.open(data_file("ros1v2/cruise-automation__rosbag.js__fixtures__no-messages.bag")) as bag:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ax = bag.plot_timeline()
        assert "no messages" in [t.get_text() for t in ax.texts]
        assert "<td>0</td>" in bag._repr_html_()
    ax.figure.savefig(io.BytesIO(), format="png")


# -- notebook views -----------------------------------------------------------------------

def test_bag_html_shows_info_topics_and_timelines():
    path = data_file(ROBOT)
    expected = rosbags_times(path)
    with fastbag.open(path) as bag:
        html = bag._repr_html_()
        duration, start = bag.duration, bag.start_time
    assert f"({start // 10**9}.{start % 10**9:09d})" in html  # the exact start, from int ns
    assert html.count("<svg") == len(expected) == 4
    for topic, times in expected.items():
        assert f"<td>{topic}</td>" in html and f"<td>{len(times)}</td>" in html
    for text in ("tf2_msgs/TFMessage, tf/tfMessage", "sensor_msgs/LaserScan", f"{duration / 1e9:.3f} s",
                 "2018-02-13 11:23:41.576", "none [6/6 chunks]", "<td>6047</td>",
                 "sensor_msgs/LaserScan [90c7ef2dc6895d81024acba2ac42f369]"):
        assert text in html


def test_bag_html_lists_the_first_messages_and_survives_a_damaged_chunk(tmp_path):
    path = data_file(TURTLES)
    with AnyReader([path]) as reader:
        first = [(c.topic, t, bytes(raw)) for (c, t, raw), _ in zip(reader.messages(), range(5))]
    with fastbag.open(path) as bag:
        html = bag._repr_html_()
    listed = html[html.index("<p>first messages</p>"):]
    for k, (topic, t, raw) in enumerate(first):
        row = f"<tr><td>{k}</td><td>{topic}</td><td>"
        assert row in listed
        after = listed[listed.index(row) + len(row):]
        assert after.startswith(f"{_utc_text(t)}</td><td>{len(raw)}</td><td>{raw[:16].hex(' ')}")
    spec = conn_spec("/n", "std_msgs/Int32")
    damaged = tmp_path / "damaged.bag"
    with fastbag.Writer(damaged, compression="bz2") as writer:
        connection = writer.add_connection(spec.topic, spec.msgtype, spec.msgdef, spec.md5sum)
        for k in range(50):
            writer.write(connection, 10**9 + k * 10**7, k.to_bytes(4, "little"))
    blob = bytearray(damaged.read_bytes())
    at = blob.index(b"BZh")
    blob[at + 10:at + 30] = bytes(20)  # the chunk's bz2 stream is garbage; the index is intact
    damaged.write_bytes(bytes(blob))
    with fastbag.open(damaged) as bag:
        html = bag._repr_html_()
    assert "first messages: cannot be read:" in html and "<td>/n</td>" in html and "<td>50</td>" in html


def _utc_text(ns: int) -> str:
    from datetime import datetime, timezone

    moment = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{ns % 10**9 // 1000:06d} UTC ({ns // 10**9}.{ns % 10**9:09d})"


def test_topic_array_html_shows_first_rows_and_record_html_its_fields():
    path = data_file(IMU)
    times, msgs = rosbags_topic(path, "/imu/data_raw")
    with fastbag.open(path) as bag:
        arr = bag.read("/imu/data_raw")
        decoded = next(iter(bag.messages(topics="/imu/data_raw"))).msg
    html = arr._repr_html_()
    assert f"<td>{len(times)}</td>" in html and f"... {len(times) - 5} more rows" in html
    assert "<th>linear_acceleration.x</th>" in html and html.count("<svg") == 1
    for m in msgs[:5]:
        assert f"<td>{m.linear_acceleration.x!r}</td>" in html
    for record in (arr[0], decoded):
        view = record._repr_html_()
        assert "<b>sensor_msgs/Imu</b>" in view
        assert f"<td>linear_acceleration.x</td><td>{msgs[0].linear_acceleration.x!r}</td>" in view
        assert f"<td>header.frame_id</td><td>{msgs[0].header.frame_id}</td>" in view
        assert "<td>orientation_covariance</td><td>float64[9]: " in view


def _string_bag(path: Path, topic: str, text: bytes) -> Path:
    """A bag of one std_msgs/String message holding ``text`` on ``topic``."""
    spec = conn_spec("/x", "std_msgs/String")
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection(topic, spec.msgtype, spec.msgdef, spec.md5sum)
        writer.write(connection, 10**9, len(text).to_bytes(4, "little") + text)
    return path


def test_html_escapes_what_comes_from_the_file(tmp_path):
    evil = '/a<script>alert("x")</script>&b'
    with fastbag.open(_string_bag(tmp_path / "hostile.bag", evil, b"<img src=x onerror=alert(1)>")) as bag:
        views = [bag._repr_html_(), bag.read(evil)._repr_html_(), bag.read(evil)[0]._repr_html_()]
    for view in views:
        assert "<script>" not in view and "<img" not in view
    assert "/a&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;b" in views[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in views[2]


# -- every format ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("relative", [
    "mcap/geocamxyz__rosbags-rs__tests__test_bags__test_bag_mcap/test_bag_mcap.mcap",
    "db3/geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3",
], ids=["mcap", "rosbag2-sqlite3"])
def test_timeline_plot_and_views_on_mcap_and_rosbag2(relative):
    """The timeline marks every message at its time (against the mcap package / the database), a CDR field
    plots the values the message layer decodes, and the HTML views render, on MCAP and rosbag2 recordings."""
    path = data_file(relative)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastbag.FastbagWarning)
        bag = fastbag.open(path)
    with bag:
        times = bag.times_by_topic()
        assert sum(t.size for t in times.values()) == bag.message_count > 0
        raw = {}
        for m in bag.messages(raw=True):
            raw.setdefault(m.topic, []).append(m.time)
        assert {k: list(v) for k, v in times.items()} == {k: v for k, v in raw.items()}
        ax = bag.plot_timeline()
        assert [t.get_text() for t in ax.get_yticklabels()] == sorted(times)
        rendered(ax.figure)
        topic = "/test/geometry_msgs/accel_stamped"
        arr = bag.read(topic)
        line_ax = arr.plot("accel.linear.x")
        (line,) = line_ax.get_lines()
        np.testing.assert_array_equal(line.get_ydata(), [m.msg.accel.linear.x for m in bag.messages(topics=topic)])
        rendered(line_ax.figure)
        assert "<table" in bag._repr_html_() and topic in bag._repr_html_()
        assert "accel.linear.x" in arr._repr_html_() or "accel" in arr._repr_html_()
        assert "geometry_msgs/AccelStamped" in next(iter(bag.messages(topics=topic))).msg._repr_html_()


# -- what a hostile or odd file holds (QA, 2026-11-25) ------------------------------------------------------

def _float64_bag(path: Path, topic: str, values: list[float]) -> Path:
    spec = conn_spec(topic, "std_msgs/Float64")
    with fastbag.Writer(path) as writer:
        connection = writer.add_connection(topic, spec.msgtype, spec.msgdef, spec.md5sum)
        for k, value in enumerate(values):
            writer.write(connection, 1_700_000_000 * 10**9 + k * 10**8, np.float64(value).tobytes())
    return path


def test_values_no_axis_can_span_are_left_outside_it_with_a_warning(tmp_path, capsys):
    """+-1.8e308 (the largest floats, a common "no reading") beside ordinary values: matplotlib could place no
    ticks on such a span and failed when the figure was drawn (fastbag plot: a traceback). The axis now spans
    the other values and a warning counts those left out; NaN and inf stay as matplotlib draws them."""
    big = float(np.finfo(np.float64).max)
    path = _float64_bag(tmp_path / "sentinels.bag", "/range", [1.0, 2.0, big, -big, 3.0, np.inf, np.nan])
    with fastbag.open(path) as bag:
        arr = bag.read("/range")
    with pytest.warns(fastbag.FastbagWarning, match=r"/range: 2 values beyond \+-4.5e307 .* left outside the y "
                                                    r"axis"):
        ax = arr.plot("data")
    rendered(ax.figure)
    low, high = ax.get_ylim()
    assert low < 1.0 and 3.0 < high < 4.0
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_ydata(), [1.0, 2.0, big, -big, 3.0, np.inf, np.nan])  # drawn as they are
    assert main(["plot", str(path), "/range", "data", "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 0 and "left outside the y axis" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an axis that fits says nothing
        with fastbag.open(_float64_bag(tmp_path / "plain.bag", "/r", [1.0, -1e300])) as bag:
            rendered(bag.read("/r").plot("data").figure)


def test_names_that_are_no_plain_text_draw_and_show(tmp_path, capsys):
    """A file name that is not UTF-8 (its byte kept as a surrogate, as Python decodes names) made the timeline
    fail in matplotlib's font code and the HTML view unencodable; '$...$' in a file or topic name was parsed
    as math (a traceback, or the name garbled). Both now draw as written (the byte as \\xe9)."""
    folder = os.fsencode(tmp_path)
    latin = os.fsdecode(folder + b"/r\xe9sultat_$5_and_$10.bag")
    _float64_bag(Path(latin), "/cost_$5_and_$10", [1.0, 2.0])
    assert main(["timeline", latin, "-o", str(tmp_path / "t.png")]) == 0
    assert main(["plot", latin, "/cost_$5_and_$10", "-o", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().err == ""
    with fastbag.open(latin) as bag:
        ax = bag.plot_timeline()
        rendered(ax.figure)
        assert ax.get_title().startswith("r\\xe9sultat_$5_and_$10.bag: 2 messages")
        assert [t.get_text() for t in ax.get_yticklabels()] == ["/cost_$5_and_$10"]
        plotted = bag.read("/cost_$5_and_$10").plot("data")
        assert plotted.get_title() == "/cost_$5_and_$10 (std_msgs/Float64)"
        rendered(plotted.figure)
        view = bag._repr_html_()
    view.encode("utf-8")  # (a lone surrogate raised here)
    assert "r\\xe9sultat_$5_and_$10.bag" in view


def test_info_and_html_write_control_characters_out(tmp_path, capsys):
    """A newline in a topic name forged a row of fastbag info ('problems: none...'), ESC and BEL reached the
    terminal, and NUL/ESC in strings made the HTML views invalid. They are written as escapes now: the topic
    stays on its row, and the views hold no control character."""
    topic = "/ok\nproblems:    none\x1b[2J\x1b]0;pwned\x07"
    path = _string_bag(tmp_path / "control.bag", topic, b"a\x00b\x1b[31mc\x07\td")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x00")
    (line,) = [line for line in out.splitlines() if line.startswith("topics:")]
    assert "/ok\\nproblems:    none\\x1b[2J\\x1b]0;pwned\\x07   1 msg" in line
    assert not [line for line in out.splitlines() if line.startswith("problems")]
    with fastbag.open(path) as bag:
        arr = bag.read(topic)
        views = [bag._repr_html_(), arr._repr_html_(), arr[0]._repr_html_()]
    for view in views:
        assert not [c for c in view if ord(c) < 32 or 0x7F <= ord(c) <= 0x9F]
    assert "a\\x00b\\x1b[31mc\\x07\\td" in views[2]


def test_html_views_stay_small_for_large_bags_and_messages(tmp_path):
    """The Bag view listed every type (3,000: topics were cut at 200), a message view converted arrays of
    structs whole (seconds for 1000 x 1000 elements, 10 shown) and a TopicArray had a column per leaf
    field. Each is cut now, saying how much more there is."""
    import time

    from fastbag.msg.msgdef import parse_definition
    from fastbag.viz.html import MAX_COLUMNS, MAX_ELEMENTS, MAX_TOPICS

    path = tmp_path / "large.bag"
    nested = ("Inner[] inner\n" + "=" * 80 + "\nMSG: wide/Inner\nLeaf[] leaves\n" + "=" * 80 +
              "\nMSG: wide/Leaf\nfloat64 a\nfloat64 b\n")
    wide = "".join(f"int8 f{k}\n" for k in range(300))
    with fastbag.Writer(path) as writer:
        for k in range(MAX_TOPICS + 50):
            text = "int32 x\n"
            c = writer.add_connection(f"/many/{k}", f"many/T{k}", text, parse_definition(f"many/T{k}", text).md5sum())
            writer.write(c, 10**9 + k, k.to_bytes(4, "little"))
        c = writer.add_connection("/nested", "wide/Nested", nested, parse_definition("wide/Nested", nested).md5sum())
        inner = (1000).to_bytes(4, "little") + np.arange(2000, dtype=np.float64).tobytes()
        writer.write(c, 2 * 10**9, (1000).to_bytes(4, "little") + inner * 1000)
        c = writer.add_connection("/wide", "wide/Wide", wide, parse_definition("wide/Wide", wide).md5sum())
        writer.write(c, 2 * 10**9, bytes(300))
    with fastbag.open(path) as bag:
        view = bag._repr_html_()
        assert view.count("many/T") == 2 * MAX_TOPICS and "... and 52 more types" in view  # (types, topics' types)
        arr = bag.read("/nested")
        started = time.perf_counter()
        message_view, topic_view = arr[0]._repr_html_(), arr._repr_html_()
        assert time.perf_counter() - started < 1.0  # (4 s before)
        assert message_view.count("<td>inner[") == MAX_ELEMENTS * (2 * MAX_ELEMENTS + 1) + 1  # (a, b of 10 leaves)
        assert "<td>inner[0].leaves[9].b</td><td>19.0</td>" in message_view
        assert "<td>inner[...]</td><td>990 more elements</td>" in message_view
        wide_view = bag.read("/wide")._repr_html_()
    assert wide_view.count("<th>f") == MAX_COLUMNS and f"... {300 - MAX_COLUMNS} more fields" in wide_view
    assert "<th>inner[0].leaves[0].a</th>" in topic_view


def test_topic_array_html_of_rows_out_of_time_order():
    """take() positions in any order, or arr[::-1]: the view said a negative duration and rate, and the
    last row's time as the start. It shows the rows' span whatever their order."""
    path = data_file(IMU)
    with fastbag.open(path) as bag:
        arr = bag.read("/imu/data_raw")
        picked = bag.take("/imu/data_raw", [5, 1, 3])
    times = arr.time
    for subset, first, last, count in ((arr[::-1], times[0], times[-1], len(times)),
                                       (picked, times[1], times[5], 3)):
        view = subset._repr_html_()
        assert f"<td>start</td><td>{_utc_text(int(first))}</td>" in view
        assert f"<td>duration</td><td>{(int(last) - int(first)) / 1e9:.3f} s</td>" in view
        assert f"{(count - 1) / ((int(last) - int(first)) / 1e9):.2f} Hz" in view


def test_bag_html_shows_what_info_shows_for_every_format():
    """The Bag view said '[*]' for every type of MCAP and rosbag2 and 'chunks' for rosbag2's files, and left
    out the compression ratio: it now shows info's type labels and compression rows."""
    from fastbag.viz.info import format_info

    for relative in ("mcap/geocamxyz__rosbags-rs__tests__test_bags__test_bag_mcap/test_bag_mcap.mcap",
                     "db3/geocamxyz__rosbags-rs__tests__test_bags__test_bag_sqlite3", IMU):
        bag = open_quietly(data_file(relative))
        with bag:
            view, info = bag._repr_html_(), format_info(bag)
        compression = next(line for line in info.splitlines() if line.startswith("compression:"))
        assert f"<td>compression</td><td>{compression.split(':', 1)[1].strip()}</td>" in view
        assert "[*]" not in view
        types = [line.split(":", 1)[-1].strip() for line in info.splitlines()
                 if "[" in line and not line.startswith(("compression", "topics"))]
        assert types and all(" ".join(t.split()) in view for t in types)
    assert "[cdr, ros2msg]" in view or "bz2 [" in view


def test_compressions_of_equal_counts_in_rosbags_order(tmp_path, capsys):
    """rosbag info lists compressions by count, then name, both descending ('none [2/4 chunks], bz2 [...]');
    fastbag listed a tie by name ascending."""
    rosbag = pytest.importorskip("rosbag", reason="the classic rosbag module writes the bag of mixed chunks")
    import genpy

    class Int32:
        _type, _md5sum, _full_text = "std_msgs/Int32", "da5909fbe378aeaf85e547e830cc1bb7", "int32 data\n"

    path = tmp_path / "mixed.bag"
    bag = rosbag.Bag(str(path), "w", chunk_threshold=1)
    for k, compression in enumerate(["bz2", "none", "bz2", "none"]):
        bag.compression = compression
        bag.write("/a", ("std_msgs/Int32", k.to_bytes(4, "little"), Int32._md5sum, Int32), t=genpy.Time(10 + k),
                  raw=True)
    bag.close()
    expected = next(line for line in str(rosbag.Bag(str(path))).splitlines() if line.startswith("compression"))
    assert main(["info", str(path)]) == 0
    got = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("compression"))
    assert got.split() == expected.split() and got.split()[1] == "none"


def test_empty_topic_array_plot_says_there_is_nothing(tmp_path):
    """TopicArray.plot of no messages drew a blank panel 'since 1970-01-01'; fastbag plot refused the same
    window. Both say so now."""
    path = _float64_bag(tmp_path / "one.bag", "/r", [1.0])
    with fastbag.open(path) as bag:
        empty = bag.read("/r", start=2 * 1_700_000_000 * 10**9)
    with pytest.raises(ValueError, match="^/r has no messages to plot$"):
        empty.plot("data")


def test_plot_and_timeline_say_a_file_cannot_be_read_as_info_does(tmp_path, capsys):
    missing = str(tmp_path / "absent.bag")
    for command in (["info", missing], ["timeline", missing, "-o", str(tmp_path / "t.png")],
                    ["plot", missing, "/x", "-o", str(tmp_path / "p.png")]):
        assert main(command) == 1
        assert capsys.readouterr().err == f"fastbag: {missing}: No such file or directory\n"
