"""ARP frames as RFC 826 lays them out, parsed back; a reply goes to the asker; gratuitous ARP is sent as
both kinds."""

from __future__ import annotations

from kernel import arp

MAC = arp.mac_bytes("02:00:00:00:00:01")
ASKER = arp.mac_bytes("02:00:00:00:00:99")


def test_request_round_trip_and_reply_to_the_asker() -> None:
    req = arp.frame(arp.REQUEST, ASKER, "192.0.2.1", b"\x00" * 6, "192.0.2.10")
    assert len(req) == 42 and req[12:14] == b"\x08\x06"
    pkt = arp.parse(req)
    assert pkt == arp.ArpPacket(arp.REQUEST, ASKER, "192.0.2.1", b"\x00" * 6, "192.0.2.10")
    rep = arp.reply_to(pkt, MAC)
    assert rep[:6] == ASKER and rep[6:12] == MAC
    back = arp.parse(rep)
    assert back == arp.ArpPacket(arp.REPLY, MAC, "192.0.2.10", ASKER, "192.0.2.1")


def test_gratuitous_is_a_broadcast_request_and_reply_for_the_address() -> None:
    frames = [arp.parse(f) for f in arp.gratuitous("192.0.2.10", MAC)]
    assert [f.op for f in frames if f] == [arp.REQUEST, arp.REPLY]
    assert all(f and f.sender_ip == f.target_ip == "192.0.2.10" and f.sender_mac == MAC for f in frames)


def test_other_frames_are_not_arp() -> None:
    assert arp.parse(b"\x00" * 10) is None
    ipv4 = b"\xff" * 12 + b"\x08\x00" + b"\x00" * 28
    assert arp.parse(ipv4) is None
    assert arp.mac_text(MAC) == "02:00:00:00:00:01"
