"""A function run in a short-lived child interpreter, so a long-running daemon never loads what only it needs.

`nodeagent agent` needs `cryptography` only to make keys and certificates: the join's key and CSR, the
kubelet's serving certificate, ingress's default certificate, each once at start. Loaded, it stays
resident for the process's life (its Rust extension and modules, ~11 MiB of the agent's RSS at 110 pods,
measured by bench/pod_startup.py), so those calls run in a child (`python -m nodeagent.isolated`), which
reads the call as JSON on stdin (never on its command line: a join token is a secret) and answers the
result or the exception as JSON on stdout. Its log lines go to the daemon's stderr. Where the process has
already loaded the heavy modules (`up`, whose apiserver signs certificates), the call runs in-process.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

HEAVY = ("cryptography",)


class IsolatedCallFailed(RuntimeError):
    """The child failed with an exception the caller did not name, or did not answer at all."""


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _invoke(target: str, args: Sequence[Any]) -> Any:
    out = _resolve(target)(*args)
    return asyncio.run(out) if inspect.iscoroutine(out) else out


def call(target: str, *args: Any, errors: Sequence[type[Exception]] = (),
         heavy: Sequence[str] = HEAVY) -> Any:
    """`target` ("package.module:function", sync or async) called with JSON-able `args`; its JSON-able result.
    In a child unless every module of `heavy` is loaded here already. An exception of a class in `errors`
    is raised again here with its message; any other failure raises IsolatedCallFailed. Blocking: from
    the event loop, through `asyncio.to_thread`."""
    if all(m in sys.modules for m in heavy):
        return _invoke(target, args)
    request = json.dumps({"target": target, "args": list(args),
                          "log_level": logging.getLogger().getEffectiveLevel()})
    proc = subprocess.run([sys.executable, "-m", "nodeagent.isolated"], input=request.encode(),
                          stdout=subprocess.PIPE, check=False)
    try:
        answer = json.loads(proc.stdout or b"{}")
    except ValueError:
        answer = {}
    if "result" in answer:
        return answer["result"]
    for cls in errors:
        if answer.get("error") == f"{cls.__module__}.{cls.__qualname__}":
            raise cls(answer.get("message", ""))
    raise IsolatedCallFailed(f"{target} in a child process: "
                             f"{answer.get('error', f'exit status {proc.returncode}')}: "
                             f"{answer.get('message', 'no answer (its error is in the log above)')}")


def main() -> int:
    """The child: one call read from stdin, its answer on stdout."""
    req = json.loads(sys.stdin.read())
    logging.basicConfig(level=req.get("log_level", logging.WARNING), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = _invoke(req["target"], req["args"])
    except Exception as e:  # every failure is answered; the parent decides what it means
        cls = type(e)
        print(json.dumps({"error": f"{cls.__module__}.{cls.__qualname__}", "message": str(e)}))
        return 1
    print(json.dumps({"result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
