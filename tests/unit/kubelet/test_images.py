import pytest

from nodeagent.kubelet.images import (
    default_pull_policy,
    pull_decision,
    pull_failed,
    pulled_message,
    pulling_message,
)


@pytest.mark.parametrize("image,policy", [("busybox", "Always"), ("busybox:latest", "Always"),
                                          ("busybox:1.36", "IfNotPresent"), ("reg:5000/busybox", "Always"),
                                          ("reg:5000/busybox:1", "IfNotPresent"),
                                          ("busybox@sha256:abc", "IfNotPresent")])
def test_default_pull_policy(image, policy):
    assert default_pull_policy(image) == policy


def test_pull_decisions():
    assert pull_decision({"image": "busybox:1", "imagePullPolicy": "Always"}, True).pull
    d = pull_decision({"image": "busybox:1", "imagePullPolicy": "IfNotPresent"}, True)
    assert not d.pull and d.message == 'Container image "busybox:1" already present on machine'
    assert pull_decision({"image": "busybox:1", "imagePullPolicy": "IfNotPresent"}, False).pull
    d = pull_decision({"image": "busybox:1", "imagePullPolicy": "Never"}, False)
    assert not d.pull and d.error_reason == "ErrImageNeverPull"
    assert d.message == 'Container image "busybox:1" is not present with pull policy of Never'
    assert pull_decision({"image": "busybox"}, True).pull  # defaulted to Always
    assert pull_decision({"image": "bad image"}, True).error_reason == "InvalidImageName"


def test_messages():
    assert pulling_message("busybox") == 'Pulling image "busybox"'
    assert pulled_message("busybox", 1.234, 2.5, 1024) == (
        'Successfully pulled image "busybox" in 1.234s (2.5s including waiting). Image size: 1024 bytes.')
    assert pulled_message("b", 0.25, 0.3, 1).startswith('Successfully pulled image "b" in 250ms (300ms')
    assert pull_failed("x", "not found") == ("ErrImagePull", 'Failed to pull image "x": not found')
