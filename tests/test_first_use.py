"""What a user new to fastbag tries in the first hour, beyond the README: a Bag used as rosbag's (``in``,
iteration, indexing), typos answered with the closest names, fields by their dotted paths, messages that
refuse assignment with a reason, stamps as datetimes, options of a wrong type refused by name."""

from __future__ import annotations

import contextlib
import datetime

import numpy as np
import pytest

import fastbag
from conftest import classic_rosbag, data_file
from fastbag.cli import main
from fastbag.msg.messages import Duration, Time

ROS1 = "ros1v2/MichaelGrupp__evo__test__data__ROS_example.bag"  # PoseStamped topics ORB-SLAM, S-PTAM, groundtruth
ROS2 = "mcap/Tiryoh__rosbag-analyzer-web__e2e__fixtures__test_sample.mcap"  # /diagnostics_agg: stamped


def test_a_bag_answers_in_and_iterates_as_rosbag():
    path = data_file(ROS1)
    with fastbag.open(path) as bag:
        assert "groundtruth" in bag and "/groundtruth" not in bag and 3 not in bag
        ours = [(topic, t.to_nsec(), msg.pose.position.x) for topic, msg, t in bag]
        with pytest.raises(TypeError, match=r"not indexed: bag.read\('groundtruth'\)"):
            bag["groundtruth"]
    with genpy_bag(path) as theirs:
        assert ours == [(topic, t.to_nsec(), msg.pose.position.x) for topic, msg, t in theirs]
    assert len(ours) == 26566


@contextlib.contextmanager
def genpy_bag(path):
    """The classic rosbag module's Bag of ``path`` (the oracle), closed after, and its class cache put back:
    the module keeps one message class per md5sum, and a later test of a 2010 bag whose roslib/Log has the
    md5sum of rosgraph_msgs/Log would be handed this one's class."""
    try:
        rosbag = classic_rosbag()
    except ImportError:
        pytest.skip("the classic rosbag module (the oracle) is not installed")
    import rosbag.bag

    cached = dict(rosbag.bag._message_types)
    bag = rosbag.Bag(str(path))
    try:
        yield bag
    finally:
        bag.close()
        rosbag.bag._message_types.clear()
        rosbag.bag._message_types.update(cached)


def test_typos_are_answered_with_the_closest_names():
    with fastbag.open(data_file(ROS1)) as bag:
        for attempt in (lambda: bag.topics["groundtrut"], lambda: bag.read("groundtrut"),
                        lambda: list(bag.messages(topics=["groundtrut"]))):
            with pytest.raises(fastbag.NotFoundError, match=r"no topic 'groundtrut' in .* \(did you mean 'groundtruth'"
                                                            r"\?\); topics: ORB-SLAM, S-PTAM, groundtruth"):
                attempt()
        with pytest.raises(KeyError):  # (a NotFoundError is a KeyError: `except KeyError` code keeps working)
            bag.topics["nothing like it"]
        arr = bag.read("groundtruth")
        with pytest.raises(fastbag.NotFoundError, match=r"has no field 'heder' \(did you mean 'header'\?\)"):
            arr["heder"]


def test_fields_by_their_dotted_paths():
    """to_pandas, plot and the CLI name nested fields by path; arr[path] takes the same names."""
    with fastbag.open(data_file(ROS1)) as bag:
        arr = bag.read("groundtruth")
        frame = arr.to_pandas()
        for path in ("pose.position.x", "header.stamp.secs", "header.frame_id", "pose.orientation.w"):
            assert np.array_equal(np.asarray(arr[path]), frame[path].to_numpy()), path
        assert np.array_equal(arr["pose.position"]["y"], arr["pose"]["position"]["y"])
        with pytest.raises(fastbag.NotFoundError, match=r"field 'pose' has no field 'positio' \(did you mean "
                                                        r"'position'\?\); fields: position, orientation"):
            arr["pose.positio.x"]
        with pytest.raises(fastbag.NotFoundError, match=r"field 'pose.position.x' has no field 'y' \(it has no "):
            arr["pose.position.x.y"]
        with pytest.raises(TypeError, match=r"fields are taken one at a time"):
            arr[["header", "pose"]]
        for key in (True, None):  # NumPy would add an axis; True was taken for message 1
            with pytest.raises(IndexError, match="selected by an integer"):
                arr[key]


def test_messages_refuse_assignment_with_a_reason():
    with fastbag.open(data_file(ROS1)) as bag:
        message = bag.read("groundtruth")[0]
    with pytest.raises(AttributeError, match=r"std_msgs/Header.frame_id cannot be set: decoded messages are "
                                             r"read-only.*to_dict\(\)"):
        message.header.frame_id = "base"
    changed = message.to_dict()
    changed["header"]["frame_id"] = "base"  # the way to a changed copy
    assert message.header.frame_id != "base"


