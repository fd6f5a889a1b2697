"""SPDY/3.1 framing and session logic, against byte sequences laid out as the SPDY/3 draft describes."""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from cri.server import spdy
from tests.integration.cri.spdy_client import SPDY3_DICT  # the test client's own copy of the dictionary


def _client_compressor():
    return zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, SPDY3_DICT)


def _block(z, pairs: list[tuple[bytes, bytes]]) -> bytes:
    raw = struct.pack(">I", len(pairs)) + b"".join(
        struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in pairs)
    return z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH)


def _syn_stream(z, stream_id: int, pairs, flags: int = 0) -> bytes:
    """SYN_STREAM built by hand: C=1|version 3|type 1, flags|length, stream id, associated id,
    priority (3 bits)|unused, slot, compressed name/value block."""
    body = bytes.fromhex(f"{stream_id:08x}") + bytes(4) + bytes([0x60, 0x00]) + _block(z, pairs)
    return bytes([0x80, 0x03, 0x00, 0x01, flags]) + len(body).to_bytes(3, "big") + body


class Harness:
    def __init__(self) -> None:
        self.out = bytearray()
        self.streams: list[spdy.Stream] = []
        self.session = spdy.Session(self._send, self.streams.append)

    async def _send(self, data: bytes) -> None:
        self.out += data

    async def flush(self) -> list[spdy.Frame]:
        for _ in range(5):
            await asyncio.sleep(0)
        frames = spdy.FrameReader().feed(bytes(self.out))
        self.out.clear()
        return frames


def run(coro):
    return asyncio.run(coro)


def test_dictionary_is_the_one_kubectl_carries():
    assert len(spdy.DICTIONARY) == 1423 and spdy.DICTIONARY == SPDY3_DICT
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")
    kubectl = Path("/usr/bin/kubectl")
    if not kubectl.exists():
        pytest.skip("no /usr/bin/kubectl to compare with")
    assert spdy.DICTIONARY in kubectl.read_bytes()  # Go's spdy package embeds the same bytes


def test_control_frames_encode_as_the_spec_lays_them_out():
    assert spdy.ping(1) == bytes.fromhex("80030006" "00000004" "00000001")
    assert spdy.rst_stream(3, spdy.CANCEL) == bytes.fromhex("80030003" "00000008" "00000003" "00000005")
    assert spdy.goaway(5) == bytes.fromhex("80030007" "00000008" "00000005" "00000000")
    assert spdy.window_update(1, 100) == bytes.fromhex("80030009" "00000008" "00000001" "00000064")
    assert spdy.settings({7: 1024}) == bytes.fromhex("80030004" "0000000c" "00000001" "00000007" "00000400")
    assert spdy.data_frame(1, spdy.FLAG_FIN, b"hi") == bytes.fromhex("00000001" "01000002") + b"hi"
    assert spdy.encode_header_block({"streamtype": "error"}) == (
        b"\x00\x00\x00\x01" b"\x00\x00\x00\x0astreamtype" b"\x00\x00\x00\x05error")


def test_frame_reader_handles_any_fragmentation_and_rejects_other_versions():
    wire = spdy.ping(9) + spdy.data_frame(3, 0, b"abc") + spdy.data_frame(3, spdy.FLAG_FIN, b"")
    whole = spdy.FrameReader().feed(wire)
    r = spdy.FrameReader()
    piecewise = [f for i in range(len(wire)) for f in r.feed(wire[i:i + 1])]
    assert whole == piecewise == [spdy.ControlFrame(spdy.PING, 0, b"\x00\x00\x00\x09"),
                                  spdy.DataFrame(3, 0, b"abc"), spdy.DataFrame(3, spdy.FLAG_FIN, b"")]
    assert r.pending == 0
    with pytest.raises(spdy.ProtocolError):
        spdy.FrameReader().feed(bytes.fromhex("80020006" "00000004" "00000001"))  # SPDY/2


def test_header_blocks_round_trip_through_one_zlib_stream_per_direction():
    c, d = spdy.HeaderCompressor(), spdy.HeaderDecompressor()
    blocks: list[dict[str, str | list[str]]] = [
        {"streamtype": "stdout"}, {"streamtype": "data", "port": "8080", "requestid": "0"},
        {"x-multi": ["a", "b"]}]
    for h in blocks:
        got = d.decompress(c.compress(h))
        assert got == {k: (v if isinstance(v, list) else [v]) for k, v in h.items()}
    # the second block of a stream depends on the first: a fresh decompressor cannot read it alone
    c2 = spdy.HeaderCompressor()
    c2.compress({"streamtype": "stdout"})
    with pytest.raises(spdy.ProtocolError):
        spdy.HeaderDecompressor().decompress(c2.compress({"streamtype": "stdout"}))


