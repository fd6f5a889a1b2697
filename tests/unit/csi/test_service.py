"""The csi component on paths a unix socket cannot have: the node runs on without the driver, saying why."""

from __future__ import annotations

import asyncio
import logging

import pytest

from csi.config import CSIConfig
from csi.service import MAX_SOCKET_PATH, serve
from nodeagent.layout import Layout


def test_a_socket_path_too_long_leaves_the_driver_out_with_the_reason(tmp_path, caplog):
    deep = "/" + "d" * 120 + "/csi.sock"
    cfg = CSIConfig(node_id="n1", state_dir=str(tmp_path / "st"), socket=deep)

    async def main() -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(serve(cfg, ready))
        await asyncio.wait_for(ready.wait(), 5)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.ERROR, logger="nodeagent.csi"):
        asyncio.run(main())
    assert "longer than a unix socket's 107 bytes; use a shorter --data-dir" in caplog.text
    assert not (tmp_path / "st").exists()


def test_a_lab_nodes_sockets_fit():
    lay = Layout.for_data_dir("/tmp/pytest-of-root/pytest-12345/test_a_long_test_name_of_a_lab0/lab/"
                              "na1b2c3d-n2")
    for p in (lay.csi_socket, lay.csi_registration_socket):
        assert len(p.encode()) <= MAX_SOCKET_PATH, p
    assert lay.csi_registration_socket.startswith(lay.plugin_registry_dir + "/")
