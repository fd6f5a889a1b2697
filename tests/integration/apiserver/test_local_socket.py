"""The embedded components' local socket on a real `nodeagent server`: root-only, named in the components'
kubeconfigs (not the admin's), used by components of other processes (those in the server's process call
its handlers in-process), and every request on it
authenticated as the component itself and authorized by RBAC as over HTTPS (not as admin)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import time

import pytest
import yaml

from nodeagent.client import local_socket
from nodeagent.client.rest import Client, ClientError
from nodeagent.testing.apiserver import start_server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the socket is root's: the test runs as root")

COMPONENT_KUBECONFIGS = ("scheduler.kubeconfig", "controller-manager.kubeconfig", "coredns.kubeconfig")
SELF_REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("localsock"),
                       extra=["--without=ingress", "--without=podnetwork"], timeout=90)
    # the server writes the components' kubeconfigs one after another, after the admin's
    deadline = time.monotonic() + 30
    while not all((srv.data_dir / n).exists() for n in COMPONENT_KUBECONFIGS) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield srv
    assert srv.stop() == 0, srv.log()
    assert not (srv.data_dir / "apiserver.sock").exists(), "the stopped server leaves no socket behind"


def _connect_as_nobody(path: str) -> int:
    """0 if uid/gid 65534 could connect, else the errno it got."""
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report by exit code
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                code = 0
            except OSError as e:
                code = e.errno or 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_socket_is_root_only(server):
    path = str(server.data_dir / "apiserver.sock")
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
    import errno
    assert _connect_as_nobody(path) == errno.EACCES


def test_only_the_components_kubeconfigs_name_it(server):
    path = str(server.data_dir / "apiserver.sock")
    for name in COMPONENT_KUBECONFIGS:
        cluster = yaml.safe_load((server.data_dir / name).read_text())["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://")
        assert local_socket.usable(cluster) == path, name
    admin = yaml.safe_load(server.kubeconfig.read_text())["clusters"][0]["cluster"]
    assert "extensions" not in admin  # kubectl, the load generator, joined agents: HTTPS unchanged
    assert Client.from_kubeconfig(server.kubeconfig).unix_socket is None


def test_the_embedded_components_call_the_handlers_in_process_not_on_the_socket(server):
    """The scheduler and controllers in the server's process hold their watches through the in-process
    entry: the server counts their node watches while the kernel's table of Unix sockets shows nobody
    connected under the socket's path (it serves the components of other processes)."""
    path = str(server.data_dir / "apiserver.sock")

    async def node_watchers() -> float:
        async with Client.from_kubeconfig(server.kubeconfig) as admin:
            text = await admin.request("GET", "/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith('apiserver_registered_watchers{resource="nodes"}'))

    deadline = time.monotonic() + 60  # the components start their informers a moment after the server
    while (watching := asyncio.run(node_watchers())) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert watching >= 1, "no component watches nodes"
    assert _connected(path) == 0, f"a component of the server's own process connected on {path}"


def _connected(path: str) -> int:
    n = 0
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        fields = line.split()  # Num RefCount Protocol Flags Type St Inode Path
        if len(fields) >= 8 and fields[7] == path and fields[5] == "03":  # SS_CONNECTED
            n += 1
    return n


def test_a_request_on_the_socket_is_the_component_itself_and_rbac_refuses_what_its_role_does_not_allow(
        server):
    async def main() -> None:
        admin = Client.from_kubeconfig(server.kubeconfig)
        comp = Client.from_kubeconfig(server.data_dir / "scheduler.kubeconfig")
        try:
            assert comp.unix_socket == str(server.data_dir / "apiserver.sock")
            review = await comp.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                        SELF_REVIEW)
            assert review["status"]["userInfo"]["username"] == "system:kube-scheduler"
            assert "system:masters" not in review["status"]["userInfo"].get("groups", [])
            await comp.list("nodes")  # system:kube-scheduler may list nodes
            before = await _forbidden_secret_creates(admin)
            with pytest.raises(ClientError) as e:
                await comp.create("secrets", {"apiVersion": "v1", "kind": "Secret",
                                              "metadata": {"name": "not-yours"}}, "default")
            assert e.value.code == 403 and e.value.reason == "Forbidden"
            assert 'User "system:kube-scheduler" cannot create resource "secrets"' in e.value.message
            with pytest.raises(ClientError) as nf:
                await admin.get("secrets", "not-yours", "default")
            assert nf.value.not_found  # refused: nothing was written
            # the refusal went through the same handler chain's metrics as an HTTPS request does
            assert await _forbidden_secret_creates(admin) == before + 1
            # a token the server does not know is refused on the socket as on HTTPS
            stranger = Client("https://unused:6443", "no-such-token", unix_socket=comp.unix_socket)
            try:
                with pytest.raises(ClientError) as u:
                    await stranger.list("nodes")
                assert u.value.code == 401
            finally:
                await stranger.close()
        finally:
            await comp.close()
            await admin.close()

    asyncio.run(main())


async def _forbidden_secret_creates(admin: Client) -> float:
    text = await admin.request("GET", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="secrets"' in line \
                and 'code="403"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total
