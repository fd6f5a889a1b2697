"""The hot path's hand-encoded rtnetlink requests, byte for byte (the kernel's own answer is checked by
tests/integration/cni/test_options.py)."""

import socket
import struct

from kernel import rtnl


def test_set_hairpin_is_a_bridge_setlink_with_the_port_mode_nested_in_protinfo():
    msg = rtnl.set_hairpin(7, True, 3)
    length, mtype, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (length, mtype, seq) == (len(msg), 19, 3)  # RTM_SETLINK
    assert flags == rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK
    family, _type, index, _flags, _change = struct.unpack_from("=BxHiII", msg, 16)
    assert (family, index) == (socket.AF_BRIDGE, 7)
    alen, atype = struct.unpack_from("=HH", msg, 32)
    assert atype == 12 | 0x8000 and alen == 4 + 8  # IFLA_PROTINFO, nested: one u8 attribute padded to 8
    assert msg[36:41] == struct.pack("=HHB", 5, 4, 1)  # IFLA_BRPORT_MODE = 1
    assert rtnl.set_hairpin(7, False, 3)[40] == 0
    assert len(msg) % 4 == 0
