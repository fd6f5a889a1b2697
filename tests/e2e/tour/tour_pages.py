"""Reading and rewriting the tour's pages (docs/tour/*.md): their ```console blocks hold `$ command` lines,
each followed by the output it printed on a live node.

The pages show the default instance's names (/var/lib/nodeagent, bridge na0, /sys/fs/cgroup/<c>/kubepods,
node1); a test instance has its own, so commands are translated to it before they run and their output
translated back before it is compared or written. Comparing is by shape: volatile tokens (numbers,
addresses, hashes, ages) are normalised, and every line the page shows must still be printed.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

TOUR = Path(__file__).resolve().parents[3] / "docs" / "tour"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


@dataclasses.dataclass
class Step:
    command: str
    output: str


def steps(text: str) -> list[Step]:
    """Every `$ command` of the page's console blocks, in order, with the output shown under it."""
    out: list[Step] = []
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append(Step(line[2:], ""))
            elif out:
                out[-1].output += line + "\n"
    return out


def rewrite(text: str, outputs: list[str]) -> str:
    """The page with each command's output replaced, in order."""
    it = iter(outputs)

    def block(m: re.Match[str]) -> str:
        lines: list[str] = []
        for line in m.group(1).splitlines():
            if line.startswith("$ "):
                lines.append(line)
                got = next(it).rstrip("\n")
                if got:
                    lines.extend(got.splitlines())
        return "```console\n" + "\n".join(lines) + "\n```"

    return BLOCK.sub(block, text)


@dataclasses.dataclass
class Names:
    """The test instance's names against the default instance's, for translating both ways."""

    commands: list[tuple[str, str]]  # (default, this instance) in commands, longest first
    outputs: list[tuple[str, str]]  # (default, this instance) in outputs, longest first
    cgroup_root: str

    def to_instance(self, command: str) -> str:
        for default, mine in self.commands:
            command = command.replace(default, mine)
        if self.cgroup_root:
            command = re.sub(r"(/sys/fs/cgroup/[a-z_,]+)/kubepods", rf"\1/{self.cgroup_root}/kubepods",
                             command)
        return command

    def to_default(self, output: str) -> str:
        if self.cgroup_root:
            output = output.replace(f"/{self.cgroup_root}/kubepods", "/kubepods")
        for default, mine in self.outputs:
            output = output.replace(mine, default)
        return output


_VOLATILE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "UID"),
    (re.compile(r"\b[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:/\d+)?"), "IP6"),
    (re.compile(r"\b[0-9a-f]{12,64}\b"), "HEX"),
    (re.compile(r"\bKUBE-(SVC|SEP|EXT|FW|SVL)-[A-Z0-9]{16}\b"), r"KUBE-\1-HASH"),
    (re.compile(r"\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b"), "MAC"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "IP"),
    (re.compile(r"\bna[0-9a-f]{13}\b"), "VETH"),
    (re.compile(r"-[a-z0-9]{10}-[a-z0-9]{5}\b"), "-RS-POD"),
    (re.compile(r"\b(\d+[smhd])+\b"), "AGE"),
    (re.compile(r"\d+"), "N"),
    (re.compile(r"[ \t]+"), " "),
]


def shape(line: str) -> str:
    line = line.strip()
    for pattern, repl in _VOLATILE:
        line = pattern.sub(repl, line)
    return line


def missing_lines(shown: str, live: str) -> list[str]:
    """The page's lines whose shape the live output no longer has."""
    have = {shape(x) for x in live.splitlines()}
    return [x for x in shown.splitlines() if x.strip() and shape(x) not in have]
