"""A writer to be killed: creates and updates keys as fast as it can and prints every acknowledgement.

    python -m tests.unit.store.crash_writer DATASTORE DATA_DIR RUN [WORKERS]

DATASTORE is what `open_store` takes, or `sqlite:FULL` / `sqlite:NORMAL` for a synchronous mode.

Each line on stdout (flushed) is `C key revision` or `U key revision generation`, printed only after
the store acknowledged the write, so the killer knows exactly what must survive.
"""

import asyncio
import os
import sys
from typing import Any

from nodeagent.store import SQLITE_FILE, open_store
from nodeagent.store.base import Store
from nodeagent.store.sqlite import SQLiteStore


async def main(datastore: str, data_dir: str, run: str, workers: int) -> None:
    store: Store
    if datastore.startswith("sqlite:") and not datastore.startswith("sqlite://"):
        store = SQLiteStore(os.path.join(data_dir, SQLITE_FILE), synchronous=datastore.split(":", 1)[1])
    else:
        store = open_store(datastore, data_dir)
    await store.start()
    out = sys.stdout
    print("READY", flush=True)

    async def worker(w: int) -> None:
        i = 0
        while True:
            key = f"/crash/{run}/{w}/{i:07d}"
            obj: dict[str, Any] = {"kind": "Pod", "metadata": {"name": f"{w}-{i}"},
                                   "spec": {"key": key, "generation": 0}}
            created = await store.create(key, obj)
            rev = int(created["metadata"]["resourceVersion"])
            out.write(f"C {key} {rev}\n")
            if i % 3 == 0:
                obj["spec"]["generation"] = 1
                updated = await store.update(key, obj, expected_revision=rev)
                out.write(f"U {key} {updated['metadata']['resourceVersion']} 1\n")
            out.flush()
            i += 1

    await asyncio.gather(*(worker(w) for w in range(workers)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 32))
