"""The `cni` component's resident plugin daemon: one per instance, on its own socket, gone when stopped."""

from __future__ import annotations

import json
import os

import pytest

from cni import client
from nodeagent.nodenet.network import PluginDaemon

pytestmark = pytest.mark.root


def test_plugin_daemon_serves_its_instance_socket_and_leaves_nothing(tmp_path):
    path = str(tmp_path / "cni-plugin.sock")
    d = PluginDaemon(path)
    assert d.start()
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        answer = client.via_daemon(path, "portmap", {"CNI_COMMAND": "VERSION"},
                                   json.dumps({"cniVersion": "1.0.0"}).encode())
        assert answer is not None, "the daemon answers"
        code, out = answer
        assert code == 0 and "1.0.0" in json.loads(out)["supportedVersions"]
        second = PluginDaemon(path)  # another instance configured with the same socket does not steal it
        assert not second.start()
    finally:
        d.stop()
    assert not os.path.exists(path)
    assert d.thread is not None and not d.thread.is_alive()
    assert client.via_daemon(path, "bridge", {"CNI_COMMAND": "VERSION"}, b"{}") is None
