"""Issue 45: a web page that learnt the URL cannot drive the served UI. The websocket is
accepted only from the page's own origin (or one configured); the page may be framed only by
its own origin, a notebook on this machine or one configured; the URL is never sent on as a
referrer. Checked with a real websocket client (aiohttp, which textual-serve brings)."""

from __future__ import annotations

import asyncio
import http.client
from pathlib import Path

import pytest

aiohttp = pytest.importorskip("aiohttp")

from backstep.process.serve import configured_origins  # noqa: E402
from backstep.process.served import ServedUI, ui_command  # noqa: E402

TRACE = str(Path(__file__).parent / "fixtures" / "small_trace.jsonl")


def websocket(ui: ServedUI, origin: str | None) -> int:
    """The status the websocket's handshake gets (101: open), from a real client."""

    async def go() -> int:
        headers = {} if origin is None else {"Origin": origin}
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(
                        f"http://127.0.0.1:{ui.port}{ui.path}ws?width=80&height=24",
                        headers=headers, timeout=aiohttp.ClientWSTimeout(ws_receive=30)) as ws:
                    await ws.close()
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    return asyncio.run(go())


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1",
                                    "http://127.0.0.1:1", "https://evil.example:443"])
def test_a_page_elsewhere_cannot_open_the_websocket(served: ServedUI, origin: str) -> None:
    assert websocket(served, origin) == 403


def test_our_own_page_and_a_script_can(served: ServedUI) -> None:
    assert websocket(served, f"http://127.0.0.1:{served.port}") == 101
    assert websocket(served, None) == 101  # no Origin: not a browser (it has the token)


def test_a_configured_origin_can(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a tunnel or proxy whose origin BACKSTEP_SERVE_URL names."""
    monkeypatch.setenv("BACKSTEP_SERVE_URL", "https://Hub.example:8443/user/ada/proxy/{port}/")
    monkeypatch.setenv("BACKSTEP_SERVE_ORIGINS", "http://nb.example:8888 javascript:x")
    assert configured_origins() == ["https://hub.example:8443", "http://nb.example:8888"]
    ui = ServedUI(ui_command(["show", TRACE]))
    ui.start()
    try:
        assert websocket(ui, "https://hub.example:8443") == 101
        assert websocket(ui, "http://evil.example") == 403
        frame = page_headers(ui)["Content-Security-Policy"]
        assert "https://hub.example:8443" in frame and "http://nb.example:8888" in frame
    finally:
        ui.stop()


def page_headers(ui: ServedUI, path: str | None = None) -> dict[str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    try:
        connection.request("GET", path or ui.path)
        response = connection.getresponse()
        response.read()
        return dict(response.getheaders())
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["{p}", "{p}static/js/textual.js", "/wrong/", "{p}nothing"])
def test_no_page_elsewhere_may_frame_it_and_no_referrer_leaks_the_url(
        served: ServedUI, path: str) -> None:
    headers = page_headers(served, path.format(p=served.path))
    policy = headers["Content-Security-Policy"]
    assert policy.startswith("frame-ancestors 'self' ")
    assert "*" not in policy.replace(":*", "")  # ports of loopback only, never any host
    assert "http://localhost:*" in policy  # a notebook on this machine
    assert headers["Referrer-Policy"] == "no-referrer"
