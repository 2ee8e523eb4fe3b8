"""Tooling the command line needs: synthetic bags (``fastbag demo``), the speed suite and its
comparison with rosbags (``fastbag bench``). Not imported by the reading path."""
