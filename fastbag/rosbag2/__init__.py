"""The rosbag2 container: recording directories with metadata.yaml and sqlite3 storage."""
