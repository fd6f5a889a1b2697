"""iptables rules for masquerade and host ports: one `iptables-restore --noflush` per change.

The backend is the node's one (kernel.iptables.backend: the host `iptables` command's; Debian 12:
nf_tables), so `iptables-save` shows our rules next to everything else's; `NODEAGENT_IPTABLES=legacy|nft`
in the plugin's environment overrides. Every rule we add carries a comment tag naming (network,
containerID, ifname), so DEL and GC can find and remove them even when the result that made them is lost.
"""

from __future__ import annotations

import re

from cni.errors import INTERNAL, CNIError
from cni.sha import sha256

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Callable


TAG_RE = re.compile(r'--comment "?nodeagent/(\w+) net=(\S+) id=(\S+) if=([^"\s]+)"?')


def tag(kind: str, network: str, cid: str, ifname: str) -> str:
    """The comment on every rule of one attachment; `kind` is the plugin (masq, portmap)."""
    return f"nodeagent/{kind} net={network} id={cid} if={ifname}"


def chain_name(prefix: str, network: str, cid: str, ifname: str) -> str:
    """A per-attachment chain name (<= 28 chars), stable so DEL finds it without state."""
    return prefix + sha256(f"{network}/{cid}/{ifname}".encode()).hexdigest()[:16]


def restore(be: str, table: str, lines: list[str], v6: bool = False) -> None:
    import subprocess

    exe = f"ip6tables-{be}-restore" if v6 else f"iptables-{be}-restore"
    text = "\n".join([f"*{table}", *lines, "COMMIT", ""])
    p = subprocess.run([exe, "-w", "5", "--noflush"], input=text, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise CNIError(INTERNAL, f"{exe} failed", p.stderr.strip()[-500:])


def try_restore(be: str, table: str, lines: list[str], v6: bool = False) -> bool:
    try:
        restore(be, table, lines, v6)
        return True
    except CNIError:
        return False


def save(be: str, table: str, v6: bool = False) -> str:
    import subprocess

    exe = f"ip6tables-{be}-save" if v6 else f"iptables-{be}-save"
    p = subprocess.run([exe, "-t", table], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise CNIError(INTERNAL, f"{exe} failed", p.stderr.strip()[-500:])
    return p.stdout


def remove_tagged(be: str, table: str, kind: str, drop: Callable[[str, str, str], bool],
                  chain_prefixes: tuple[str, ...], v6: bool = False) -> int:
    """Delete every tagged rule whose (network, id, ifname) `drop` selects, and the chains they jump to.

    Also removes our chains (by prefix) that nothing references any more (left by an interrupted DEL).
    Returns the number of rules removed. Retried on a fresh snapshot if a concurrent writer raced us.
    """
    for attempt in range(3):
        try:
            return _remove_tagged_once(be, table, kind, drop, chain_prefixes, v6)
        except CNIError:
            if attempt == 2:
                raise
    return 0


def _remove_tagged_once(be: str, table: str, kind: str, drop: Callable[[str, str, str], bool],
                        chain_prefixes: tuple[str, ...], v6: bool) -> int:
    text = save(be, table, v6)
    chains: set[str] = set()
    referenced: set[str] = set()
    dels: list[str] = []
    for line in text.splitlines():
        if line.startswith(":"):
            name = line[1:].split()[0]
            if name.startswith(chain_prefixes):
                chains.add(name)
            continue
        if not line.startswith("-A "):
            continue
        parts = line.split()
        own_chain = parts[1].startswith(chain_prefixes)
        target = parts[parts.index("-j") + 1] if "-j" in parts else ""
        m = TAG_RE.search(line)
        if m and m.group(1) == kind and drop(*m.groups()[1:]) and not own_chain:
            dels.append("-D" + line[2:])
        elif target.startswith(chain_prefixes) and not own_chain:
            referenced.add(target)
    dead = sorted(c for c in chains if c not in referenced)
    if not dels and not dead:
        return 0
    lines = dels + [f":{c} - [0:0]" for c in dead] + [f"-X {c}" for c in dead]
    restore(be, table, lines, v6)
    return len(dels)
