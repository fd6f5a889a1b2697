"""The LoadBalancer flags reach the components: the pool the controllers allocate from (a bad one ends the
command naming it), the speaker on or off, strict ARP with the speaker in ipvs mode."""

from __future__ import annotations

import argparse

import pytest

from nodeagent.commands import agent, server
from nodeagent.commands.up import NODE_COMPONENTS


def parse(mod, *argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    mod.add_arguments(p)
    return p.parse_args(list(argv))


def test_server_pool_reaches_the_controllers_and_a_bad_one_is_refused(tmp_path) -> None:
    cfg = server.config_from_args(parse(server, "--data-dir", str(tmp_path), "--service-lb-pool",
                                        "10.0.0.240/28,10.0.1.1-10.0.1.3"))
    assert cfg.controllers is not None
    assert cfg.controllers.options.service_lb_pool == "10.0.0.240/28,10.0.1.1-10.0.1.3"
    with pytest.raises(SystemExit, match="--service-lb-pool '10.0.0.0/33'"):
        server.config_from_args(parse(server, "--data-dir", str(tmp_path), "--service-lb-pool",
                                      "10.0.0.0/33"))


def test_agent_speaker_on_by_default_off_with_none_and_strict_arp_in_ipvs(tmp_path) -> None:
    base = ("--server", "https://10.0.0.1:6443", "--token", "abcdef.0123456789abcdef", "--data-dir",
            str(tmp_path), "--node-name", "n1", "--node-ip", "10.0.0.5")
    cfg = agent.config_from_args(parse(agent, *base))
    assert cfg.lbspeaker is not None and cfg.lbspeaker.node_ip == "10.0.0.5" and cfg.lbspeaker.metrics_port
    assert "lbspeaker" in [c.name for c in cfg.components(NODE_COMPONENTS)]
    off = agent.config_from_args(parse(agent, *base, "--lb-announce", "none"))
    assert off.lbspeaker is None and "lbspeaker" not in off.by_component()
    ipvs = agent.config_from_args(parse(agent, *base, "--proxy-mode", "ipvs"))
    assert ipvs.netproxy is not None and ipvs.netproxy.ipvs_strict_arp
