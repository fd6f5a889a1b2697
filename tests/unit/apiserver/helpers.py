"""What the apiserver's unit tests share."""

from nodeagent.api.resources import Resource, lookup


def resource(group: str, version: str, name: str) -> Resource:
    """A resource of the built-in table (`lookup` answers None only for names the table lacks)."""
    r = lookup(group, version, name)
    assert r is not None, f"{group or 'core'}/{version} {name} is not in the resource table"
    return r
