"""kernel.netns.NetnsWorker's thread discipline, in the process's own namespace (no root needed)."""

from __future__ import annotations

import threading

import pytest

from kernel.netns import NetnsWorker, netns_path


def test_calls_run_in_order_on_one_thread_that_is_not_the_callers():
    w = NetnsWorker(None)
    try:
        seen = [w.submit(lambda i=i: (i, threading.get_ident())) for i in range(20)]
        results = [f.result(5) for f in seen]
        assert [i for i, _ in results] == list(range(20))
        assert len({t for _, t in results}) == 1 and results[0][1] != threading.get_ident()
        assert w.call(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            w.call(lambda: 1 / 0)
        assert w.call(lambda: "still serving") == "still serving"
    finally:
        w.close()
    with pytest.raises(RuntimeError):
        w.submit(lambda: None)


def test_a_namespace_that_cannot_be_entered_fails_every_call_with_the_reason():
    w = NetnsWorker("/nonexistent/netns")
    try:
        with pytest.raises(FileNotFoundError):
            w.call(lambda: "never")
        with pytest.raises(FileNotFoundError):  # later calls too, at once
            w.submit(lambda: "never").result(5)
    finally:
        w.close()


def test_netns_names_become_paths():
    assert netns_path(None) is None and netns_path("") is None
    assert netns_path("node1") == "/run/netns/node1" and netns_path("/proc/1/ns/net") == "/proc/1/ns/net"
