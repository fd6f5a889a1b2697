"""Many ADDs/DELs at once, and plugins killed mid-ADD: no duplicate address, nothing left behind."""

from __future__ import annotations

import json
import random
import signal
import time

import pytest

from tests.integration.cni.conftest import netns_path

pytestmark = [pytest.mark.root, pytest.mark.slow]
N = 50


def test_parallel_add_then_parallel_del(any_runtime, net, res):
    rt = any_runtime
    nss = [netns_path(res.netns()) for _ in range(N)]
    procs = [rt.popen("nodeagent-bridge", "ADD", net.conf(), cid=f"par{i}", netns=ns)
             for i, ns in enumerate(nss)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, (out, err)
        results.append(json.loads(out))
    ips = [r["ips"][0]["address"] for r in results]
    assert len(set(ips)) == N                     # no duplicate address
    assert len(net.allocations()) == N            # no lost allocation
    assert len(net.veths()) == N
    assert len(net.rules()) == 3            # one masquerade chain for the whole network
    procs = [rt.popen("nodeagent-bridge", "DEL", dict(net.conf(), prevResult=r), cid=f"par{i}", netns=nss[i])
             for i, r in enumerate(results)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, (out, err)
    net.assert_clean()


def _kill_when(p, predicate, extra_delay: float, limit: float = 30.0) -> bool:
    """SIGKILL `p` `extra_delay` s after `predicate()` first holds; False if p finished first."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and p.poll() is None:
        if predicate():
            time.sleep(extra_delay)
            p.send_signal(signal.SIGKILL)
            return True
        time.sleep(0.0005)
    p.send_signal(signal.SIGKILL)
    return False


def test_sigkill_during_add_then_del_or_gc_cleans_up(runtime, net, res):
    """The in-process plugin (the one doing the work) SIGKILLed at chosen and random points of ADD.

    Stages: anywhere (random delay), the instant its veth appears, a few ms later (IPAM/netns
    set-up under way), the instant its address is reserved. Odd trials clean with DEL, even with GC.
    """
    rng = random.Random(4)
    ns0 = netns_path(res.netns())
    t0 = time.monotonic()
    runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="probe", netns=ns0)
    full = time.monotonic() - t0
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="probe", netns=ns0)
    stages = [
        lambda: (lambda: True, rng.uniform(0, full)),
        lambda: (lambda: bool(net.veths()), 0.0),
        lambda: (lambda: bool(net.veths()), rng.uniform(0.001, 0.006)),
        lambda: (lambda: bool(net.allocations()), rng.uniform(0, 0.002)),
    ]
    left_state = 0
    for trial in range(8):
        ns = netns_path(res.netns())
        cid = f"crash{trial}"
        p = runtime.popen("nodeagent-bridge", "ADD", net.conf(version="1.1.0"), cid=cid, netns=ns)
        predicate, delay = stages[trial % len(stages)]()
        _kill_when(p, predicate, delay)
        p.communicate(timeout=60)
        if net.veths() or net.allocations():
            left_state += 1
        if trial % 2:
            runtime.call("nodeagent-bridge", "DEL", net.conf(), cid=cid, netns=ns)
        else:
            runtime.call("nodeagent-bridge", "GC", dict(net.conf(version="1.1.0"),
                                                        **{"cni.dev/valid-attachments": []}))
        net.assert_clean()
        # the network still works and never hands out an address twice
        r = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid=f"ok{trial}", netns=ns)
        assert len(net.allocations()) == 1 and r["ips"]
        runtime.call("nodeagent-bridge", "DEL", net.conf(), cid=f"ok{trial}", netns=ns)
    net.assert_clean()
    assert left_state >= 2  # the kills really interrupted ADDs that had made state
