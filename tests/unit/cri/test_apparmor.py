"""Which AppArmor profile a container gets (containerd's rules), and the RuntimeDefault profile's source."""

from __future__ import annotations

import os
import subprocess

import pytest

from cri.proto import api_pb2 as pb
from cri.runtime import apparmor as aa
from cri.runtime.errors import FailedPrecondition, InvalidArgument

RD, UNC, LOCAL = (
    pb.SecurityProfile.RuntimeDefault,
    pb.SecurityProfile.Unconfined,
    pb.SecurityProfile.Localhost,
)


def sec(profile: str = "", typed: tuple[pb.SecurityProfile.ProfileType, str] | None = None,
        privileged: bool = False):
    s = pb.LinuxContainerSecurityContext(apparmor_profile=profile, privileged=privileged)
    if typed is not None:
        s.apparmor.profile_type, s.apparmor.localhost_ref = typed
    return s


@pytest.mark.parametrize(
    ("ctx", "want"),
    [
        (sec(), None),
        (sec("runtime/default"), (RD, "")),
        (sec("docker/default"), (RD, "")),
        (sec("unconfined"), (UNC, "")),
        (sec("localhost/my-profile"), (LOCAL, "my-profile")),
        (sec(typed=(LOCAL, "localhost/x")), (LOCAL, "x")),  # critest sends the prefix in the typed field
        (sec(typed=(LOCAL, "x")), (LOCAL, "x")),
        (sec(typed=(RD, "")), (RD, "")),
        (sec(typed=(UNC, "")), (UNC, "")),
        # the typed field wins over the deprecated string, whatever the string says
        (sec("localhost/gone", typed=(LOCAL, "localhost/x")), (LOCAL, "x")),
        (sec("bogus", typed=(UNC, "")), (UNC, "")),
    ],
)
def test_requested(ctx, want):
    assert aa.requested(ctx) == want


@pytest.mark.parametrize(
    "ctx",
    [
        sec("bogus"),
        sec("/etc/apparmor.d/x"),  # a path without the localhost/ prefix
        sec("localhost/"),
        sec("localhost/two\nlines"),
        sec(typed=(LOCAL, "")),
        sec(typed=(RD, "x")),  # localhost_ref only goes with Localhost
        sec(typed=(UNC, "x")),
        sec(typed=(7, "")),  # type: ignore[arg-type]  # no ProfileType has 7, on purpose: refused
    ],
)
def test_invalid_requests_are_refused(ctx):
    with pytest.raises(InvalidArgument):
        aa.requested(ctx)
    with pytest.raises(InvalidArgument):
        aa.choose(ctx, True)


def test_choice_on_an_apparmor_host():
    assert aa.choose(sec(), True) == aa.Choice("default")  # nothing set: RuntimeDefault (kubernetes#51746)
    assert aa.choose(sec("runtime/default"), True).profile == aa.DEFAULT_PROFILE
    assert aa.choose(sec("unconfined"), True) == aa.NONE
    assert aa.choose(sec(typed=(UNC, "")), True).profile == ""
    assert aa.choose(sec("localhost/p"), True) == aa.Choice("localhost", "p")
    # privileged: no default profile, but an explicit Localhost one still applies (as containerd)
    assert aa.choose(sec(privileged=True), True) == aa.NONE
    assert aa.choose(sec("runtime/default", privileged=True), True) == aa.NONE
    assert aa.choose(sec("localhost/p", privileged=True), True).profile == "p"


def test_choice_on_a_host_without_apparmor():
    assert aa.choose(sec(), False) == aa.NONE
    assert aa.choose(sec("unconfined"), False) == aa.NONE
    assert aa.choose(sec(typed=(UNC, "")), False) == aa.NONE
    for ctx in (sec("runtime/default"), sec("localhost/p"), sec(typed=(RD, "")), sec(typed=(LOCAL, "p"))):
        with pytest.raises(FailedPrecondition, match="apparmor is not supported"):
            aa.choose(ctx, False)


def test_loaded_reads_the_kernel_profile_list(tmp_path):
    lst = tmp_path / "profiles"
    lst.write_text("nodeagent-default (enforce)\nmy profile (complain)\nlsb_release (enforce)\n")
    assert aa.loaded("nodeagent-default", str(lst))
    assert aa.loaded("my profile", str(lst))
    assert not aa.loaded("nodeagent", str(lst))  # a prefix of a loaded name is not that name
    assert not aa.loaded("lsb", str(lst))


def test_default_profile_uses_what_the_distribution_ships(tmp_path):
    bare = aa.default_profile("p1", str(tmp_path))
    assert bare.startswith("@{PROC}=/proc/\n") and "#include" not in bare and "abi <" not in bare
    (tmp_path / "abi").mkdir()
    (tmp_path / "abi" / "3.0").write_text("")
    (tmp_path / "tunables").mkdir()
    (tmp_path / "tunables" / "global").write_text("")
    (tmp_path / "abstractions").mkdir()
    (tmp_path / "abstractions" / "base").write_text("")
    full = aa.default_profile("p1", str(tmp_path))
    assert full.startswith("abi <abi/3.0>,\n#include <tunables/global>\n")
    assert "  #include <abstractions/base>\n" in full
    for text in (bare, full):
        assert "profile p1 flags=(attach_disconnected,mediate_deleted) {" in text
        assert (
            "signal (send,receive) peer=p1," in text
            and "ptrace (trace,tracedby,read,readby) peer=p1," in text
        )
        assert "deny mount," in text and "deny @{PROC}/sysrq-trigger rwklx," in text
        assert "deny /sys/kernel/security/** rwklx," in text
        assert text.count("{") == text.count("}") and text.rstrip().endswith("}")


@pytest.mark.skipif(aa.parser() is None or not os.path.isdir(aa.POLICY_DIR), reason="no apparmor_parser here")
def test_default_profile_compiles():
    """apparmor_parser accepts the profile (-Q: compile only, nothing loaded into the kernel)."""
    parser = aa.parser()
    assert parser is not None
    p = subprocess.run(
        [parser, "-Q", "-K"], input=aa.default_profile(), capture_output=True, text=True, check=False
    )
    assert p.returncode == 0 and not p.stderr, p.stderr
