"""Pipelined nf_tables commits: batches sent in order by a thread of their own.

sendmsg releases the GIL while the kernel commits a batch, so the caller plans and encodes the next
one meanwhile (on the other core). The iptables mode's chunked initial load uses it (nftproxier.py).
"""

from __future__ import annotations

import queue
import threading
import time

from kernel import nftables as nl


class Writer:
    """Commits batches in order on a thread of its own. The socket is the caller's (bound in its
    netns); the caller does not use it until close(). After a failure the rest is not sent; put()
    and close() raise it."""

    def __init__(self, sock: nl.NftSocket) -> None:
        self.sock = sock
        self.queue: queue.Queue[nl.Batch | None] = queue.Queue(maxsize=2)  # bounds the memory held
        self.error: BaseException | None = None
        self.cpu = 0.0  # the thread's CPU seconds: the kernel's commits, mostly
        self.thread: threading.Thread | None = None
        self.echoed: list[tuple[int, int, dict[int, bytes]]] = []  # the last batch's echoed messages

    def _run(self) -> None:
        c0 = time.thread_time()
        while (b := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self.echoed = self.sock.send(b)
                except BaseException as e:  # handed to the caller
                    self.error = e
        self.cpu = time.thread_time() - c0

    def put(self, batch: nl.Batch) -> None:
        if self.error is not None:
            raise self.error
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="nft-writer", daemon=True)
            self.thread.start()
        self.queue.put(batch)

    def close(self, raise_error: bool = True) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None
        if raise_error and self.error is not None:
            raise self.error