def test_stamps_as_datetimes():
    t = Time(1_700_000_000, 123_456_789)
    assert t.to_datetime() == datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=datetime.timezone.utc)
    assert t.to_datetime64() == np.datetime64(1_700_000_000_123_456_789, "ns")
    assert not hasattr(Duration(1, 0), "to_datetime")  # a length of time is no point in it
    with pytest.raises(AttributeError, match="a Duration is a length of time"):
        Duration(1, 0).to_datetime64()
    with fastbag.open(data_file(ROS1)) as bag:
        stamp = bag.read("groundtruth")[0].header.stamp
        assert stamp.to_datetime64() == np.datetime64(stamp.to_nsec(), "ns")
    with fastbag.open(data_file(ROS2)) as bag:  # a ROS 2 stamp (sec, nanosec) too
        stamp = bag.read("/diagnostics_agg")[0].header.stamp
        assert type(stamp).__name__ == "builtin_interfaces__Time"
        assert stamp.to_datetime64() == np.datetime64(fastbag.to_ns(stamp), "ns")
        assert stamp.to_datetime() == Time(stamp.sec, stamp.nanosec).to_datetime()


@pytest.mark.parametrize("options, error, said", [
    ({"workers": "2"}, TypeError, "workers is a number of threads"),
    ({"workers": 0}, ValueError, "workers is a number of threads"),
    ({"workers": 10**6}, ValueError, r"workers is a number of threads \(an int, 1 to 256"),
    ({"cache_bytes": "256MB"}, TypeError, "cache_bytes is a number of bytes"),
    ({"cache_bytes": -5}, ValueError, "cache_bytes is a number of bytes"),
    ({"checksums": "no"}, TypeError, "checksums is True or False, not 'no'"),
])
def test_open_refuses_options_of_a_wrong_type_by_name(options, error, said):
    with pytest.raises(error, match=said):
        fastbag.open(data_file(ROS1), **options)


def test_a_closed_bag_refuses_with_and_a_demo_bag_can_be_kept(tmp_path, capsys):
    bag = fastbag.open(data_file(ROS1))
    bag.close()
    with pytest.raises(ValueError, match="is closed"):
        with bag:
            pass
    assert main(["demo", "--seconds", "0.2", "-o", str(tmp_path / "sample.bag")]) == 0
    assert "wrote " in capsys.readouterr().out
    with fastbag.open(tmp_path / "sample.bag") as kept:
        assert "/imu" in kept and repr(kept.read("/imu")[:1]).count("1 message;") == 1


def test_plot_takes_a_list_of_fields(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    with fastbag.open(data_file(ROS1)) as bag:
        arr = bag.read("groundtruth")
        ax = arr.plot(["pose.position.x", "pose.position.y"])
        assert [line.get_label() for line in ax.get_lines()][-2:] == ["pose.position.x", "pose.position.y"]
        with pytest.raises(TypeError, match="fields are paths"):
            arr.plot(1)


@pytest.mark.parametrize("name", ["cruise-automation__rosbag.js__fixtures__example.bag", ROS1.split("/")[1],
                                  "CCNYRoboticsLab__imu_tools__imu_filter_madgwick__sample__ardrone_imu.bag",
                                  "eric-wieser__ros_numpy__test__test.bag"])
def test_print_of_a_message_is_genpys(name):
    """print(m.msg) was one line of 600 characters, arrays of more than 8 values shown by their shape (every
    covariance): it is genpy's YAML now, message for message (arrays of more than STR_VALUES numbers are cut
    short, where genpy prints an image's every byte), and repr stays one line, every digit kept."""
    from fastbag.msg.messages import STR_VALUES

    path = data_file(f"ros1v2/{name}")
    theirs = {}
    with genpy_bag(path) as bag:
        for topic, msg, _ in bag.read_messages():
            theirs.setdefault(topic, (msg, str(msg)))
    compared = 0
    with fastbag.open(path) as bag:
        for topic in bag.topics:
            mine = next(bag.messages(topics=[topic])).msg
            assert "\n" not in repr(mine)
            if any(len(v) > STR_VALUES for v in _arrays(theirs[topic][0])):
                assert "values, " in str(mine)  # (cut short)
                continue
            assert str(mine) == theirs[topic][1], topic
            compared += 1
    assert compared


def _arrays(msg):
    """Every list or bytes value in a genpy message (at any depth)."""
    for name in getattr(msg, "__slots__", ()):
        value = getattr(msg, name)
        if isinstance(value, (list, tuple, bytes)):
            yield value
            for item in value if isinstance(value, (list, tuple)) else ():
                yield from _arrays(item)
        else:
            yield from _arrays(value)


def test_plot_names_the_topic_and_closest_field(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = data_file("ros1v2/cruise-automation__rosbag.js__fixtures__example.bag")
    assert main(["plot", str(path), "/turtle1/pose", "thta", "-o", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err.strip() == ("fastbag: no field 'thta' in turtlesim/Pose of /turtle1/pose (did you "
                                               "mean 'theta'?); fields: x, y, theta, linear_velocity, angular_velocity")
