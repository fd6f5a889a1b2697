"""The x_tables socket floor: a table read and written back unchanged stays identical, counters included."""

import socket
import subprocess

import pytest

from kernel.netns import NetnsWorker
from kernel.xtables import XtablesError, get_info, replace_unchanged

pytestmark = pytest.mark.root

RULES = """*nat
:KUBE-SVC-TEST - [0:0]
:KUBE-SEP-TEST - [0:0]
:FOREIGN - [0:0]
[7:420] -A PREROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-TEST
[3:180] -A KUBE-SVC-TEST -m comment --comment "ns/web:http -> 10.244.0.5:8080" -m statistic --mode random \
--probability 0.50000000000 -j KUBE-SEP-TEST
-A KUBE-SEP-TEST -p tcp -m tcp -j DNAT --to-destination 10.244.0.5:8080
[11:660] -A FOREIGN -s 192.0.2.0/24 -j RETURN
COMMIT
"""


def _save(ns: str) -> str:
    out = subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-save", "-c", "-t", "nat"],
                         capture_output=True, text=True, check=True).stdout
    return "\n".join(ln for ln in out.splitlines() if not ln.startswith("#"))


def _info(table: str):
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        return get_info(s, table)


def test_replace_unchanged_keeps_rules_and_counters(res):
    ns = res.netns()
    subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-c"], input=RULES,
                   text=True, check=True)
    before = _save(ns)
    assert "[11:660] -A FOREIGN" in before and "[7:420] -A PREROUTING" in before
    worker = NetnsWorker(ns)
    try:
        timing = worker.call(replace_unchanged, "nat")
        info = worker.call(_info, "nat")
    finally:
        worker.close()
    assert timing.entries == info.num_entries and timing.size == info.size
    assert _save(ns) == before


def test_unknown_table_is_an_error(res):
    ns = res.netns()
    worker = NetnsWorker(ns)
    try:
        with pytest.raises(XtablesError):
            worker.call(replace_unchanged, "nosuchtable")
    finally:
        worker.close()
