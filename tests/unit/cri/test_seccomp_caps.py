"""Localhost seccomp profile parsing and the privileged capability set (bounded by the runtime's own)."""

import errno

import pytest

from cri.runtime import caps
from kernel import caps as kcaps
from kernel.seccomp import SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, parse_json


def test_localhost_profile_rules():
    default, rules = parse_json('{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": ['
                                '{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"},'
                                '{"name": "sethostname", "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}')
    assert default == SCMP_ACT_ALLOW
    assert rules == (("chmod", SCMP_ACT_ERRNO(errno.EPERM)), ("fchmodat", SCMP_ACT_ERRNO(errno.EPERM)),
                     ("sethostname", SCMP_ACT_ERRNO(1)))


@pytest.mark.parametrize("text", ['{"syscalls": []}', '{"defaultAction": "SCMP_ACT_NOPE"}', "not json",
                                  '{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["kill"], '
                                  '"action": "SCMP_ACT_ERRNO", "args": [{"index": 0}]}]}'])
def test_bad_profiles_are_refused(text):
    with pytest.raises(ValueError):
        parse_json(text)


def test_privileged_gets_only_what_the_runtime_has(monkeypatch):
    monkeypatch.setattr(kcaps, "own_bounding", lambda: ~(1 << kcaps.NUMBER["SYS_RESOURCE"]))
    got = caps.resolve([], [], True, 40)
    assert "SYS_ADMIN" in got and "SYS_RESOURCE" not in got
    monkeypatch.setattr(kcaps, "own_bounding", lambda: -1)
    assert "SYS_RESOURCE" in caps.resolve([], [], True, 40)
