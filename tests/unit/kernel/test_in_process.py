"""kernel.in_process: servers found by the socket they serve, one registry per kind, keys normalised."""

import pytest

from kernel.in_process import Registry, key


@pytest.mark.parametrize("endpoint", ["unix:///run/x.sock", "unix:/run/x.sock", "/run/x.sock",
                                      "/run//x.sock", "/run/./y/../x.sock", "unix:///run/x.sock/"])
def test_every_spelling_of_a_socket_is_one_key(endpoint):
    assert key(endpoint) == "/run/x.sock"


def test_a_relative_path_stays_relative():
    assert key("unix:run/x.sock") == key("./run/x.sock") == "run/x.sock"


def test_a_server_is_found_under_any_spelling_of_its_socket_until_it_leaves():
    reg: Registry[object] = Registry()
    server = object()
    reg.register("/run/x.sock", server)
    assert reg.lookup("unix:///run/x.sock") is server and reg.lookup("/run//x.sock") is server
    reg.unregister("unix:/run/x.sock", server)
    assert reg.lookup("/run/x.sock") is None


def test_unknown_and_empty_keys_find_nothing():
    reg: Registry[object] = Registry()
    reg.register("/run/x.sock", object())
    assert reg.lookup("/run/y.sock") is None
    assert reg.lookup(None) is None and reg.lookup("") is None


def test_a_stopped_server_does_not_remove_the_one_started_after_it():
    reg: Registry[object] = Registry()
    old, new = object(), object()
    reg.register("/run/x.sock", old)
    reg.register("/run/x.sock", new)
    reg.unregister("/run/x.sock", old)
    assert reg.lookup("/run/x.sock") is new


def test_servers_of_other_sockets_and_other_registries_are_not_seen():
    a, b = Registry[object](), Registry[object]()
    one, two = object(), object()
    a.register("/run/one.sock", one)
    a.register("/run/two.sock", two)
    assert a.lookup("/run/one.sock") is one and a.lookup("/run/two.sock") is two
    a.unregister("/run/one.sock", one)
    assert a.lookup("/run/one.sock") is None and a.lookup("/run/two.sock") is two
    assert b.lookup("/run/two.sock") is None
