"""Suite-wide pytest set-up; the harness itself is tests/harness/plugin.py (loaded by addopts)."""

pytest_plugins = ("pytester",)
