"""The whole store contract (tests/unit/store/test_contract.py) against a real etcd."""

import uuid

import pytest

from nodeagent.store.etcd import EtcdStore
from tests.unit.store.test_contract import *  # noqa: F403 (the contract's cases run here again)


@pytest.fixture  # type: ignore[no-redef]  # replaces the contract module's fixture of that name, on purpose
async def make_store(etcd_server):
    """Overrides the unit module's fixture: every test gets its own key prefix on the shared etcd."""
    prefix = f"/t-{uuid.uuid4().hex[:12]}"
    opened = []

    async def make(**kw):
        s = EtcdStore(etcd_server.endpoints, prefix=prefix, **kw)
        await s.start()
        opened.append(s)
        return s

    yield make
    for s in opened:
        await s.close()
