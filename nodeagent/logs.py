"""Logging set-up shared by every nodeagent process."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "info") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
    )
