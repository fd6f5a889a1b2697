"""Progress events a pull or import reports to an optional callback (the CLI draws a tqdm bar from them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

RESOLVED = "resolved"  # manifest found: total = bytes of all layers + config
DOWNLOAD = "download"  # blob bytes received so far (current of total)
UNPACK = "unpack"  # layer bytes read while unpacking
EXISTS = "exists"  # layer already in the store: nothing to fetch
LAYER_DONE = "layer-done"
DONE = "done"


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    phase: str
    ref: str
    digest: str = ""
    current: int = 0
    total: int = 0


Progress = Callable[[ProgressEvent], None]


def emit(progress: Progress | None, event: ProgressEvent) -> None:
    """Report to the callback; a failing callback must never fail the pull."""
    if progress is None:
        return
    try:
        progress(event)
    except Exception:  # a display problem is not an image problem
        import logging

        logging.getLogger(__name__).debug("progress callback failed", exc_info=True)
