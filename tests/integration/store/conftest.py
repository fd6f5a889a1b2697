"""A private etcd for the store's integration tests: Debian's etcd on free ports, removed afterwards."""

import os

import pytest

from nodeagent.testing.etcd import EtcdServer, available


@pytest.fixture(scope="session")
def etcd_server():
    reason = available()
    if reason:
        pytest.skip(reason)
    server = EtcdServer(name="store-tests").start()
    try:
        yield server
    finally:
        server.stop()
        assert server.proc is not None and server.proc.poll() is not None, "etcd still running"
        assert not os.path.exists(server.dir), "etcd data dir left behind"
