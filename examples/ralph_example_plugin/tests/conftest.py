"""The example plugin's tests drive pytest in subprocesses with pytester."""

pytest_plugins = ["pytester"]
