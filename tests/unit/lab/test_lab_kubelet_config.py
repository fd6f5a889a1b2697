"""The lab's agents renew their node Lease 4 times within the server's grace period, whatever it is."""

from __future__ import annotations

import pytest

from nodeagent.controllers.options import ControllerOptions
from nodeagent.kubelet.config_file import from_document
from nodeagent.kubelet.node import RENEW_INTERVAL_FRACTION
from nodeagent.lab.cluster import kubelet_config


@pytest.mark.parametrize("grace,lease", [(8.0, 8), (40.0, 40), (2.5, 2), (0.5, 1)])
def test_the_agents_lease_lasts_the_grace_period(grace, lease):
    settings = from_document(kubelet_config(grace))  # a file the agents' --config reads
    assert settings == {"node_lease_duration": lease}
    assert lease * RENEW_INTERVAL_FRACTION <= grace / 2  # a renewal seen at every monitor pass or the next


def test_kube_defaults_pair_the_same_way():
    assert kubelet_config(ControllerOptions().node_monitor_grace_period)["nodeLeaseDurationSeconds"] == 40
