"""Garbage collection decisions as kubelet's kuberuntime_gc.go and image_gc_manager.go make them."""

from __future__ import annotations

import pytest

from nodeagent.kubelet.gc.containers import (
    Box,
    ContainerGCPolicy,
    Dead,
    containers_to_remove,
    sandboxes_to_remove,
)
from nodeagent.kubelet.gc.images import ImageGCPolicy, ImageRecord, amount_to_free, eviction_order


def _dead(pod: str, name: str, *created: float) -> list[Dead]:
    return [Dead(f"{pod}-{name}-{int(t)}", pod, name, t) for t in created]


def _remove(dead, policy, gone=(), terminal=(), evict_terminal=False, now=1000.0):
    return set(containers_to_remove(dead, policy, now, lambda u: u in gone, lambda u: u in terminal,
                                    evict_terminal))


def test_per_container_limit_keeps_the_newest():
    dead = _dead("a", "c", 1, 2, 3) + _dead("a", "d", 5)
    assert _remove(dead, ContainerGCPolicy()) == {"a-c-1", "a-c-2"}
    assert _remove(dead, ContainerGCPolicy(max_per_pod_container=2)) == {"a-c-1"}
    assert _remove(dead, ContainerGCPolicy(max_per_pod_container=-1)) == set()


def test_min_age_protects_young_containers():
    dead = _dead("a", "c", 1, 995, 999)
    assert _remove(dead, ContainerGCPolicy(min_age=10, max_per_pod_container=0)) == {"a-c-1"}


def test_gone_pods_lose_every_dead_container_and_terminal_ones_when_reclaiming():
    dead = _dead("gone", "c", 1) + _dead("done", "c", 2) + _dead("live", "c", 3)
    assert _remove(dead, ContainerGCPolicy(), gone={"gone"}, terminal={"done"}) == {"gone-c-1"}
    assert _remove(dead, ContainerGCPolicy(), gone={"gone"}, terminal={"done"}, evict_terminal=True) == \
        {"gone-c-1", "done-c-2"}


def test_node_wide_limit_evens_units_then_drops_the_oldest():
    dead = _dead("a", "c", 1, 2, 3) + _dead("b", "c", 4, 5)
    # 5 dead, max 2 over 2 units: one per unit
    assert _remove(dead, ContainerGCPolicy(max_per_pod_container=-1, max_containers=2)) == \
        {"a-c-1", "a-c-2", "b-c-4"}
    # max 1 over 2 units: one per unit first, then the oldest overall goes
    assert _remove(dead, ContainerGCPolicy(max_per_pod_container=-1, max_containers=1)) == \
        {"a-c-1", "a-c-2", "b-c-4", "a-c-3"}


def test_sandboxes_without_containers_go_the_newest_of_a_live_pod_stays():
    boxes = [Box("old", "live", False, 1, False), Box("new", "live", False, 2, False),
             Box("busy", "live2", False, 1, True), Box("x", "gone", False, 1, False),
             Box("ready", "gone2", True, 1, False)]
    assert set(sandboxes_to_remove(boxes, lambda u: u in ("gone", "gone2"), lambda u: False)) == {"old", "x"}


def test_image_amount_to_free_from_the_thresholds():
    p = ImageGCPolicy(high_threshold=90, low_threshold=80)
    assert amount_to_free(p, 1000, 150) == 0  # 85% used: below high
    assert amount_to_free(p, 1000, 50) == 150  # 95% used: down to 80% → 200 available
    assert amount_to_free(ImageGCPolicy(1, 0), 1000, 900) == 100


def test_image_eviction_order_least_recently_used_first_never_in_use_pinned_or_young():
    rec = {"old": ImageRecord(0, 10, 5, False, "old"), "older": ImageRecord(0, 5, 5, False, "older"),
           "never": ImageRecord(1, 0, 5, False, "never"), "used": ImageRecord(0, 1, 5, False, "used"),
           "pin": ImageRecord(0, 0, 5, True, "pin"), "young": ImageRecord(990, 0, 5, False, "young")}
    got = [c.id for c in eviction_order(rec, {"used"}, 1000, min_age=60)]
    assert got == ["never", "older", "old"]


@pytest.mark.parametrize("args,says", [
    ((101, 80), "HighThresholdPercent 101, must be in range"),
    ((80, 90), "LowThresholdPercent 90 can not be higher than HighThresholdPercent 80"),
    ((85, 80, 600, 60), "imageMaximumGCAge 60s must be greater than imageMinimumGCAge 600s"),
])
def test_bad_image_gc_policies_are_refused(args, says):
    with pytest.raises(ValueError, match=says):
        ImageGCPolicy(*args)


def test_gc_flags_reach_the_kubelet_and_bad_ones_stop_up(tmp_path):
    from tests.unit.test_configs import _up

    k = _up(tmp_path, "--image-gc-high-threshold", "70", "--image-gc-low-threshold", "60",
            "--image-minimum-gc-age", "30s", "--maximum-dead-containers-per-container", "3",
            "--maximum-dead-containers", "50", "--minimum-container-ttl-duration", "1m").kubelet
    assert k.image_gc_policy() == ImageGCPolicy(70, 60, 30.0, 0.0)
    assert k.container_gc_policy() == ContainerGCPolicy(60.0, 3, 50)
    with pytest.raises(SystemExit, match="can not be higher"):
        _up(tmp_path, "--image-gc-high-threshold", "50", "--image-gc-low-threshold", "60")
    with pytest.raises(SystemExit, match='"--image-minimum-gc-age" flag'):
        _up(tmp_path, "--image-minimum-gc-age", "soon")