def test_hand_built_syn_stream_is_accepted_and_answered_with_syn_reply():
    async def go():
        h = Harness()
        h.session.start()
        z = _client_compressor()
        h.session.feed(_syn_stream(z, 1, [(b"streamtype", b"error")]))
        h.session.feed(_syn_stream(z, 3, [(b"streamtype", b"stdout")], flags=spdy.FLAG_FIN))
        frames = await h.flush()
        assert [s.id for s in h.streams] == [1, 3]
        assert h.streams[0].header("streamType") == "error" and h.streams[0].priority == 3
        assert h.streams[1].remote_closed and await h.streams[1].read() == b""
        inflate = zlib.decompressobj(15, SPDY3_DICT)  # our own reading of the server's header blocks
        replies = [f for f in frames if isinstance(f, spdy.ControlFrame) and f.type == spdy.SYN_REPLY]
        assert [struct.unpack(">I", f.payload[:4])[0] for f in replies] == [1, 3]
        for f in replies:
            assert inflate.decompress(f.payload[4:]) == b"\x00\x00\x00\x00"  # an empty name/value block
        await h.session.close()
        frames = await h.flush()
        assert frames[-1] == spdy.ControlFrame(spdy.GOAWAY, 0, struct.pack(">II", 3, spdy.GOAWAY_OK))
    run(go())


def test_bad_stream_ids_and_unknown_streams_are_reset():
    async def go():
        h = Harness()
        h.session.start()
        z = _client_compressor()
        h.session.feed(_syn_stream(z, 2, [(b"streamtype", b"error")]))  # even: a server id
        h.session.feed(_syn_stream(z, 5, [(b"streamtype", b"error")]))
        h.session.feed(_syn_stream(z, 3, [(b"streamtype", b"error")]))  # ids must grow
        h.session.feed(spdy.data_frame(7, 0, b"x"))
        frames = await h.flush()
        rsts = [struct.unpack(">II", f.payload) for f in frames
                if isinstance(f, spdy.ControlFrame) and f.type == spdy.RST_STREAM]
        assert rsts == [(2, spdy.PROTOCOL_ERROR), (3, spdy.PROTOCOL_ERROR), (7, spdy.INVALID_STREAM)]
        assert [s.id for s in h.streams] == [5]
        await h.session.close()
    run(go())


def test_ping_from_the_client_is_echoed_and_ours_are_not():
    async def go():
        h = Harness()
        h.session.start()
        h.session.feed(spdy.ping(7) + spdy.ping(8))
        assert await h.flush() == [spdy.ControlFrame(spdy.PING, 0, b"\x00\x00\x00\x07")]
        await h.session.close()
    run(go())


def test_reading_gives_window_back_and_peer_windows_bound_our_sends():
    async def go():
        h = Harness()
        h.session.start()
        z = _client_compressor()
        h.session.feed(_syn_stream(z, 1, [(b"streamtype", b"stdin")]))
        s = h.streams[0]
        h.session.feed(spdy.data_frame(1, 0, b"x" * 1000))
        assert h.session.buffered == 1000
        assert await s.read() == b"x" * 1000 and h.session.buffered == 0
        frames = await h.flush()
        ups = [struct.unpack(">II", f.payload) for f in frames
               if isinstance(f, spdy.ControlFrame) and f.type == spdy.WINDOW_UPDATE]
        assert ups == [(1, 1000), (0, 1000)]
        # before the peer shows flow control (spdystream never does) sends are not held back
        await s.write(b"a" * 70000)
        assert sum(len(f.data) for f in await h.flush() if isinstance(f, spdy.DataFrame)) == 70000
        # a peer that does flow control: 70000 sent already exceed the 64 KiB stream window
        h.session.feed(spdy.window_update(0, 1 << 20))
        assert h.session.peer_flow_control
        writer = asyncio.create_task(s.write(b"b" * 10000))
        await h.flush()
        assert not writer.done()
        h.session.feed(spdy.window_update(1, 70000 - spdy.INITIAL_WINDOW + 4000))
        frames = await h.flush()
        assert sum(len(f.data) for f in frames if isinstance(f, spdy.DataFrame)) == 4000
        assert not writer.done()
        h.session.feed(spdy.window_update(1, 6000))
        await asyncio.wait_for(writer, 1)
        assert sum(len(f.data) for f in await h.flush() if isinstance(f, spdy.DataFrame)) == 6000
        # SETTINGS INITIAL_WINDOW_SIZE moves every open stream's window by the difference
        h.session.feed(spdy.settings({spdy.SETTINGS_INITIAL_WINDOW_SIZE: spdy.INITIAL_WINDOW + 500}))
        assert s.send_window == 500
        await s.close()
        h.session.feed(spdy.data_frame(1, spdy.FLAG_FIN, b""))
        assert await s.read() == b"" and 1 not in h.session.streams
        await h.session.close()
    run(go())


def test_rst_from_the_client_ends_the_stream_and_eof_ends_the_session():
    async def go():
        h = Harness()
        h.session.start()
        z = _client_compressor()
        h.session.feed(_syn_stream(z, 1, [(b"streamtype", b"data")]))
        h.session.feed(_syn_stream(z, 3, [(b"streamtype", b"data")]))
        h.session.feed(spdy.rst_stream(1, spdy.CANCEL))
        a, b = h.streams
        assert a.reset and await a.read() == b""
        with pytest.raises(ConnectionResetError):
            await a.write(b"late")
        h.session.feed(spdy.goaway(3))
        h.session.feed(_syn_stream(z, 5, [(b"streamtype", b"data")]))  # refused after GOAWAY
        assert [s.id for s in h.streams] == [1, 3]
        h.session.feed_eof()
        await asyncio.wait_for(h.session.wait_closed(), 1)
        assert await b.read() == b""
    run(go())


