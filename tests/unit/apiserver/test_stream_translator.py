"""The apiserver's v5 websocket → SPDY translation (KEP-4006): which requests it takes, and what the client's
frames become on the kubelet's SPDY streams."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import WSMessage, WSMsgType, web
from aiohttp.test_utils import make_mocked_request

from cri.server import spdy
from nodeagent.apiserver import stream_translator as st


def _request(headers: dict[str, str]) -> web.Request:
    return make_mocked_request("GET", "/api/v1/namespaces/d/pods/p/exec", headers=headers)


def test_only_websocket_upgrades_offering_v5_are_translated():
    v5 = {"Upgrade": "websocket", "Connection": "Upgrade",
          "Sec-WebSocket-Protocol": "v5.channel.k8s.io, v4.channel.k8s.io"}
    assert st.wants_translation(_request(v5))
    assert not st.wants_translation(_request({**v5, "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}))
    assert not st.wants_translation(_request({"Upgrade": "SPDY/3.1", "Connection": "Upgrade",
                                              "X-Stream-Protocol-Version": "v4.channel.k8s.io"}))


class _Client:
    """The client's side of the websocket: its messages, as the server iterates them."""

    def __init__(self, *frames: tuple[WSMsgType, Any]) -> None:
        self.frames = [WSMessage(t, d, None) for t, d in frames]

    def __aiter__(self) -> _Client:
        return self

    async def __anext__(self) -> WSMessage:
        if not self.frames:
            raise StopAsyncIteration
        return self.frames.pop(0)


class _Writer:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> None:
        self.data += b

    async def drain(self) -> None:
        pass


async def test_client_frames_become_spdy_stream_data_and_close_is_fin():
    size = json.dumps({"Width": 100, "Height": 40}).encode()
    ws = _Client((WSMsgType.TEXT, "\x00typed\n"), (WSMsgType.BINARY, b"\x00raw"),
                 (WSMsgType.BINARY, b"\x04" + size), (WSMsgType.PING, b""), (WSMsgType.BINARY, b"\xff\x00"),
                 (WSMsgType.BINARY, b"\x00late"), (WSMsgType.BINARY, b"\xff\x00"))
    w = _Writer()
    ids = {"error": 1, "stdin": 3, "stdout": 5, "resize": 7}
    await st._from_client(ws, w, ids)  # type: ignore[arg-type]
    frames = spdy.FrameReader().feed(bytes(w.data))
    got = [(f.stream_id, f.flags, f.data) for f in frames if isinstance(f, spdy.DataFrame)]
    assert got == [(3, 0, b"typed\n"), (3, 0, b"raw"), (7, 0, size), (3, spdy.FLAG_FIN, b"")]
