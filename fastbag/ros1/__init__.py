"""The ROS1 container: records, index, recovery scan, formats 1.2 and 1.1, the writer."""