def test_garbage_ends_the_session_with_a_protocol_error_goaway():
    async def go():
        h = Harness()
        h.session.start()
        h.session.feed(bytes.fromhex("80030001" "00000002") + b"\x00\x01")  # SYN_STREAM too short
        assert h.session.closed
        frames = await h.flush()
        assert frames == [
            spdy.ControlFrame(spdy.GOAWAY, 0, struct.pack(">II", 0, spdy.GOAWAY_PROTOCOL_ERROR))]
    run(go())


def test_protocol_negotiation_takes_the_clients_first_served_offer():
    from aiohttp.test_utils import make_mocked_request
    from multidict import CIMultiDict

    from cri.server.spdy_streams import EXEC_SPDY_PROTOCOLS, negotiate

    def req(*offers):
        return make_mocked_request("POST", "/exec/t", headers=CIMultiDict(
            [("Upgrade", "SPDY/3.1")] + [("X-Stream-Protocol-Version", o) for o in offers]))
    assert negotiate(req("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io"),
                     EXEC_SPDY_PROTOCOLS, "channel.k8s.io") == "v4.channel.k8s.io"
    offered = req("v2.channel.k8s.io, channel.k8s.io")
    assert negotiate(offered, EXEC_SPDY_PROTOCOLS, "x") == "v2.channel.k8s.io"
    assert negotiate(req(), EXEC_SPDY_PROTOCOLS, "channel.k8s.io") == "channel.k8s.io"  # legacy: no offer
    assert negotiate(req("v9.channel.k8s.io"), EXEC_SPDY_PROTOCOLS, "channel.k8s.io") is None


def test_port_forward_pairs_streams_by_request_id_or_by_legacy_stream_ids():
    import socket

    from cri.server.spdy_streams import PortForwarder

    async def go():
        h = Harness()
        h.session.start()
        pods_end: dict[int, socket.socket] = {}

        async def connect(port: int) -> socket.socket:
            if port == 9:
                raise ConnectionRefusedError(111, "Connection refused")
            ours, theirs = socket.socketpair()
            pods_end[port] = theirs
            return ours
        fwd = PortForwarder(h.session, connect)
        h.session._on_stream = fwd.on_stream
        z = _client_compressor()
        # with requestID headers, data before error on purpose
        h.session.feed(_syn_stream(z, 1, [(b"streamtype", b"data"), (b"port", b"80"), (b"requestid", b"7")]))
        h.session.feed(_syn_stream(z, 3, [(b"streamtype", b"error"), (b"port", b"80"), (b"requestid", b"7")]))
        # a legacy client: no requestID; the data stream's id is its error stream's + 2
        h.session.feed(_syn_stream(z, 5, [(b"streamtype", b"error"), (b"port", b"81")]))
        h.session.feed(_syn_stream(z, 7, [(b"streamtype", b"data"), (b"port", b"81")]))
        h.session.feed(_syn_stream(z, 9, [(b"streamtype", b"error"), (b"port", b"9"), (b"requestid", b"8")]))
        h.session.feed(_syn_stream(z, 11, [(b"streamtype", b"data"), (b"port", b"9"), (b"requestid", b"8")]))
        h.session.feed(spdy.data_frame(1, spdy.FLAG_FIN, b"to-80"))
        h.session.feed(spdy.data_frame(7, 0, b"to-81"))
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(pods_end) == 2:
                break
        loop = asyncio.get_running_loop()
        for port, expect in ((80, b"to-80"), (81, b"to-81")):
            pods_end[port].setblocking(False)
            got = b""
            while len(got) < len(expect):
                got += await asyncio.wait_for(loop.sock_recv(pods_end[port], 100), 2)
            assert got == expect
        assert await asyncio.wait_for(loop.sock_recv(pods_end[80], 100), 2) == b""  # FIN became SHUT_WR
        await loop.sock_sendall(pods_end[81], b"from-81")
        pods_end[81].close()
        pods_end[80].close()
        for _ in range(50):
            await asyncio.sleep(0.01)
        frames = spdy.FrameReader().feed(bytes(h.out))
        data: dict[int, bytes] = {}
        fins = set()
        for f in frames:
            if isinstance(f, spdy.DataFrame):
                data[f.stream_id] = data.get(f.stream_id, b"") + f.data
                if f.flags & spdy.FLAG_FIN:
                    fins.add(f.stream_id)
        assert data.get(7) == b"from-81" and 7 in fins and 1 in fins
        assert b"9" in data[9] and b"refused" in data[9].lower()  # the failure is on request 8's error stream
        assert {3, 5, 9, 11} <= fins
        await fwd.close()
        await h.session.close()
    run(go())
