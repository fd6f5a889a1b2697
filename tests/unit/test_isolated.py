"""nodeagent.isolated: a call made in a child interpreter answers its result, raises the caller's named
exceptions again, and leaves the heavy modules out of this process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeagent.isolated import IsolatedCallFailed, call
from nodeagent.kubelet.tls_bootstrap import JoinRefused


def test_the_result_comes_back_from_a_child():
    # a module this process has not loaded as `heavy`: the call runs in a child
    assert call("os:getpid", heavy=("no_such_module_here",)) != __import__("os").getpid()


def test_in_process_when_the_heavy_modules_are_loaded():
    assert call("os:getpid", heavy=("os",)) == __import__("os").getpid()


def test_a_named_exception_is_raised_again_with_its_message(tmp_path):
    with pytest.raises(JoinRefused, match="invalid bootstrap token|token"):
        call("nodeagent.kubelet.tls_bootstrap:_join_answer", "https://127.0.0.1:1", "not-a-token", [], "n1",
             str(tmp_path), False, errors=(JoinRefused,), heavy=("no_such_module_here",))


def test_any_other_failure_names_the_target_and_the_error():
    with pytest.raises(IsolatedCallFailed, match=r"json:loads in a child process: .*JSONDecodeError"):
        call("json:loads", "{", heavy=("no_such_module_here",))


def test_the_agents_path_never_loads_cryptography():
    """What `nodeagent agent` imports to join and run its node components leaves cryptography out (it is
    loaded only in the children that make keys and certificates)."""
    code = ("import sys\n"
            "import nodeagent.commands.agent\n"
            "from nodeagent.commands.up import NODE_COMPONENTS\n"
            "from nodeagent.kubelet.tls_bootstrap import JoinRefused, join_in_child\n"
            "import nodeagent.kubelet.server, nodeagent.kubelet.agent\n"
            "for c in NODE_COMPONENTS: c.load()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cryptography', 'jwt')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_agents_path_leaves_out_what_only_the_control_plane_or_legacy_iptables_use():
    """dnspython (cluster DNS), PyJWT (ServiceAccount tokens) and python-iptables (on a host whose iptables
    is not legacy) stay out of what a joined agent imports."""
    from kernel import iptables

    code = ("import sys\n"
            "import nodeagent.commands.agent\n"
            "from nodeagent.commands.configs import node_configs\n"
            "from nodeagent.commands.up import NODE_COMPONENTS\n"
            "for c in NODE_COMPONENTS: c.load()\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dns', 'jwt', 'iptc'}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    want = ["iptc"] if iptables.backend() == "legacy" else []
    assert out.strip() == str(want)
