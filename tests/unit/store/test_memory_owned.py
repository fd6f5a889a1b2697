"""The memory store keeps an owned update's object without copying it in or out and hands its own object to
a shared get (the bind's three copies per pod), and copies for the plain calls."""

from nodeagent.store.memory import MemoryStore


async def test_owned_update_keeps_the_object_a_plain_one_copies() -> None:
    s = MemoryStore()
    a = await s.create("/p/a", {"metadata": {"name": "a"}, "spec": {"v": 1}})
    rev = int(a["metadata"]["resourceVersion"])
    owned = {"metadata": {"name": "a"}, "spec": {"v": 2}}
    answer = await s.update("/p/a", owned, rev, owned=True)
    assert answer["spec"] is owned["spec"] is s._data["/p/a"]["spec"]
    plain = {"metadata": {"name": "a"}, "spec": {"v": 3}}
    answer = await s.update("/p/a", plain)
    assert answer["spec"] == s._data["/p/a"]["spec"] == {"v": 3}
    assert s._data["/p/a"]["spec"] is not plain["spec"] and answer["spec"] is not s._data["/p/a"]["spec"]
    assert s._history[-2].object["spec"] == {"v": 2}  # the owned update's event, as it was written
    assert await s.get("/p/a", shared=True) is s._data["/p/a"]
    assert await s.get("/p/a") is not s._data["/p/a"]
